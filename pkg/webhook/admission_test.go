package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

const managerUser = "system:serviceaccount:captf-system:captf-manager"

func machine(providerID string) *infrav1.TerraformMachine {
	m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}}}
	m.Spec.Module.Inline = "a"
	m.Spec.ProviderID = providerID
	return m
}

func request(op admissionv1.Operation, user string, obj, old runtime.Object) *admissionv1.AdmissionRequest {
	raw := func(o runtime.Object) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, _ := json.Marshal(o)
		return runtime.RawExtension{Raw: b}
	}
	kind := "TerraformCluster"
	switch obj.(type) {
	case *infrav1.TerraformMachine:
		kind = "TerraformMachine"
	case *infrav1.TerraformMachinePool:
		kind = "TerraformMachinePool"
	case *infrav1.TerraformMachineTemplate:
		kind = "TerraformMachineTemplate"
	case *infrav1.TerraformMachinePoolTemplate:
		kind = "TerraformMachinePoolTemplate"
	}
	return &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Group: infrav1.GroupName, Version: "v1alpha1", Kind: kind},
		Name:      "m",
		Namespace: "ns",
		Operation: op,
		UserInfo:  authenticationv1.UserInfo{Username: user},
		Object:    raw(obj),
		OldObject: raw(old),
	}
}

// TestIdentityRule: only the manager writes provider IDs; a clusterctl move
// into a paused Cluster may create them; other fields stay open to others.
func TestIdentityRule(t *testing.T) {
	paused := map[string]bool{"moved": true, "live": false, "work": false}
	h := &Handler{ManagerUser: managerUser, Cluster: func(_ context.Context, _, name string) (bool, bool, error) {
		p, found := paused[name]
		return found, p, nil
	},
		Authorize: func(_ context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
			return attrs.Verb != MoveVerb || (user.Username == "admin" && attrs.Resource == "terraformmachines" && attrs.Group == infrav1.GroupName), "", nil
		}}
	withLabels := func(m *infrav1.TerraformMachine, cluster string) *infrav1.TerraformMachine {
		m.Labels["cluster.x-k8s.io/cluster-name"] = cluster
		return m
	}
	relabelled := machine("local:///a")
	relabelled.Labels["extra"] = "yes"
	pool := func(ids ...string) *infrav1.TerraformMachinePool {
		p := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
		p.Spec.Module.Inline = "a"
		p.Spec.ProviderIDList = ids
		return p
	}
	cases := []struct {
		name string
		req  *admissionv1.AdmissionRequest
		want string // "" = allowed
	}{
		{"manager sets providerID", request(admissionv1.Update, managerUser, machine("local:///a"), machine("")), ""},
		{"user sets providerID", request(admissionv1.Update, "admin", machine("local:///a"), machine("")),
			"spec.providerID: Forbidden: only the CAPTF manager (system:serviceaccount:captf-system:captf-manager) may set it"},
		{"user creates with providerID", request(admissionv1.Create, "admin", machine("local:///a"), nil), "spec.providerID: Forbidden"},
		{"move creates with providerID under a paused Cluster", request(admissionv1.Create, "admin", withLabels(machine("local:///a"), "moved"), nil), ""},
		{"a tenant creates with a providerID under its own paused Cluster", request(admissionv1.Create, "tenant", withLabels(machine("local:///a"), "moved"), nil),
			`(or, into a paused Cluster or one not yet restored, a user with the "move" verb on terraformmachines, as clusterctl move and a restore do); tenant may not`},
		{"a restore creates with providerID before its Cluster", request(admissionv1.Create, "admin", withLabels(machine("local:///a"), "restored-later"), nil), ""},
		{"a tenant creates with a providerID before its Cluster", request(admissionv1.Create, "tenant", withLabels(machine("local:///a"), "restored-later"), nil),
			"spec.providerID: Forbidden"},
		{"a mover creates with a providerID under a running Cluster", request(admissionv1.Create, "admin", withLabels(machine("local:///a"), "live"), nil),
			"spec.providerID: Forbidden"},
		{"a mover creates with a providerID and no Cluster label", request(admissionv1.Create, "admin", func() *infrav1.TerraformMachine {
			m := machine("local:///a")
			delete(m.Labels, "cluster.x-k8s.io/cluster-name")
			return m
		}(), nil), "spec.providerID: Forbidden"},
		{"CAPI changes other fields", request(admissionv1.Update, "system:serviceaccount:capi-system:capi-manager", relabelled, machine("local:///a")), ""},
		{"a tenant moves a machine with a providerID to another cluster", request(admissionv1.Update, "tenant", withLabels(machine("local:///a"), "victim"), machine("local:///a")),
			"metadata.labels[cluster.x-k8s.io/cluster-name]: Forbidden: the object holds provider IDs"},
		{"the manager may", request(admissionv1.Update, managerUser, withLabels(machine("local:///a"), "victim"), machine("local:///a")), ""},
		{"a machine without one may", request(admissionv1.Update, "tenant", withLabels(machine(""), "victim"), machine("")), ""},
		{"Cluster API sets the label a machine did not have", request(admissionv1.Update, "capi", withLabels(machine("local:///a"), "work"), func() *infrav1.TerraformMachine {
			m := machine("local:///a")
			delete(m.Labels, "cluster.x-k8s.io/cluster-name")
			return m
		}()), ""},
		{"a tenant removes the label", request(admissionv1.Update, "tenant", func() *infrav1.TerraformMachine {
			m := machine("local:///a")
			delete(m.Labels, "cluster.x-k8s.io/cluster-name")
			return m
		}(), machine("local:///a")), "metadata.labels[cluster.x-k8s.io/cluster-name]: Forbidden"},
		{"a pool with provider IDs may not", request(admissionv1.Update, "tenant", func() *infrav1.TerraformMachinePool {
			p := pool("local:///a")
			p.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "victim"}
			return p
		}(), func() *infrav1.TerraformMachinePool {
			p := pool("local:///a")
			p.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "work"}
			return p
		}()), "metadata.labels[cluster.x-k8s.io/cluster-name]: Forbidden"},
		{"user removes providerID", request(admissionv1.Update, "admin", machine(""), machine("local:///a")), "spec.providerID: Forbidden"},
		{"manager sets providerIDList", request(admissionv1.Update, managerUser, pool("local:///a"), pool()), ""},
		{"user sets providerIDList", request(admissionv1.Update, "admin", pool("local:///a"), pool()), "spec.providerIDList: Forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Admit(context.Background(), tc.req.Kind.Kind, tc.req)
			if resp.UID != tc.req.UID {
				t.Errorf("response UID %q, want the request's", resp.UID)
			}
			wantAdmission(t, resp, tc.want)
		})
	}

	// Without its own username the manager cannot be told apart: nobody
	// may write provider IDs.
	unknown := &Handler{}
	resp := unknown.Admit(context.Background(), "TerraformMachine", request(admissionv1.Update, managerUser, machine("local:///a"), machine("")))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "set POD_NAMESPACE and SERVICE_ACCOUNT_NAME") {
		t.Errorf("with no manager username: allowed=%v %v", resp.Allowed, resp.Result)
	}
}

func TestAdmitWrongPathAndDecoding(t *testing.T) {
	h := &Handler{ManagerUser: managerUser}
	req := request(admissionv1.Create, "admin", machine(""), nil)
	if resp := h.Admit(context.Background(), "TerraformCluster", req); resp.Allowed || resp.Result.Code != 400 {
		t.Errorf("a TerraformMachine on the TerraformCluster path: %+v", resp)
	}
	req.Object.Raw = []byte(`{"spec": 3}`)
	if resp := h.Admit(context.Background(), "TerraformMachine", req); resp.Allowed || !strings.Contains(resp.Result.Message, "decoding the object") {
		t.Errorf("an undecodable object: %+v", resp)
	}
	for _, body := range []string{``, `{}`, `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}`, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`} {
		if _, err := DecodeReview([]byte(body)); err == nil {
			t.Errorf("DecodeReview(%q) took it", body)
		}
	}
}

// TestServeRefusesOversizeAndNonJSON: bodies beyond MaxRequestBytes get
// 413, other content types 415, and nothing is admitted.
func TestServeRefusesOversizeAndNonJSON(t *testing.T) {
	mux := (&Handler{ManagerUser: managerUser}).Mux()
	cases := []struct {
		name, contentType string
		body              []byte
		want              int
	}{
		{"too big", "application/json", bytes.Repeat([]byte(" "), MaxRequestBytes+1), http.StatusRequestEntityTooLarge},
		{"not JSON", "application/yaml", []byte("{}"), http.StatusUnsupportedMediaType},
		{"not a review", "application/json", []byte(`{"kind":"Pod"}`), http.StatusBadRequest},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(http.MethodPost, Path("TerraformCluster"), bytes.NewReader(tc.body))
		r.Header.Set("Content-Type", tc.contentType)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}

// TestTemplateDryRunException: a template's spec may differ only in a dry
// run Cluster API's topology controller marks; the annotation alone on a
// real write changes nothing.
func TestTemplateDryRunException(t *testing.T) {
	old := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	old.Spec.Template.Spec.Module.Inline = "a"
	changed := old.DeepCopy()
	changed.Spec.Template.Spec.Module.Inline = "b"
	changed.Annotations = map[string]string{capi.DryRunAnnotation: ""}
	for _, dryRun := range []bool{false, true} {
		req := request(admissionv1.Update, "someone", changed, old)
		req.DryRun = &dryRun
		if resp := (&Handler{}).Admit(context.Background(), "TerraformMachineTemplate", req); resp.Allowed != dryRun {
			t.Errorf("dry run %v: allowed = %v (%v)", dryRun, resp.Allowed, resp.Result)
		}
	}
}

// TestAdmissionRequestsBounded: a source that sends many requests slowly
// (half-sent bodies, as a pod on port 9443 may) holds no slot where
// requests are decided, and reads at most half of the bodies read at once:
// the API server's next request is read and answered meanwhile.
func TestAdmissionRequestsBounded(t *testing.T) {
	h := &Handler{}
	srv := httptest.NewServer(h.Mux())
	defer srv.Close()
	url := srv.URL + Path("TerraformCluster")
	// The attacker's requests come from another address than the API
	// server's (all of 127.0.0.0/8 is this host).
	attacker := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	var writers []*io.PipeWriter
	defer func() { // before the server closes: it waits for them
		for _, w := range writers {
			w.Close()
		}
	}()
	for range MaxReading {
		pr, pw := io.Pipe()
		writers = append(writers, pw)
		go func() {
			if resp, err := attacker.Post(url, "application/json", pr); err == nil {
				resp.Body.Close()
			}
		}()
		go func() { _, _ = pw.Write([]byte(`{"request":`)) }()
	}
	for h.reading.Held("127.0.0.2") < MaxReading/2 {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the API server's request while another source sends slowly: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the API server's request: %s, want it read and refused as no AdmissionReview", resp.Status)
	}
	if n := h.reading.Held("127.0.0.2"); n != MaxReading/2 {
		t.Errorf("the slow source reads %d bodies at once, want its share %d", n, MaxReading/2)
	}
	if n := h.slots.Held("127.0.0.2"); n != 0 {
		t.Errorf("the slow source holds %d slots of decided requests, want 0", n)
	}
}

// TestRunnerPodRules: a Job policy the operator's rules refuse is refused at
// admission, with its field path, wherever it sits.
func TestRunnerPodRules(t *testing.T) {
	privileged := &infrav1.JobPolicy{SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}
	cluster := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	cluster.Spec.Module.Inline = "a"
	cluster.Spec.Defaults = &infrav1.ClusterDefaults{Jobs: privileged}
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	tmpl.Spec.Template.Spec.Module.Inline = "a"
	tmpl.Spec.Template.Spec.Jobs = &infrav1.JobPolicy{NodeSelector: map[string]string{"node-role.kubernetes.io/control-plane": ""}}
	for obj, want := range map[runtime.Object]string{
		cluster: "spec.defaults.jobs.securityContext.privileged: Invalid value: true: runner pods meet Pod Security \"restricted\"",
		tmpl:    "spec.template.spec.jobs.nodeSelector: Forbidden",
	} {
		req := request(admissionv1.Create, "someone", obj, nil)
		resp := (&Handler{}).Admit(context.Background(), req.Kind.Kind, req)
		if resp.Allowed || !strings.Contains(resp.Result.Message, want) {
			t.Errorf("%s: allowed %v, %v; want refused with %q", req.Kind.Kind, resp.Allowed, resp.Result, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestReferencesNeedReadRights: a user may make CAPTF read only the Secrets
// and ConfigMaps they may read themselves; references already there are
// not checked again (Cluster API's controllers and the manager update
// objects they did not write).
func TestReferencesNeedReadRights(t *testing.T) {
	readable := map[string]bool{"secrets/mine": true, "configmaps/module": true}
	h := &Handler{Authorize: func(_ context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
		if user.Username == "capi-controller" {
			return true, "", nil
		}
		return attrs.Verb == "get" && readable[attrs.Resource+"/"+attrs.Name], "", nil
	}}
	withRefs := func(secret, envFromSecret, moduleCM string) *infrav1.TerraformCluster {
		tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
		tc.Spec.Module.ConfigMap = &infrav1.ConfigMapModule{Name: moduleCM}
		tc.Spec.Variables = []infrav1.Variable{{Name: "v", ValueFrom: &infrav1.VariableSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}}}
		tc.Spec.Jobs = &infrav1.JobPolicy{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: envFromSecret}}}}}
		return tc
	}
	withKey := func(tc *infrav1.TerraformCluster, secret, key string) *infrav1.TerraformCluster {
		tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "w", ValueFrom: &infrav1.VariableSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}})
		return tc
	}
	tests := map[string]struct {
		user     string
		obj, old *infrav1.TerraformCluster
		want     []string
	}{
		"what the user may read":         {user: "alice", obj: withRefs("mine", "mine", "module")},
		"a Secret the user may not read": {user: "alice", obj: withRefs("db", "mine", "module"), want: []string{`spec.variables[0].valueFrom.secretKeyRef: Forbidden: alice may not get Secret "db" in namespace ns`}},
		"envFrom and the module too": {user: "alice", obj: withRefs("mine", "cloud-creds", "other"),
			want: []string{`spec.module.configMap.name: Forbidden: alice may not get ConfigMap "other"`, `spec.jobs.envFrom[0].secretRef: Forbidden: alice may not get Secret "cloud-creds"`}},
		"an update that keeps a reference": {user: "alice", obj: withRefs("db", "mine", "module"), old: withRefs("db", "mine", "module")},
		"an update that adds one":          {user: "alice", obj: withRefs("db", "mine", "module"), old: withRefs("mine", "mine", "module"), want: []string{`alice may not get Secret "db"`}},
		"Cluster API's controller":         {user: "capi-controller", obj: withRefs("db", "db", "other")},
		// Issue 30, item 5: a reference is a key, not a Secret.
		"another key of a Secret it kept": {user: "alice", obj: withKey(withRefs("db", "mine", "module"), "db", "admin-password"), old: withRefs("db", "mine", "module"),
			want: []string{`spec.variables[1].valueFrom.secretKeyRef: Forbidden: alice may not get Secret "db"`}},
		"a key of a Secret whose every key it had": {user: "alice", obj: withKey(withRefs("mine", "db", "module"), "db", "admin-password"), old: withRefs("mine", "db", "module")},
		"every key of a Secret it had one key of": {user: "alice", obj: withRefs("db", "db", "module"), old: withRefs("db", "mine", "module"),
			want: []string{`spec.jobs.envFrom[0].secretRef: Forbidden: alice may not get Secret "db"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			op := admissionv1.Create
			var old runtime.Object
			if tc.old != nil {
				op, old = admissionv1.Update, tc.old
			}
			req := request(op, tc.user, tc.obj, old)
			resp := h.Admit(context.Background(), "TerraformCluster", req)
			if resp.Allowed != (len(tc.want) == 0) {
				t.Fatalf("allowed = %v (%v), want refusals %v", resp.Allowed, resp.Result, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(resp.Result.Message, w) {
					t.Errorf("message %q lacks %q", resp.Result.Message, w)
				}
			}
		})
	}
}

// TestTemplateReferencesNeedReadRights: a template names Secrets for every
// object Cluster API makes from it, with Cluster API's rights: a user may
// put in a template only what they may read themselves.
func TestTemplateReferencesNeedReadRights(t *testing.T) {
	h := &Handler{Authorize: func(_ context.Context, _ authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
		return attrs.Name == "mine", "", nil
	}}
	vars := func(secret string) []infrav1.Variable {
		return []infrav1.Variable{{Name: "v", ValueFrom: &infrav1.VariableSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "k"}}}}
	}
	for _, secret := range []string{"mine", "db"} {
		machines := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
		machines.Spec.Template.Spec.Module.Inline = "a"
		machines.Spec.Template.Spec.Variables = vars(secret)
		pools := &infrav1.TerraformMachinePoolTemplate{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
		pools.Spec.Template.Spec.Module.Inline = "a"
		pools.Spec.Template.Spec.Variables = vars(secret)
		for _, obj := range []runtime.Object{machines, pools} {
			req := request(admissionv1.Create, "alice", obj, nil)
			resp := h.Admit(context.Background(), req.Kind.Kind, req)
			if want := secret == "mine"; resp.Allowed != want {
				t.Errorf("%s naming Secret %q: allowed %v (%v), want %v", req.Kind.Kind, secret, resp.Allowed, resp.Result, want)
			}
			if !resp.Allowed && !strings.Contains(resp.Result.Message, `spec.template.spec.variables[0].valueFrom.secretKeyRef: Forbidden: alice may not get Secret "db"`) {
				t.Errorf("%s: message %q", req.Kind.Kind, resp.Result.Message)
			}
		}
	}
}

// TestDeletingObjectsKeepTheRules (issue 30, item 8): an object being
// deleted may lose its finalizers and be abandoned even when a newer rule
// finds it invalid, but every change is held to every rule.
func TestDeletingObjectsKeepTheRules(t *testing.T) {
	h := &Handler{ManagerUser: managerUser}
	deleted := func(m *infrav1.TerraformMachine, change func(*infrav1.TerraformMachine)) *infrav1.TerraformMachine {
		now := metav1.Now()
		m.DeletionTimestamp = &now
		m.Finalizers = []string{infrav1.TerraformMachineFinalizer}
		if change != nil {
			change(m)
		}
		return m
	}
	// What a rule made after the object was admitted refuses: two module sources.
	broken := func(m *infrav1.TerraformMachine) { m.Spec.Module.Source = "git::https://example.com/m.git" }
	cases := []struct {
		name     string
		obj, old *infrav1.TerraformMachine
		want     string // "" = allowed
	}{
		{"the finalizer goes though the spec breaks a newer rule",
			deleted(machine("local:///a"), broken), deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
				broken(m)
				m.Finalizers = append(m.Finalizers, "example.com/hold")
			}), ""},
		{"abandon is set", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "true"}
		}), deleted(machine("local:///a"), nil), ""},
		{"a provider-ID holder is relabelled", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Labels["cluster.x-k8s.io/cluster-name"] = "victim"
		}), deleted(machine("local:///a"), nil), "metadata.labels[cluster.x-k8s.io/cluster-name]: Forbidden"},
		{"a restore annotation that names no backup", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Annotations = map[string]string{infrav1.AnnotationRestoreState: "tfc-victim-state"}
		}), deleted(machine("local:///a"), nil), "captf.io/restore-state"},
		{"an approval on a machine", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Annotations = map[string]string{infrav1.AnnotationApprovePlan: "0123456789abcdef"}
		}), deleted(machine("local:///a"), nil), "machines and pools are never gated"},
		{"an abandon value that is not a bool", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "yes"}
		}), deleted(machine("local:///a"), nil), `must be "true" or "false"`},
		{"a new spec error", deleted(machine("local:///a"), broken), deleted(machine("local:///a"), nil), "exactly one of source, configMap, inline or catalogRef"},
		{"the provider ID changes", deleted(machine("local:///b"), nil), deleted(machine("local:///a"), nil), "spec.providerID: Forbidden"},
		{"a spec change that breaks a rule the object already broke", deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) {
			m.Spec.Module.Source = " git::https://example.com/m.git"
		}), deleted(machine("local:///a"), func(m *infrav1.TerraformMachine) { m.Spec.Module.Source = " ./m" }), "must not start or end with white space"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request(admissionv1.Update, "tenant", tc.obj, tc.old)
			resp := h.Admit(context.Background(), req.Kind.Kind, req)
			wantAdmission(t, resp, tc.want)
		})
	}
}

// wantAdmission checks resp against want: "" allowed, else a refusal whose
// message contains it.
func wantAdmission(t *testing.T, resp *admissionv1.AdmissionResponse, want string) {
	t.Helper()
	switch {
	case want == "" && !resp.Allowed:
		t.Errorf("refused: %s", resp.Result.Message)
	case want != "" && resp.Allowed:
		t.Errorf("allowed, want %q", want)
	case want != "" && !strings.Contains(resp.Result.Message, want):
		t.Errorf("message %q, want it to contain %q", resp.Result.Message, want)
	}
}

// TestClonedObjectsReadOnlyWhatTheirTemplateNames (issue 30, item 2): an
// object cloned from a template (by Cluster API's controllers, whose own
// identity may read every Secret) gets only the references its template
// holds; a ClusterClass patch that adds one is refused to the controller.
func TestClonedObjectsReadOnlyWhatTheirTemplateNames(t *testing.T) {
	template := &infrav1.TerraformClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: "class-cluster", Namespace: "ns"}}
	template.Spec.Template.Spec.Module.Inline = "a"
	template.Spec.Template.Spec.Variables = []infrav1.Variable{{Name: "creds", ValueFrom: &infrav1.VariableSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}, Key: "token"}}}}
	template.Spec.Template.Spec.Jobs = &infrav1.JobPolicy{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}
	rawTemplate, err := json.Marshal(template)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{
		// Cluster API's controllers may read everything.
		Authorize: func(context.Context, authenticationv1.UserInfo, authorizationv1.ResourceAttributes) (bool, string, error) {
			return true, "", nil
		},
		ReadTemplate: func(_ context.Context, namespace, resource, name string) ([]byte, error) {
			if namespace == "ns" && resource == "terraformclustertemplates" && name == "class-cluster" {
				return rawTemplate, nil
			}
			return nil, apierrors.NewNotFound(infrav1.Resource(resource), name)
		},
	}
	cloned := func(groupKind, name string, change func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
		tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
		tc.Spec.WorkspaceSpec = *template.Spec.Template.Spec.WorkspaceSpec.DeepCopy()
		if groupKind != "" {
			tc.Annotations = map[string]string{capi.ClonedFromGroupKindAnnotation: groupKind, capi.ClonedFromNameAnnotation: name}
		}
		if change != nil {
			change(tc)
		}
		return tc
	}
	const fromTemplate = "TerraformClusterTemplate.infrastructure.cluster.x-k8s.io"
	addSecret := func(name, key string) func(*infrav1.TerraformCluster) {
		return func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "patched", ValueFrom: &infrav1.VariableSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}})
		}
	}
	tests := map[string]struct {
		obj, old *infrav1.TerraformCluster
		want     string // "" admitted
	}{
		"what the template names":         {obj: cloned(fromTemplate, "class-cluster", nil)},
		"not cloned: the writer's rights": {obj: cloned("", "", addSecret("cluster-kubeconfig", "value"))},
		"a patch adds a Secret": {obj: cloned(fromTemplate, "class-cluster", addSecret("cluster-kubeconfig", "value")),
			want: `spec.variables[1].valueFrom.secretKeyRef: Forbidden: Secret "cluster-kubeconfig" key "value" is not in TerraformClusterTemplate class-cluster`},
		"a patch adds another key of a named Secret": {obj: cloned(fromTemplate, "class-cluster", addSecret("cloud", "admin")),
			want: `Secret "cloud" key "admin" is not in TerraformClusterTemplate class-cluster`},
		"a key of a ConfigMap the template reads whole": {obj: cloned(fromTemplate, "class-cluster", func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "region", ValueFrom: &infrav1.VariableSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "region"}}})
		})},
		"a patch adds envFrom": {obj: cloned(fromTemplate, "class-cluster", func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs.EnvFrom = append(tc.Spec.Jobs.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cluster-kubeconfig"}}})
		}), want: `spec.jobs.envFrom[1].secretRef: Forbidden: Secret "cluster-kubeconfig" is not in TerraformClusterTemplate`},
		"an update that adds one": {obj: cloned(fromTemplate, "class-cluster", addSecret("cluster-kubeconfig", "value")), old: cloned(fromTemplate, "class-cluster", nil),
			want: `Secret "cluster-kubeconfig" key "value" is not in`},
		"an update that keeps one the template dropped": {obj: cloned(fromTemplate, "class-cluster", addSecret("old", "k")), old: cloned(fromTemplate, "class-cluster", addSecret("old", "k"))},
		"a template of another namespace or deleted": {obj: cloned(fromTemplate, "gone", nil),
			want: `Secret "cloud" key "token" is not read for an object cloned from TerraformClusterTemplate gone (cluster.x-k8s.io/cloned-from-name), which the object was cloned from, which is not in namespace ns`},
		"cloned from something else": {obj: cloned("ConfigMap", "class-cluster", nil), want: "which is not a CAPTF template"},
		"half the annotations":       {obj: cloned(fromTemplate, "class-cluster", func(tc *infrav1.TerraformCluster) { delete(tc.Annotations, capi.ClonedFromGroupKindAnnotation) }), want: "name only half"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			op := admissionv1.Create
			var old runtime.Object
			if tc.old != nil {
				op, old = admissionv1.Update, tc.old
			}
			resp := h.Admit(context.Background(), "TerraformCluster", request(op, "system:serviceaccount:capi-system:capi-manager", tc.obj, old))
			if resp.Allowed != (tc.want == "") {
				t.Fatalf("allowed = %v (%v), want refusal %q", resp.Allowed, resp.Result, tc.want)
			}
			if tc.want != "" && !strings.Contains(resp.Result.Message, tc.want) {
				t.Errorf("message %q lacks %q", resp.Result.Message, tc.want)
			}
		})
	}
}

// TestRestoreBringsClonesBeforeTheirTemplate (issue 50, item 8): Velero
// restores kinds by name, terraformmachines before
// terraformmachinetemplates, and every clone whose template was not back
// yet was refused. A user with the verb move, into a Cluster that is not
// back yet or is paused (as for provider IDs), is checked as for an object
// of their own; Cluster API's controllers, and a running Cluster, are not.
func TestRestoreBringsClonesBeforeTheirTemplate(t *testing.T) {
	clusters := map[string][2]bool{"running": {true, false}, "paused": {true, true}} // found, paused
	h := &Handler{
		Authorize: func(_ context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
			switch user.Username {
			case "velero":
				return true, "", nil
			case "mover-who-may-not-read":
				return attrs.Verb == MoveVerb, "", nil
			}
			return attrs.Verb != MoveVerb, "", nil // Cluster API's controllers
		},
		ReadTemplate: func(_ context.Context, _, resource, name string) ([]byte, error) {
			return nil, apierrors.NewNotFound(infrav1.Resource(resource), name)
		},
		Cluster: func(_ context.Context, _, name string) (bool, bool, error) {
			c := clusters[name]
			return c[0], c[1], nil
		},
	}
	clone := func(cluster string) *infrav1.TerraformMachine {
		tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", Annotations: map[string]string{
			capi.ClonedFromGroupKindAnnotation: "TerraformMachineTemplate.infrastructure.cluster.x-k8s.io", capi.ClonedFromNameAnnotation: "workers"}}}
		if cluster != "" {
			tm.Labels = map[string]string{capi.ClusterNameLabel: cluster}
		}
		tm.Spec.Module.ConfigMap = &infrav1.ConfigMapModule{Name: "modules"}
		return tm
	}
	const refused = `ConfigMap "modules" is not read for an object cloned from TerraformMachineTemplate workers`
	for _, tc := range []struct {
		name, user, cluster, want string
	}{
		{"a restore, the Cluster not back yet", "velero", "gone", ""},
		{"a move into a paused Cluster", "velero", "paused", ""},
		{"into a running Cluster", "velero", "running", refused},
		{"naming no Cluster", "velero", "", refused},
		{"Cluster API's controllers", "system:serviceaccount:capi-system:capi-manager", "gone", refused},
		{"a mover who may not read the ConfigMap", "mover-who-may-not-read", "gone", `may not get ConfigMap "modules"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Admit(context.Background(), "TerraformMachine", request(admissionv1.Create, tc.user, clone(tc.cluster), nil))
			wantAdmission(t, resp, tc.want)
		})
	}
}

// TestFinalizerRule: only the manager, an approver or a mover removes
// CAPTF's finalizer; other finalizers and other writes stay open.
func TestFinalizerRule(t *testing.T) {
	h := &Handler{ManagerUser: managerUser, Authorize: func(_ context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
		switch user.Username {
		case "approver":
			return attrs.Verb == ApproveVerb && attrs.Resource == "terraformmachines" && attrs.Name == "m", "", nil
		case "mover":
			return attrs.Verb == MoveVerb && attrs.Resource == "terraformmachines", "", nil
		case "broken":
			return false, "", errors.New("no answer")
		}
		return false, "", nil
	}}
	with := func(finalizers ...string) *infrav1.TerraformMachine {
		m := machine("")
		m.Finalizers = finalizers
		return m
	}
	deleting := func(m *infrav1.TerraformMachine) *infrav1.TerraformMachine {
		m.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return m
	}
	ours := infrav1.TerraformMachineFinalizer
	cases := []struct {
		name string
		req  *admissionv1.AdmissionRequest
		want string
	}{
		{"a writer strips it", request(admissionv1.Update, "tenant", with(), with(ours)),
			"metadata.finalizers: Forbidden: only the CAPTF manager removes " + ours + ", once the infrastructure is destroyed or left unmanaged"},
		{"a writer strips it from a deleting object", request(admissionv1.Update, "tenant", deleting(with()), deleting(with(ours))),
			"kubectl annotate terraformmachine -n ns m captf.io/abandon-infrastructure=true"},
		{"a writer swaps it for another", request(admissionv1.Update, "tenant", with("example.com/x"), with(ours)), "metadata.finalizers: Forbidden"},
		{"the manager removes it", request(admissionv1.Update, managerUser, deleting(with()), deleting(with(ours))), ""},
		{"an approver removes it", request(admissionv1.Update, "approver", with(), with(ours)), ""},
		{"a mover removes it", request(admissionv1.Update, "mover", with(), with(ours)), ""},
		{"no answer from the authorizer", request(admissionv1.Update, "broken", with(), with(ours)), "Internal error"},
		{"a writer removes another finalizer", request(admissionv1.Update, "tenant", with(ours), with(ours, "example.com/x")), ""},
		{"a writer adds it", request(admissionv1.Update, "tenant", with(ours), with()), ""},
		{"a writer creates with it", request(admissionv1.Create, "tenant", with(ours), nil), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantAdmission(t, h.Admit(context.Background(), tc.req.Kind.Kind, tc.req), tc.want)
		})
	}
	// Templates hold no infrastructure, and no CAPTF finalizer.
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", Finalizers: []string{ours}}}
	tmpl.Spec.Template.Spec.Module.Inline = "a"
	bare := tmpl.DeepCopy()
	bare.Finalizers = nil
	wantAdmission(t, h.Admit(context.Background(), "TerraformMachineTemplate", request(admissionv1.Update, "tenant", bare, tmpl)), "")
}

// forgedReview is an AdmissionReview of a TerraformMachine with vars
// variables, each from a Secret of its own, as a pod on port 9443 may send.
func forgedReview(t *testing.T, user string, vars int) []byte {
	t.Helper()
	m := machine("")
	for i := range vars {
		m.Spec.Variables = append(m.Spec.Variables, infrav1.Variable{Name: fmt.Sprintf("v%d", i),
			ValueFrom: &infrav1.VariableSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("s%d", i)}, Key: "k"}}})
	}
	review := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: request(admissionv1.Create, user, m, nil)}
	b, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExpensiveReviewsBounded (issue 50, item 7): forged reviews with
// tens of thousands of references cost one access review each, and one
// source held every decision slot: every Terraform* write then failed.
// Now a review holds what the CRD admits, a source gets its budget of
// access reviews and half the slots, and work stops at the deadline the
// API server gives.
func TestExpensiveReviewsBounded(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	var deadlines []time.Duration
	release := make(chan struct{})
	h := &Handler{ManagerUser: managerUser, Authorize: func(ctx context.Context, user authenticationv1.UserInfo, _ authorizationv1.ResourceAttributes) (bool, string, error) {
		mu.Lock()
		asked[user.Username]++
		if d, ok := ctx.Deadline(); ok {
			deadlines = append(deadlines, time.Until(d))
		}
		mu.Unlock()
		if user.Username == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return false, "", ctx.Err()
			}
		}
		return true, "", nil
	}}
	srv := httptest.NewServer(h.Mux())
	defer srv.Close()
	url := srv.URL + Path("TerraformMachine")
	attacker := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	post := func(c *http.Client, query string, body []byte) (*admissionv1.AdmissionReview, int) {
		t.Helper()
		resp, err := c.Post(url+query, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		_ = json.NewDecoder(resp.Body).Decode(&review)
		return &review, resp.StatusCode
	}

	// More references than the CRD admits: refused before any review.
	review, _ := post(attacker, "", forgedReview(t, "forger", 5000))
	if review.Response == nil || review.Response.Allowed || !strings.Contains(review.Response.Result.Message, "spec.variables: Too many: 5000: must have at most 256 items") {
		t.Errorf("a review with 5000 references: %+v", review.Response)
	}
	if asked["forger"] != 0 {
		t.Errorf("%d access reviews for a review over the CRD's bounds", asked["forger"])
	}

	// Within them, a source has its budget; another source keeps its own.
	refused := 0
	for range 4 {
		if review, _ := post(attacker, "", forgedReview(t, "forger", 200)); review.Response != nil && !review.Response.Allowed &&
			strings.Contains(review.Response.Result.Message, "too many access reviews") {
			refused++
		}
	}
	if refused == 0 || asked["forger"] > accessReviewBurst+20 {
		t.Errorf("4 reviews of 200 references from one source: %d refused, %d access reviews; want its budget (%d) to hold", refused, asked["forger"], accessReviewBurst)
	}
	if review, _ := post(http.DefaultClient, "", forgedReview(t, "admin", 3)); review.Response == nil || !review.Response.Allowed {
		t.Errorf("the API server's review while another source is over its budget: %+v", review.Response)
	}
	// Through the API server, one user's references spend only their own.
	for range 3 {
		post(http.DefaultClient, "", forgedReview(t, "greedy", 200))
	}
	if review, _ := post(http.DefaultClient, "", forgedReview(t, "greedy", 3)); review.Response == nil || review.Response.Allowed {
		t.Errorf("a user past their budget: %+v", review.Response)
	}
	if review, _ := post(http.DefaultClient, "", forgedReview(t, "admin", 3)); review.Response == nil || !review.Response.Allowed {
		t.Errorf("another user's review through the same API server: %+v", review.Response)
	}

	// A source holds half the decision slots; the API server decides with
	// the others meanwhile, within the deadline it gives.
	slow := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}).DialContext}}
	var wg sync.WaitGroup
	for range MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := slow.Post(url, "application/json", bytes.NewReader(forgedReview(t, "slow", 1)))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	// Each slot held and its access review begun: a review that begins
	// later would record its deadline after the reset below.
	slowAsked := func() int { mu.Lock(); defer mu.Unlock(); return asked["slow"] }
	for (h.slots.Held("127.0.0.3") < maxInFlightPerSource || slowAsked() < maxInFlightPerSource) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	deadlines = nil
	mu.Unlock()
	if review, _ := post(http.DefaultClient, "?timeout=3s", forgedReview(t, "admin", 1)); review.Response == nil || !review.Response.Allowed {
		t.Errorf("the API server's review while one source holds its slots: %+v", review.Response)
	}
	if n := h.slots.Held("127.0.0.3"); n != maxInFlightPerSource {
		t.Errorf("one source holds %d decision slots, want its share %d", n, maxInFlightPerSource)
	}
	mu.Lock()
	if len(deadlines) != 1 || deadlines[0] > 3*time.Second {
		t.Errorf("the access review of a review with timeout=3s ran with deadlines %v, want one within 3s", deadlines)
	}
	mu.Unlock()
	close(release)
	wg.Wait()
}

// TestBoundsRatchet: an object stored before a bound existed keeps working
// while its spec stays: the manager removes its finalizer, a label changes;
// a change of its spec is held to the bound.
func TestBoundsRatchet(t *testing.T) {
	h := &Handler{ManagerUser: managerUser}
	big := machine("")
	big.Finalizers = []string{infrav1.TerraformMachineFinalizer}
	big.Spec.Jobs = &infrav1.JobPolicy{}
	for i := range maxEnv + 6 {
		big.Spec.Jobs.Env = append(big.Spec.Jobs.Env, corev1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: "x"})
	}
	released := big.DeepCopy()
	released.Finalizers = nil
	wantAdmission(t, h.Admit(context.Background(), "TerraformMachine", request(admissionv1.Update, managerUser, released, big)), "")
	labelled := big.DeepCopy()
	labelled.Labels["team"] = "a"
	wantAdmission(t, h.Admit(context.Background(), "TerraformMachine", request(admissionv1.Update, "tenant", labelled, big)), "")
	grown := big.DeepCopy()
	grown.Spec.Jobs.Env = append(grown.Spec.Jobs.Env, corev1.EnvVar{Name: "MORE", Value: "x"})
	wantAdmission(t, h.Admit(context.Background(), "TerraformMachine", request(admissionv1.Update, "tenant", grown, big)), "spec.jobs.env: Too many: 71: must have at most 64 items")
}
