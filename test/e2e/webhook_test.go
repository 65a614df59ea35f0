package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/webhook"
	"github.com/captf/captf/test/framework"
)

// TestWebhook: the real API server calls the manager's webhook over TLS for
// every Terraform* kind; invalid writes are refused with the webhook's
// message; only the manager writes provider IDs; a rotated certificate is
// served without a restart; a stopped webhook fails closed.
func TestWebhook(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	vwcName := "captf-" + e.ns
	if _, err := plane.RegisterWebhook(ctx, vwcName, m.WebhookAddr, m.WebhookCert.CA.CertPEM, e.ns); err != nil {
		t.Fatal(err)
	}
	waitReady(t, m)
	admin := plane.Captf.InfrastructureV1alpha1()
	module := infrav1.Module{Inline: `output "provider_id" { value = "local:///x" }`}
	ws := infrav1.WorkspaceSpec{Module: module}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: e.ns} }

	// Valid objects of each kind are admitted.
	cluster, err := admin.TerraformClusters(e.ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: meta("ok"), Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: ws}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a valid TerraformCluster was refused: %v", err)
	}
	ct := &infrav1.TerraformClusterTemplate{ObjectMeta: meta("ok")}
	ct.Spec.Template.Spec.WorkspaceSpec = ws
	if ct, err = admin.TerraformClusterTemplates(e.ns).Create(ctx, ct, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid TerraformClusterTemplate was refused: %v", err)
	}
	mt := &infrav1.TerraformMachineTemplate{ObjectMeta: meta("ok")}
	mt.Spec.Template.Spec.WorkspaceSpec = ws
	if mt, err = admin.TerraformMachineTemplates(e.ns).Create(ctx, mt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a valid TerraformMachineTemplate was refused: %v", err)
	}
	machine, err := admin.TerraformMachines(e.ns).Create(ctx, &infrav1.TerraformMachine{ObjectMeta: meta("ok"), Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: ws}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a valid TerraformMachine was refused: %v", err)
	}
	pool, err := admin.TerraformMachinePools(e.ns).Create(ctx, &infrav1.TerraformMachinePool{ObjectMeta: meta("ok"), Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: ws}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a valid TerraformMachinePool was refused: %v", err)
	}

	// Invalid writes the CRD schema lets through reach the webhook, and the
	// client sees its message.
	refused := []struct {
		name    string
		webhook string
		write   func() error
		want    string
	}{
		{"cluster: white space around the module source", "terraformcluster", func() error {
			_, err := admin.TerraformClusters(e.ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: meta("versioned"), Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Source: " ./m"}}}}, metav1.CreateOptions{})
			return err
		}, "spec.module.source: Invalid value: \" ./m\": must not start or end with white space"},
		{"cluster: approval that is no plan hash", "terraformcluster", func() error {
			return updateCluster(e.ns, cluster.Name, func(c *infrav1.TerraformCluster) {
				c.Annotations = map[string]string{infrav1.AnnotationApprovePlan: "latest"}
			})
		}, `metadata.annotations[captf.io/approve-plan]: Invalid value: "latest": must be a plan hash`},
		{"cluster: lock timeout beyond the default deadline", "terraformcluster", func() error {
			return updateCluster(e.ns, cluster.Name, func(c *infrav1.TerraformCluster) {
				c.Spec.Jobs = &infrav1.JobPolicy{LockTimeout: &metav1.Duration{Duration: 2 * time.Hour}}
			})
		}, `spec.jobs.lockTimeout: Invalid value: "2h0m0s": must be shorter than the Job deadline (1h0m0s)`},
		{"cluster template: spec changed", "terraformclustertemplate", func() error {
			c := ct.DeepCopy()
			c.Spec.Template.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
			_, err := admin.TerraformClusterTemplates(e.ns).Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, "spec: Forbidden: a template is immutable"},
		{"machine template: spec changed", "terraformmachinetemplate", func() error {
			c := mt.DeepCopy()
			c.Spec.Template.Spec.Module.Inline += "\n"
			_, err := admin.TerraformMachineTemplates(e.ns).Update(ctx, c, metav1.UpdateOptions{})
			return err
		}, "spec: Forbidden: a template is immutable"},
		{"machine: approval on a machine", "terraformmachine", func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c, err := admin.TerraformMachines(e.ns).Get(ctx, machine.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				c.Annotations = map[string]string{infrav1.AnnotationApproveDestructivePlan: "0123456789abcdef"}
				_, err = admin.TerraformMachines(e.ns).Update(ctx, c, metav1.UpdateOptions{})
				return err
			})
		}, "machines and pools are never gated"},
		{"pool: drift interval too short", "terraformmachinepool", func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				c, err := admin.TerraformMachinePools(e.ns).Get(ctx, pool.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				c.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 2 * time.Second}}
				_, err = admin.TerraformMachinePools(e.ns).Update(ctx, c, metav1.UpdateOptions{})
				return err
			})
		}, `spec.drift.interval: Invalid value: "2s": must be between 10s and 168h0m0s`},
	}
	for _, tc := range refused {
		err := tc.write()
		want := `admission webhook "validation.` + tc.webhook + `.infrastructure.cluster.x-k8s.io" denied the request`
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q and %q", tc.name, err, want, tc.want)
		}
	}
	// ClusterClass's server-side dry runs may change a template.
	dry := mt.DeepCopy()
	dry.Annotations = map[string]string{"topology.cluster.x-k8s.io/dry-run": ""}
	dry.Spec.Template.Spec.Module.Inline += "\n"
	if _, err := admin.TerraformMachineTemplates(e.ns).Update(ctx, dry, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a topology dry run of a template change was refused: %v", err)
	}

	t.Run("only the manager writes provider IDs", func(t *testing.T) { identity(t, e, machine, pool, m) })
	t.Run("a rotated certificate is served without a restart", func(t *testing.T) { rotation(t, e, m, vwcName) })

	// Stopped, the webhook fails closed: writes fail, reads work.
	m.Stop()
	_, err = admin.TerraformClusters(e.ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: meta("closed"), Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: ws}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a create with the webhook down: %v, want it refused (fail closed)", err)
	}
	if err := updateCluster(e.ns, cluster.Name, func(c *infrav1.TerraformCluster) { c.Labels = map[string]string{"touched": "yes"} }); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("an update with the webhook down: %v, want it refused (fail closed)", err)
	}
	if _, err := admin.TerraformClusters(e.ns).Get(ctx, "ok", metav1.GetOptions{}); err != nil {
		t.Errorf("a read with the webhook down: %v", err)
	}
	if list, err := admin.TerraformMachines(e.ns).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 {
		t.Errorf("a list with the webhook down: %v", err)
	}
}

func identity(t *testing.T, e *env, machine *infrav1.TerraformMachine, pool *infrav1.TerraformMachinePool, m *framework.Manager) {
	ctx := context.Background()
	// Another ServiceAccount with full rights on TerraformMachines.
	if _, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "intruder"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "intruder", Namespace: e.ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(sa string) versioned.Interface {
		cfg, err := plane.ServiceAccountConfig(ctx, e.ns, sa)
		if err != nil {
			t.Fatal(err)
		}
		return versioned.NewForConfigOrDie(rest.CopyConfig(cfg))
	}
	intruder, mgr := as("intruder"), as("captf-manager")
	setID := func(c versioned.Interface) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			tm, err := c.InfrastructureV1alpha1().TerraformMachines(e.ns).Get(ctx, machine.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			tm.Spec.ProviderID = "local:///stolen"
			_, err = c.InfrastructureV1alpha1().TerraformMachines(e.ns).Update(ctx, tm, metav1.UpdateOptions{})
			return err
		})
	}
	for name, c := range map[string]versioned.Interface{"cluster admin user": plane.Captf, "another ServiceAccount": intruder} {
		err := setID(c)
		if err == nil || !strings.Contains(err.Error(), "spec.providerID: Forbidden: only the CAPTF manager (system:serviceaccount:"+e.ns+":captf-manager) may set it") {
			t.Errorf("%s set spec.providerID: %v, want it refused", name, err)
		}
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tmp, err := intruder.InfrastructureV1alpha1().TerraformMachinePools(e.ns).Get(ctx, pool.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tmp.Spec.ProviderIDList = []string{"local:///stolen"}
		_, err = intruder.InfrastructureV1alpha1().TerraformMachinePools(e.ns).Update(ctx, tmp, metav1.UpdateOptions{})
		return err
	}); err == nil || !strings.Contains(err.Error(), "spec.providerIDList: Forbidden") {
		t.Errorf("another ServiceAccount set spec.providerIDList: %v, want it refused", err)
	}
	if err := setID(mgr); err != nil {
		t.Errorf("the manager's ServiceAccount could not set spec.providerID: %v", err)
	}
	// What Cluster API does to a TerraformMachine (labels, owner
	// references) still passes for others.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tm, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Get(ctx, machine.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		tm.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "work"}
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Update(ctx, tm, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Errorf("an update of other fields of a machine with a providerID was refused: %v", err)
	}
	if got := e.scrape(m); !strings.Contains(got, `captf_identity_denied_total{kind="TerraformMachine"} 2`) ||
		!strings.Contains(got, `captf_identity_denied_total{kind="TerraformMachinePool"} 1`) {
		t.Errorf("captf_identity_denied_total does not count the refusals:\n%s", grepLines(got, "captf_identity_denied_total"))
	}
}

func rotation(t *testing.T, e *env, m *framework.Manager, vwcName string) {
	ctx := context.Background()
	old := m.WebhookCert.CA.CertPEM
	if err := m.WebhookCert.Rotate(); err != nil {
		t.Fatal(err)
	}
	// Trust both while the new certificate takes over, as cert-manager's
	// CA injection would.
	if err := plane.SetWebhookCABundle(ctx, vwcName, append(slices.Clone(old), m.WebhookCert.CA.CertPEM...)); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.WebhookCert.CA.CertPEM)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		conn, err := tls.Dial("tcp", m.WebhookAddr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		t.Fatalf("the webhook never served the rotated certificate")
	}
	if err := plane.SetWebhookCABundle(ctx, vwcName, m.WebhookCert.CA.CertPEM); err != nil {
		t.Fatal(err)
	}
	// The API server calls the webhook with the new bundle only: an invalid
	// write gets the webhook's own refusal, a valid one passes.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "rotated", Namespace: e.ns},
			Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "#"}}}}
		c.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "maybe"}
		_, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, c, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), `must be "true" or "false"`), nil
	})
	if err != nil {
		t.Fatalf("the API server did not reach the webhook with the new CA bundle")
	}
	c := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "rotated", Namespace: e.ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "#"}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Errorf("a valid create after the rotation: %v", err)
	}
	if m.Exited() {
		t.Errorf("the manager restarted or exited during the rotation")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// updateCluster applies change to the latest version, retrying conflicts
// with the manager's status writes.
func updateCluster(ns, name string, change func(*infrav1.TerraformCluster)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(c)
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Update(context.Background(), c, metav1.UpdateOptions{})
		return err
	})
}

// review sends an AdmissionReview for obj straight to m's webhook over TLS.
func review(t *testing.T, m *framework.Manager, kind string, obj any) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(obj)
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "standby", Operation: admissionv1.Create,
			Kind:   metav1.GroupVersionKind{Group: infrav1.GroupName, Version: "v1alpha1", Kind: kind},
			Object: k8sruntime.RawExtension{Raw: raw}},
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.WebhookCert.CA.CertPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post("https://"+m.WebhookAddr+webhook.Path(kind), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("calling the webhook: %v", err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		t.Fatalf("webhook answer (%d): %v", resp.StatusCode, err)
	}
	return out.Response
}

// TestDeletingObjectsKeepTheRules (issue 30, item 8): the webhook admitted
// any metadata change of an object being deleted, so a tenant set restore
// and approval annotations no rule had checked. An object being deleted
// keeps every rule but what would hold its finalizers: they still go.
func TestDeletingObjectsKeepTheRules(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	// Paused: the manager leaves it alone while the test writes it.
	tc := e.localCloud("going", e.newCluster("going", true), map[string]any{})
	tc.Finalizers = []string{"example.com/hold"}
	e.create(tc)
	// The manager adds its finalizer to a paused object too; waiting for it
	// keeps the test from racing that write with the delete.
	e.waitFor("going", time.Minute, "the manager's finalizer", func(tc *infrav1.TerraformCluster) bool {
		return tc != nil && slices.Contains(tc.Finalizers, infrav1.TerraformClusterFinalizer)
	})
	e.deleteTC("going", metav1.DeletePropagationBackground)
	tcs := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	for key, value := range map[string]string{
		infrav1.AnnotationRestoreState:          "tfc-someone-else-state",
		infrav1.AnnotationApprovePlan:           "not-a-hash",
		infrav1.AnnotationAbandonInfrastructure: "yes",
	} {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		_, err := tcs.Patch(ctx, "going", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s on an object being deleted: %v, want refused naming the annotation", key, value, err)
		}
	}
	// What deleting needs stays open: abandon, the writer's own finalizer
	// goes, and the manager's goes once the manager lets the object go.
	if _, err := tcs.Patch(ctx, "going", types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, infrav1.AnnotationAbandonInfrastructure)), metav1.PatchOptions{}); err != nil {
		t.Errorf("abandon of an object being deleted: %v", err)
	}
	if _, err := tcs.Patch(ctx, "going", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "only the CAPTF manager removes") {
		t.Errorf("a writer removing the manager's finalizer: %v, want refused", err)
	}
	ours := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, infrav1.TerraformClusterFinalizer)
	if _, err := tcs.Patch(ctx, "going", types.MergePatchType, []byte(ours), metav1.PatchOptions{}); err != nil {
		t.Errorf("removing the writer's own finalizer: %v", err)
	}
	e.unpause("going")
	e.waitFor("going", time.Minute, "gone", gone)
}
