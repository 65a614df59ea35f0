package runnerapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// me writes without a key (a Job made before write keys): the rules of
// what a run may write hold whatever the key.
var me = &Identity{Namespace: "ns", Pod: "p", Job: "tfc-prod-apply-0123456789abcdef-0", Keyless: true,
	Object:    names.Object{Kind: "tfc", Name: "prod"},
	ObjectRef: metav1.OwnerReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "prod", UID: "uid-prod"}}

// recordBody is a run record as the runner writes it, changed by mutate.
func recordBody(t *testing.T, name string, mutate ...func(*corev1.ConfigMap)) []byte {
	t.Helper()
	labels := names.ObjectLabels(me.ObjectRef.Kind, me.Object.Name, me.ObjectRef.UID)
	labels[names.LabelRunRecord], labels[names.LabelOperation], labels[names.LabelOutcome] = "true", "apply", "Succeeded"
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{me.ObjectRef}},
		Data: map[string]string{"plan.txt": "No changes."}}
	for _, m := range mutate {
		m(c)
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func secretBody(t *testing.T, name string, mutate ...func(*corev1.Secret)) []byte {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}}, Type: corev1.SecretTypeOpaque}
	if types := me.Object.FamilyTypes(name); types != nil {
		s.Labels[names.LabelSecretType] = types[0]
	}
	if name == me.Object.State() || name == me.Object.DurableInputs() {
		s.Finalizers = []string{names.StateFinalizer}
	}
	for _, m := range mutate {
		m(s)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAuthorize(t *testing.T) {
	const secrets = "/api/v1/namespaces/ns/secrets"
	const leases = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
	const configmaps = "/api/v1/namespaces/ns/configmaps"
	other := names.Object{Kind: "tfc", Name: "victim"}
	tests := map[string]struct {
		method, path string
		body         []byte
		allowed      bool
	}{
		"read its state":          {method: "GET", path: secrets + "/tfc-prod-state", allowed: true},
		"read a state chunk":      {method: "GET", path: secrets + "/tfc-prod-state-1764540000000000000-0", allowed: true},
		"read a backup":           {method: "GET", path: secrets + "/tfc-prod-backup-20261130-174914", allowed: true},
		"read its run inputs":     {method: "GET", path: secrets + "/" + me.Job, allowed: true},
		"read its durable inputs": {method: "GET", path: secrets + "/tfc-prod-inputs", allowed: true},
		"write its state":         {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state"), allowed: true},
		"create a backup":         {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914"), allowed: true},
		"a chunk's name, labelled the state": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-state-1764540000000000000-7", func(s *corev1.Secret) {
			s.Labels[names.LabelSecretType] = names.SecretTypeState
		})},
		"a backup's name, unlabelled": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) {
			delete(s.Labels, names.LabelSecretType)
		})},
		"a backup with 40 KiB of annotations": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) {
			s.Annotations = map[string]string{"example.com/padding": strings.Repeat("x", 40<<10)}
		})},
		"a chunk of a backup": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914-1-0"), allowed: true},
		"create its result":   {method: "POST", path: secrets, body: secretBody(t, me.Job+"-result", func(s *corev1.Secret) { s.OwnerReferences = []metav1.OwnerReference{me.ObjectRef} }), allowed: true},
		"an owner of someone else's": {method: "POST", path: secrets, body: secretBody(t, me.Job+"-result", func(s *corev1.Secret) {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "x", UID: "uid-x", BlockOwnerDeletion: ptrTo(true)}}
		})},
		"delete a rotated backup":                    {method: "DELETE", path: secrets + "/tfc-prod-backup-20261130-174914-1", allowed: true},
		"delete its run inputs when done":            {method: "DELETE", path: secrets + "/" + me.Job, allowed: true},
		"delete another Job's run inputs":            {method: "DELETE", path: secrets + "/tfc-prod-apply-ffffffffffffffff-0"},
		"delete its result":                          {method: "DELETE", path: secrets + "/" + me.Job + "-result"},
		"hold its lock":                              {method: "PUT", path: leases + "/tfc-prod-lock", body: []byte(`{"metadata":{"name":"tfc-prod-lock"}}`), allowed: true},
		"create its lock":                            {method: "POST", path: leases, body: []byte(`{"metadata":{"name":"tfc-prod-lock"}}`), allowed: true},
		"ask a lock holder's phase":                  {method: "GET", path: "/api/v1/namespaces/ns/pods/holder", allowed: true},
		"read the cluster's kubeconfig":              {method: "GET", path: secrets + "/prod-kubeconfig"},
		"read another object's state":                {method: "GET", path: secrets + "/" + other.State()},
		"read a look-alike's state":                  {method: "GET", path: secrets + "/tfc-prod-x-state"},
		"read another Job's result":                  {method: "GET", path: secrets + "/tfc-prod-apply-ffffffffffffffff-0-result"},
		"list secrets":                               {method: "GET", path: secrets},
		"write another object's state":               {method: "PUT", path: secrets + "/" + other.State(), body: secretBody(t, other.State())},
		"rename in the body":                         {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, other.State())},
		"create a token Secret":                      {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Type = corev1.SecretTypeServiceAccountToken })},
		"create an unlabelled Secret":                {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Labels = nil })},
		"create any Secret":                          {method: "POST", path: secrets, body: secretBody(t, "mine")},
		"overwrite its run inputs":                   {method: "PUT", path: secrets + "/" + me.Job, body: secretBody(t, me.Job)},
		"delete its state":                           {method: "DELETE", path: secrets + "/tfc-prod-state"},
		"delete its durable inputs":                  {method: "DELETE", path: secrets + "/tfc-prod-inputs"},
		"take another object's lock":                 {method: "PUT", path: leases + "/" + other.Lock(), body: []byte(`{"metadata":{"name":"` + other.Lock() + `"}}`)},
		"delete its lock":                            {method: "DELETE", path: leases + "/tfc-prod-lock"},
		"another namespace":                          {method: "GET", path: "/api/v1/namespaces/kube-system/secrets/tfc-prod-state"},
		"read a configmap":                           {method: "GET", path: "/api/v1/namespaces/ns/configmaps/x"},
		"create its run record":                      {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID)), allowed: true},
		"another Job's run record":                   {method: "POST", path: configmaps, body: recordBody(t, "tfc-prod-apply-ffffffffffffffff-0-run")},
		"any other configmap":                        {method: "POST", path: configmaps, body: recordBody(t, "kube-root-ca.crt")},
		"overwrite its run record":                   {method: "PUT", path: configmaps + "/" + me.Object.RunRecord(me.Job, me.PodUID), body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID))},
		"another pod's record of its Job":            {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, "other-pod"))},
		"delete a run record":                        {method: "DELETE", path: configmaps + "/" + me.Object.RunRecord(me.Job, me.PodUID)},
		"a run record of another object":             {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID), func(c *corev1.ConfigMap) { c.Labels[names.LabelObjectUID] = "uid-victim" })},
		"a run record with a label of Cluster API's": {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID), func(c *corev1.ConfigMap) { c.Labels["cluster.x-k8s.io/cluster-name"] = "victim" })},
		"a run record without its object's labels":   {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID), func(c *corev1.ConfigMap) { delete(c.Labels, names.LabelObjectUID) })},
		"a run record with a finalizer":              {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID), func(c *corev1.ConfigMap) { c.Finalizers = []string{"example.com/never"} })},
		"a run record owned by another": {method: "POST", path: configmaps, body: recordBody(t, me.Object.RunRecord(me.Job, me.PodUID), func(c *corev1.ConfigMap) {
			c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "x", UID: "uid-x"}}
		}), allowed: true}, // forwarded owned by the object alone
		"serviceaccount tokens":           {method: "POST", path: "/api/v1/namespaces/ns/serviceaccounts/default/token", body: []byte(`{}`)},
		"a pod's spec is not a write":     {method: "PUT", path: "/api/v1/namespaces/ns/pods/holder", body: []byte(`{}`)},
		"any other API":                   {method: "GET", path: "/apis/apps/v1/namespaces/ns/deployments"},
		"a path that walks out":           {method: "GET", path: secrets + "/../configmaps/x"},
		"watch its state":                 {method: "GET", path: secrets + "?watch=true"},
		"protobuf bodies are not checked": {method: "PUT", path: secrets + "/tfc-prod-state", body: []byte("k8s\x00...")},
		"a body over the limit":           {method: "PUT", path: secrets + "/tfc-prod-state", body: bytes.Repeat([]byte(" "), maxBody+1)},
		// Issue 30, item 3: a runner writes only its own family's metadata.
		"a state as the store writes it": {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) {
			s.Labels = map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: "tfc", names.LabelObjectName: "prod",
				names.LabelObjectUID: "uid-prod", names.LabelSecretType: names.SecretTypeState, names.LabelClusterctlMove: "", "velero.io/backup-name": "nightly"}
			s.Annotations = map[string]string{names.AnnotationObjectName: "prod"}
			s.Finalizers = []string{names.StateFinalizer}
		}), allowed: true},
		"the UID of the object before a restore": {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Labels[names.LabelObjectUID] = "uid-before" }), allowed: true},
		"another object's name":                  {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Labels[names.LabelObjectName] = "victim" })},
		"another owner's annotation": {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) {
			s.Annotations = map[string]string{names.AnnotationObjectName: "victim"}
		})},
		"marked as bootstrap data": {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Labels["captf.io/bootstrap-data"] = "true" })},
		"abandoned":                {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Labels[names.LabelAbandoned] = "true" })},
		"a Cluster API label":      {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Labels["cluster.x-k8s.io/cluster-name"] = "victim" })},
		"a secret type of the manager's": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) {
			s.Labels[names.LabelSecretType] = names.SecretTypeRunInputs
		})},
		"a finalizer of another": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Finalizers = []string{"example.com/never"} })},
		// Issue 50, item 1: the state and durable inputs keep their finalizer.
		"its state without its finalizer":            {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Finalizers = nil })},
		"its durable inputs without their finalizer": {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-inputs", func(s *corev1.Secret) { s.Finalizers = nil })},
		"a backup without it":                        {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Finalizers = nil }), allowed: true},
		"an immutable backup":                        {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Immutable = ptrTo(true) })},
		"a Secret in another namespace (body)":       {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914", func(s *corev1.Secret) { s.Namespace = "kube-system" }), allowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.body != nil {
				r.Header.Set("Content-Type", "application/json")
			}
			req, err := me.authorize(r, tc.body)
			if tc.allowed != (err == nil) {
				t.Fatalf("authorize = %v, want allowed %v", err, tc.allowed)
			}
			if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) && !apierrors.IsRequestEntityTooLargeError(err) {
				t.Errorf("refused with %v, want a Kubernetes status", err)
			}
			if req != nil && req.body != nil {
				var m metav1.PartialObjectMetadata
				if err := json.Unmarshal(req.body, &m); err != nil || m.Namespace != "ns" {
					t.Errorf("forwarded body %s: namespace not pinned", req.body)
				}
				for _, ref := range m.OwnerReferences {
					if ref != me.ObjectRef {
						t.Errorf("forwarded owner %+v, want only the object", ref)
					}
				}
			}
		})
	}
}

// TestIdentify: only a pod whose Job CAPTF made for a Terraform object gets
// an identity, and only that object's.
func TestIdentify(t *testing.T) {
	ctrl := true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: me.Job, Namespace: "ns", UID: "uid-job",
		Labels:          map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelObjectUID: "uid-prod"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "prod", UID: "uid-prod", Controller: &ctrl}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-pod",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: me.Job, UID: "uid-job", Controller: &ctrl}}}}
	tests := map[string]struct {
		mutate   func(pod *corev1.Pod, job *batchv1.Job)
		audience string
		wantCode int
	}{
		"a runner pod":               {wantCode: http.StatusOK},
		"a token for the API server": {audience: "https://kubernetes.default.svc", wantCode: http.StatusUnauthorized},
		"a pod of no Job":            {mutate: func(p *corev1.Pod, _ *batchv1.Job) { p.OwnerReferences = nil }, wantCode: http.StatusForbidden},
		"a Job CAPTF did not make":   {mutate: func(_ *corev1.Pod, j *batchv1.Job) { delete(j.Labels, names.LabelManagedBy) }, wantCode: http.StatusForbidden},
		"a Job of another kind of owner": {mutate: func(_ *corev1.Pod, j *batchv1.Job) {
			j.OwnerReferences[0].APIVersion, j.OwnerReferences[0].Kind = "apps/v1", "Deployment"
		}, wantCode: http.StatusForbidden},
		"a new pod with the token's pod name": {mutate: func(p *corev1.Pod, _ *batchv1.Job) { p.UID = "uid-other" }, wantCode: http.StatusUnauthorized},
	}
	// Each case with the Job read from the API server, from the leader's
	// cache, and with a cache that holds another Job of that name.
	for name, tc := range tests {
		for _, from := range []string{"api", "cache", "stale cache"} {
			t.Run(name+"/"+from, func(t *testing.T) {
				p, j := pod.DeepCopy(), job.DeepCopy()
				if tc.mutate != nil {
					tc.mutate(p, j)
				}
				objects := []runtime.Object{p, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfc-prod-state", Namespace: "ns"}}}
				var cached *batchv1.Job
				switch from {
				case "api":
					objects = append(objects, j)
				case "cache":
					cached = j
				case "stale cache":
					objects = append(objects, j)
					cached = job.DeepCopy()
					cached.UID = "uid-old-job"
				}
				kube := fake.NewClientset(objects...)
				audience := tc.audience
				if audience == "" {
					audience = names.RunnerTokenAudience
				}
				kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
					review := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
					review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{audience},
						User: authenticationv1.UserInfo{Username: "system:serviceaccount:ns:captf-runner", Extra: map[string]authenticationv1.ExtraValue{
							"authentication.kubernetes.io/pod-name": {"p"}, "authentication.kubernetes.io/pod-uid": {"uid-pod"}}}}
					return true, review, nil
				})
				s := &Server{JWKS: noJWKS, Kube: kube, Config: &rest.Config{Host: "https://api.test"}}
				if cached != nil {
					s.CachedJob = func(namespace, name string) *batchv1.Job {
						if namespace == cached.Namespace && name == cached.Name {
							return cached
						}
						return nil
					}
				}
				if err := s.init(); err != nil {
					t.Fatal(err)
				}
				id, err := s.authenticate(t.Context(), runnerToken, "10.0.0.7")
				code := http.StatusOK
				if err != nil {
					code = int(err.(apierrors.APIStatus).Status().Code)
				}
				if code != tc.wantCode {
					t.Fatalf("authenticate = %v (%d), want %d", err, code, tc.wantCode)
				}
				if err == nil && (id.Object != me.Object || id.ObjectRef.UID != "uid-prod" || id.Job != me.Job) {
					t.Errorf("identity %+v, want %+v", id, me)
				}
				jobGets := 0
				for _, a := range kube.Actions() {
					if a.GetVerb() == "get" && a.GetResource().Resource == "jobs" {
						jobGets++
					}
				}
				if wantGets := map[bool]int{true: 0, false: 1}[from == "cache"]; code != http.StatusUnauthorized && metav1.GetControllerOf(p) != nil && jobGets != wantGets {
					t.Errorf("Job GETs = %d, want %d", jobGets, wantGets)
				}
			})
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// runnerToken is shaped as the token the API server gives the runner pod
// of fakeRunnerPod; no keys are read in these tests (noJWKS), so its
// signature is not checked.
var runnerToken = jwtOf("ns", "p", "uid-pod")

// jwtOf is a token shaped as a runner pod's (namespace ns, pod name and
// uid), signed by nobody.
func jwtOf(ns, pod, uid string) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	claims := map[string]any{"aud": []string{names.RunnerTokenAudience}, "exp": time.Now().Add(time.Hour).Unix(),
		"sub":           "system:serviceaccount:" + ns + ":" + names.RunnerServiceAccount,
		"kubernetes.io": map[string]any{"namespace": ns, "pod": map[string]string{"name": pod, "uid": uid}}}
	return enc(map[string]string{"alg": "RS256", "kid": "k"}) + "." + enc(claims) + ".c2ln"
}

// noJWKS is a Server's JWKS that never answers: signatures are not
// checked.
func noJWKS(context.Context) ([]byte, error) { return nil, errors.New("no keys here") }

// fakeRunnerPod is the API objects of one runner pod of me's object, and a
// TokenReview that knows its token, runnerToken.
func fakeRunnerPod() *fake.Clientset { return fakeRunnerPodWithToken(runnerToken) }

// fakeRunnerPodWithToken is fakeRunnerPod whose pod's token is token.
func fakeRunnerPodWithToken(token string) *fake.Clientset {
	ctrl := true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: me.Job, Namespace: "ns", UID: "uid-job",
		Labels:          map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelObjectUID: "uid-prod"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: me.ObjectRef.APIVersion, Kind: "TerraformCluster", Name: "prod", UID: "uid-prod", Controller: &ctrl}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-pod",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: me.Job, UID: "uid-job", Controller: &ctrl}}}}
	kube := fake.NewClientset(pod, job)
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if review.Spec.Token == token {
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{names.RunnerTokenAudience},
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:ns:captf-runner", Extra: map[string]authenticationv1.ExtraValue{
					"authentication.kubernetes.io/pod-name": {"p"}, "authentication.kubernetes.io/pod-uid": {"uid-pod"}}}}
		}
		return true, review, nil
	})
	return kube
}

// TestForward: what reaches the API server is the checked request with
// the manager's credentials: no caller header, no query beyond a run's.
func TestForward(t *testing.T) {
	got := make(chan *http.Request, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"tfc-prod-state"}}`))
	}))
	defer api.Close()
	s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL, BearerToken: "manager-token"}}
	front := httptest.NewServer(s)
	defer front.Close()
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/api/v1/namespaces/ns/secrets/tfc-prod-state?resourceVersion=5&watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+runnerToken)
	req.Header.Set("Impersonate-User", "system:admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	up := <-got
	if q := up.URL.RawQuery; q != "resourceVersion=5" {
		t.Errorf("forwarded query %q, want only resourceVersion", q)
	}
	if a := up.Header.Get("Authorization"); a != "Bearer manager-token" {
		t.Errorf("forwarded Authorization %q, want the manager's", a)
	}
	for k := range up.Header {
		if strings.HasPrefix(k, "Impersonate") {
			t.Errorf("forwarded %s", k)
		}
	}
}

// TestOnePodCannotTakeEverySlot: past maxPerPod requests at once a pod is
// told to retry, and the server keeps slots for the others.
func TestOnePodCannotTakeEverySlot(t *testing.T) {
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer api.Close()
	s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL}}
	if err := s.init(); err != nil { // before the test reads its counters
		t.Fatal(err)
	}
	front := httptest.NewServer(s)
	defer front.Close()
	defer close(release) // first: the servers wait for the held requests
	get := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, front.URL+"/api/v1/namespaces/ns/secrets/tfc-prod-state", nil)
		req.Header.Set("Authorization", "Bearer "+runnerToken)
		return http.DefaultClient.Do(req)
	}
	for range maxPerPod {
		go func() {
			if resp, err := get(); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitPodRequests(s, "uid-pod", maxPerPod)
	resp, err := get()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("request %d of one pod: %s, want 429 with Retry-After", maxPerPod+1, resp.Status)
	}
	if n := s.inFlight.Held("ns"); n != maxPerPod {
		t.Errorf("%d slots taken, want the pod's %d", n, maxPerPod)
	}
}

// waitPodRequests waits until pod has n requests in the server.
func waitPodRequests(s *Server, pod types.UID, n int) {
	for {
		s.mu.Lock()
		held := s.perPod[pod]
		s.mu.Unlock()
		if held == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowBodyHoldsNoSlot: a pod that sends its bodies slowly (a hostile
// module trickling bytes) holds its own share of requests, never a slot of
// the ones that reach the API server.
func TestSlowBodyHoldsNoSlot(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer api.Close()
	s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL}}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s)
	defer front.Close()
	var writers []*io.PipeWriter
	defer func() {
		for _, w := range writers {
			w.Close()
		}
	}()
	for range maxPerPod {
		body, w := io.Pipe()
		writers = append(writers, w)
		req, _ := http.NewRequest(http.MethodPut, front.URL+"/api/v1/namespaces/ns/secrets/tfc-prod-state", body)
		req.Header.Set("Authorization", "Bearer "+runnerToken)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		_, _ = w.Write([]byte(`{"metadata":`)) // and no more
	}
	waitPodRequests(s, "uid-pod", maxPerPod)
	if n := s.inFlight.Held("ns"); n != 0 {
		t.Errorf("bodies being read hold %d forwarding slots, want 0", n)
	}
}

// TestJunkTokensSpendTheirSourcesBudget: a source that sends tokens the
// API server refuses is told to slow down once over its own rate; another
// source's new token is still checked.
func TestJunkTokensSpendTheirSourcesBudget(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer api.Close()
	kube := fakeRunnerPod()
	s := &Server{JWKS: noJWKS, Kube: kube, Config: &rest.Config{Host: api.URL}}
	retryAfter := map[string]bool{}
	send := func(source, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/tfc-prod-state", nil)
		req.RemoteAddr = source + ":40000"
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code == http.StatusTooManyRequests {
			retryAfter[rec.Header().Get("Retry-After")] = true
		}
		return rec.Code
	}
	refused := func(reason string) float64 {
		return testutil.ToFloat64(metrics.RunnerAPIRefused.WithLabelValues("", reason))
	}
	sourceBefore, sharedBefore := refused("new_tokens_source"), refused("new_tokens_shared")
	codes := map[int]int{}
	for i := range 3 * sourceReviewBurst {
		codes[send("10.0.0.66", jwtOf("evil", "junk", fmt.Sprintf("uid-junk-%d", i)))]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized] > sourceReviewBurst+sourceReviewQPS {
		t.Errorf("junk from one source: %v, want 401 up to its burst, then 429", codes)
	}
	// Counted as the source's own budget spent, not the shared one; told
	// when to come back (client-go waits only for a header).
	if got := refused("new_tokens_source") - sourceBefore; got != float64(codes[http.StatusTooManyRequests]) {
		t.Errorf("captf_runner_api_refused_total{reason=new_tokens_source} rose by %v, want the %d answered 429", got, codes[http.StatusTooManyRequests])
	}
	if got := refused("new_tokens_shared") - sharedBefore; got != 0 {
		t.Errorf("captf_runner_api_refused_total{reason=new_tokens_shared} rose by %v, want 0", got)
	}
	if !maps.Equal(retryAfter, map[string]bool{"1": true}) {
		t.Errorf("Retry-After headers of the 429s: %v, want 1", retryAfter)
	}
	if code := send("10.0.0.7", runnerToken); code != http.StatusOK {
		t.Errorf("a runner's new token from another source: %d, want 200", code)
	}
	// The runner's token is checked again once its identity expires, and
	// spends no budget: from the flooding source too, whose is empty.
	s.mu.Lock()
	for k, c := range s.identities {
		c.expires = time.Now().Add(-time.Second)
		s.identities[k] = c
	}
	s.mu.Unlock()
	if code := send("10.0.0.66", runnerToken); code != http.StatusOK {
		t.Errorf("a known runner token checked again from the flooding source: %d, want 200", code)
	}
}

// TestHolderWithoutLabelIsNotGone: asked for a lock holder that is not a
// CAPTF pod (someone removed its label), the runner API refuses to show it
// rather than say it does not exist, which a runner would read as a free
// lock.
func TestHolderWithoutLabelIsNotGone(t *testing.T) {
	kube := fakeRunnerPod()
	if _, err := kube.CoreV1().Pods("ns").Create(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: "ns"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &Server{JWKS: noJWKS, Kube: kube, Config: &rest.Config{Host: "https://api.test"}}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/pods/holder", nil)
	req.Header.Set("Authorization", "Bearer "+runnerToken)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a holder without CAPTF's label: %d, want 403", rec.Code)
	}
}

// TestFamilySize: module code that creates Secrets of its own object's
// state family gets no more of them than runs make: chunks below the size
// limit's count and in order, a bounded number of backups and chunked
// states at once.
func TestFamilySize(t *testing.T) {
	meta := func(name, typ string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue,
				names.LabelKind: "tfc", names.LabelObjectName: "prod", names.LabelSecretType: typ}}}
	}
	backups := func(n int) []runtime.Object {
		var out []runtime.Object
		for i := range n {
			out = append(out, meta(fmt.Sprintf("tfc-prod-backup-20261130-1749%02d", i), names.SecretTypeBackup))
		}
		return out
	}
	states := func(n int) []runtime.Object {
		var out []runtime.Object
		for i := range n {
			out = append(out, meta(fmt.Sprintf("tfc-prod-state-17645400000000000%02d-0", i), names.SecretTypeStateChunk),
				meta(fmt.Sprintf("tfc-prod-state-17645400000000000%02d-1", i), names.SecretTypeStateChunk))
		}
		return out
	}
	tests := map[string]struct {
		existing []runtime.Object
		name     string
		typ      string
		wantErr  string // "" allowed
	}{
		"the state":                             {existing: states(40), name: "tfc-prod-state", typ: names.SecretTypeState},
		"a backup":                              {existing: backups(5), name: "tfc-prod-backup-20261201-000000", typ: names.SecretTypeBackup},
		"a backup past the most a run left":     {existing: backups(18), name: "tfc-prod-backup-20261201-000000", typ: names.SecretTypeBackup, wantErr: "has 18 backups already, the most runs leave is 18"},
		"a rescued state when backups are full": {existing: backups(18), name: "tfc-prod-errored-20261201-000000", typ: names.SecretTypeBackup},
		"a chunk index written two ways":        {existing: states(1), name: "tfc-prod-state-1764540000000000000-00", typ: names.SecretTypeStateChunk, wantErr: "ends in its index"},
		"another object's backups count not": {existing: append(backups(0), meta("tfc-other-backup-20261130-174900", names.SecretTypeBackup)),
			name: "tfc-prod-backup-20261201-000000", typ: names.SecretTypeBackup},
		"chunk 0 of a new state":           {existing: states(2), name: "tfc-prod-state-1764540000000000099-0", typ: names.SecretTypeStateChunk},
		"chunk 0 past the most a run left": {existing: states(18), name: "tfc-prod-state-1764540000000000099-0", typ: names.SecretTypeStateChunk, wantErr: "has 18 chunked states already"},
		"the next chunk":                   {existing: states(1), name: "tfc-prod-state-1764540000000000000-2", typ: names.SecretTypeStateChunk},
		"a chunk out of order":             {existing: states(1), name: "tfc-prod-state-1764540000000000000-5", typ: names.SecretTypeStateChunk, wantErr: "written in order"},
		"a chunk past the size limit":      {name: "tfc-prod-backup-20261201-000000-171", typ: names.SecretTypeBackupChunk, wantErr: "at most 171"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := metav1.AddMetaToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			s := &Server{StateBackups: 5, meta: metadatafake.NewSimpleMetadataClient(scheme, tc.existing...)}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Labels: map[string]string{names.LabelSecretType: tc.typ}}}
			err := s.checkFamilySize(context.Background(), me, sec)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, want Forbidden with %q", err, tc.wantErr)
			}
		})
	}
}

// TestKnownTokenCheckedAgain: once a runner's identity expires (every
// identityTTL of a long run), its token is reviewed again; the pod it is
// bound to is not read again (a bound token dies with its pod), the Job is
// looked for again, in the cache when it holds it. An orphaned pod, whose
// Job is gone, loses its identity.
func TestKnownTokenCheckedAgain(t *testing.T) {
	tests := map[string]struct {
		cached      bool
		deleteJob   bool
		wantCode    int
		wantActions []string
	}{
		"the Job in the cache":        {cached: true, wantCode: http.StatusOK, wantActions: []string{"create tokenreviews"}},
		"a standby reads the Job":     {wantCode: http.StatusOK, wantActions: []string{"create tokenreviews", "get jobs"}},
		"the Job deleted, pod orphan": {deleteJob: true, wantCode: http.StatusForbidden, wantActions: []string{"create tokenreviews", "get jobs"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := fakeRunnerPod()
			s := &Server{JWKS: noJWKS, Kube: kube, Config: &rest.Config{Host: "https://api.test"}}
			if err := s.init(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.authenticate(t.Context(), runnerToken, "10.0.0.7"); err != nil {
				t.Fatal(err)
			}
			job, err := kube.BatchV1().Jobs("ns").Get(t.Context(), me.Job, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.cached {
				s.CachedJob = func(string, string) *batchv1.Job { return job }
			}
			if tc.deleteJob {
				if err := kube.BatchV1().Jobs("ns").Delete(t.Context(), me.Job, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			s.mu.Lock()
			for k, c := range s.identities {
				c.expires = time.Now().Add(-time.Second)
				s.identities[k] = c
			}
			s.mu.Unlock()
			kube.ClearActions()
			_, err = s.authenticate(t.Context(), runnerToken, "10.0.0.7")
			code := http.StatusOK
			if err != nil {
				code = int(err.(apierrors.APIStatus).Status().Code)
			}
			if code != tc.wantCode {
				t.Errorf("checked again: %v (%d), want %d", err, code, tc.wantCode)
			}
			var actions []string
			for _, a := range kube.Actions() {
				actions = append(actions, a.GetVerb()+" "+a.GetResource().Resource)
			}
			if !slices.Equal(actions, tc.wantActions) {
				t.Errorf("requests %q, want %q", actions, tc.wantActions)
			}
		})
	}
}

// TestResultHandedOver: a result the API server took from a runner is
// handed to the leader's readers with its Job; a write it refused, or of
// another Secret, is not.
func TestResultHandedOver(t *testing.T) {
	result := me.Object.Result(me.Job)
	data := map[string][]byte{"result.json": []byte(`{"outcome":"Succeeded"}`)}
	tests := map[string]struct {
		method, path string
		body         []byte
		answer       int
		want         bool
	}{
		"its result created":       {method: http.MethodPost, path: "/api/v1/namespaces/ns/secrets", body: secretBody(t, result, func(s *corev1.Secret) { s.Data = data }), answer: http.StatusCreated, want: true},
		"its result written again": {method: http.MethodPut, path: "/api/v1/namespaces/ns/secrets/" + result, body: secretBody(t, result, func(s *corev1.Secret) { s.Data = data }), answer: http.StatusOK, want: true},
		"its result already there": {method: http.MethodPost, path: "/api/v1/namespaces/ns/secrets", body: secretBody(t, result, func(s *corev1.Secret) { s.Data = data }), answer: http.StatusConflict},
		"the state is no result":   {method: http.MethodPut, path: "/api/v1/namespaces/ns/secrets/tfc-prod-state", body: secretBody(t, "tfc-prod-state", func(s *corev1.Secret) { s.Data = data }), answer: http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodGet { // the head's protection, read before it is written
					_, _ = w.Write([]byte(`{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"tfc-prod-state"}}`))
					return
				}
				w.WriteHeader(tc.answer)
				_, _ = w.Write([]byte(`{}`))
			}))
			defer api.Close()
			type handed struct {
				job  types.UID
				data map[string][]byte
			}
			var got []handed
			s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL},
				ResultWritten: func(job types.UID, data map[string][]byte) { got = append(got, handed{job, data}) }}
			req := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+runnerToken)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tc.answer {
				t.Fatalf("answer %d %s, want the API server's %d", rec.Code, rec.Body, tc.answer)
			}
			switch {
			case !tc.want && len(got) > 0:
				t.Errorf("handed over %+v, want nothing", got)
			case tc.want && (len(got) != 1 || got[0].job != "uid-job" || string(got[0].data["result.json"]) != string(data["result.json"])):
				t.Errorf("handed over %+v, want the result of Job uid-job once", got)
			}
		})
	}
}

// TestRunInputsHandedOver: a runner's first read of its run inputs is
// served from what the controllers handed over, with no request to the API
// server; another run's inputs, another object's, and a read of what is
// not kept go to the API server.
func TestRunInputsHandedOver(t *testing.T) {
	inputs := me.Object.RunInputs(me.Job)
	handed := func(name, objectUID string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "42",
			Labels: map[string]string{names.LabelObjectUID: objectUID}}, Data: map[string][]byte{"module.json": []byte(`{"inline":"x"}`)}}
	}
	tests := map[string]struct {
		name  string
		kept  *corev1.Secret
		wantR string // the resource version served: "42" handed over, "7" from the API server
	}{
		"its inputs, kept":                    {name: inputs, kept: handed(inputs, "uid-prod"), wantR: "42"},
		"its inputs, not kept":                {name: inputs, wantR: "7"},
		"its inputs, kept for another object": {name: inputs, kept: handed(inputs, "uid-other"), wantR: "7"},
		"another Secret of its object, kept":  {name: "tfc-prod-state", kept: handed("tfc-prod-state", "uid-prod"), wantR: "7"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var forwarded []string
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				forwarded = append(forwarded, r.Method+" "+r.URL.Path)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"x","resourceVersion":"7"}}`))
			}))
			defer api.Close()
			var asked []string
			s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL}, RunInputs: func(namespace, name string) *corev1.Secret {
				asked = append(asked, namespace+"/"+name)
				if tc.kept == nil || name != tc.kept.Name {
					return nil
				}
				return tc.kept
			}}
			req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/"+tc.name, nil)
			req.Header.Set("Authorization", "Bearer "+runnerToken)
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			var got corev1.Secret
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
				t.Fatalf("answer %d %s", rec.Code, rec.Body)
			}
			if got.ResourceVersion != tc.wantR {
				t.Errorf("served resource version %q, want %q; forwarded %v", got.ResourceVersion, tc.wantR, forwarded)
			}
			if tc.wantR == "42" && (len(forwarded) > 0 || got.Kind != "Secret" || got.APIVersion != "v1" || string(got.Data["module.json"]) != `{"inline":"x"}`) {
				t.Errorf("served %+v and forwarded %v; want the kept Secret as the API server serves one, and no request", got, forwarded)
			}
			if tc.name != inputs && len(asked) > 0 {
				t.Errorf("asked for %v: only a run's own inputs are handed over", asked)
			}
		})
	}
}

// TestProtectionRecordIsTheManagers (issue 50, item 1): a runner writes its
// state head with the protection the manager recorded on it, never another.
func TestProtectionRecordIsTheManagers(t *testing.T) {
	const recorded = `{"uid":"uid-earlier","policy":"Manual","protect":["net.*"]}`
	var forwarded []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = fmt.Fprintf(w, `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"tfc-prod-state","namespace":"ns","annotations":{%q:%q}}}`,
				names.AnnotationProtection, recorded)
			return
		}
		forwarded = append(forwarded, r.Method)
		_, _ = w.Write([]byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"tfc-prod-state"}}`))
	}))
	defer api.Close()
	s := &Server{JWKS: noJWKS, Kube: fakeRunnerPod(), Config: &rest.Config{Host: api.URL, BearerToken: "manager-token"}}
	front := httptest.NewServer(s)
	defer front.Close()
	head := func(annotation string) []byte {
		return secretBody(t, "tfc-prod-state", func(s *corev1.Secret) {
			if annotation != "" {
				s.Annotations = map[string]string{names.AnnotationProtection: annotation}
			}
		})
	}
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		want               int
	}{
		{"kept as recorded", http.MethodPut, "/tfc-prod-state", head(recorded), http.StatusOK},
		{"loosened", http.MethodPut, "/tfc-prod-state", head(`{"uid":"uid-earlier","policy":"Manual"}`), http.StatusForbidden},
		{"dropped", http.MethodPut, "/tfc-prod-state", head(""), http.StatusForbidden},
		{"made up on a new state", http.MethodPost, "", head(`{"uid":"uid-x"}`), http.StatusForbidden},
		{"a new state without", http.MethodPost, "", head(""), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, front.URL+"/api/v1/namespaces/ns/secrets"+tc.path, bytes.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+runnerToken)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %s, want %d", resp.Status, tc.want)
			}
		})
	}
	if len(forwarded) != 2 {
		t.Errorf("forwarded %v, want the two allowed writes", forwarded)
	}
}

// TestDriftChecksOnlyRead (issue 50, item 2): a drift check's runner, whose
// module code runs at plan time with nobody's approval, reads the state and
// writes its lock and result, and nothing of the state family.
func TestDriftChecksOnlyRead(t *testing.T) {
	const secrets = "/api/v1/namespaces/ns/secrets"
	drift := *me
	drift.ReadOnly = true
	tests := map[string]struct {
		method, path string
		body         []byte
		allowed      bool
	}{
		"read its state":          {method: "GET", path: secrets + "/tfc-prod-state", allowed: true},
		"read a chunk":            {method: "GET", path: secrets + "/tfc-prod-state-1764540000000000000-0", allowed: true},
		"read its durable inputs": {method: "GET", path: secrets + "/tfc-prod-inputs", allowed: true},
		"hold its lock":           {method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases/tfc-prod-lock", body: []byte(`{"metadata":{"name":"tfc-prod-lock"}}`), allowed: true},
		"write its result":        {method: "POST", path: secrets, body: secretBody(t, me.Job+"-result"), allowed: true},
		"delete its run inputs":   {method: "DELETE", path: secrets + "/" + me.Job, allowed: true},
		"write the state":         {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state")},
		"create a chunk":          {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-state-1764540000000000000-0")},
		"create a backup":         {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914")},
		"delete a backup":         {method: "DELETE", path: secrets + "/tfc-prod-backup-20261130-174914"},
		"rewrite durable inputs":  {method: "PUT", path: secrets + "/tfc-prod-inputs", body: secretBody(t, "tfc-prod-inputs")},
		"create a rescued state":  {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-errored-20261130-174914")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.body != nil {
				r.Header.Set("Content-Type", "application/json")
			}
			_, err := drift.authorize(r, tc.body)
			if tc.allowed != (err == nil) {
				t.Fatalf("authorize = %v, want allowed %v", err, tc.allowed)
			}
			if err != nil && !strings.Contains(err.Error(), "a drift check only reads the state") {
				t.Errorf("refused with %v, want the drift rule", err)
			}
		})
	}
	// The same requests of an apply pass.
	for _, path := range []string{"tfc-prod-state", "tfc-prod-inputs"} {
		r := httptest.NewRequest(http.MethodPut, secrets+"/"+path, bytes.NewReader(secretBody(t, path)))
		r.Header.Set("Content-Type", "application/json")
		if _, err := me.authorize(r, secretBody(t, path)); err != nil {
			t.Errorf("an apply writes %s: %v", path, err)
		}
	}
}

// TestOnlyTheRunnerWrites (issue 50, item 2): every process of a runner pod
// holds the pod's token, the module's code too; only requests that carry
// the Job's write key, which only the runner holds, write. The rest read.
func TestOnlyTheRunnerWrites(t *testing.T) {
	const secrets = "/api/v1/namespaces/ns/secrets"
	keyed := *me
	keyed.WriteKey, keyed.Keyless = "the-key", false
	emptyKey := *me
	emptyKey.Keyless = false // a Job whose key entry is empty
	requests := map[string]struct {
		method, path string
		body         []byte
	}{
		"write the state":     {method: "PUT", path: secrets + "/tfc-prod-state", body: secretBody(t, "tfc-prod-state")},
		"create a backup":     {method: "POST", path: secrets, body: secretBody(t, "tfc-prod-backup-20261130-174914")},
		"delete a backup":     {method: "DELETE", path: secrets + "/tfc-prod-backup-20261130-174914"},
		"write its result":    {method: "POST", path: secrets, body: secretBody(t, me.Job+"-result")},
		"hold the lock":       {method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases/tfc-prod-lock", body: []byte(`{"metadata":{"name":"tfc-prod-lock"}}`)},
		"read the state":      {method: "GET", path: secrets + "/tfc-prod-state"},
		"read its run inputs": {method: "GET", path: secrets + "/" + me.Job},
	}
	senders := map[string]struct {
		id   *Identity
		sent string // the header; "-" none
		// writes: the sender's writes pass; reads always do.
		writes bool
	}{
		"the runner, with the key":                {id: &keyed, sent: "the-key", writes: true},
		"the module's code, with the token alone": {id: &keyed, sent: "-"},
		"a guess":                             {id: &keyed, sent: "the-kez"},
		"an empty key":                        {id: &keyed, sent: ""},
		"a Job made before write keys":        {id: me, sent: "-", writes: true},
		"a Job with an empty key, none sent":  {id: &emptyKey, sent: "-"},
		"a Job with an empty key, empty sent": {id: &emptyKey, sent: ""},
	}
	for sender, s := range senders {
		for what, req := range requests {
			t.Run(sender+"/"+what, func(t *testing.T) {
				r := httptest.NewRequest(req.method, req.path, bytes.NewReader(req.body))
				if req.body != nil {
					r.Header.Set("Content-Type", "application/json")
				}
				if s.sent != "-" {
					r.Header.Set(run.HeaderWriteKey, s.sent)
				}
				_, err := s.id.authorize(r, req.body)
				if allowed := req.method == http.MethodGet || s.writes; allowed != (err == nil) {
					t.Fatalf("authorize = %v, want allowed %v", err, allowed)
				}
				if err != nil && !strings.Contains(err.Error(), "only the runner writes") {
					t.Errorf("refused with %v, want the write key's rule", err)
				}
			})
		}
	}
}

// TestAuthorizeCatalog: a catalog entry's resolve Job reads its inputs and
// writes its result; no state, lock or record, not even of its own entry.
func TestAuthorizeCatalog(t *testing.T) {
	resolver := &Identity{Namespace: "ns", Pod: "p", Job: "tfmod-vpc-resolve-0123456789abcdef-0", Keyless: true, Catalog: true,
		Object:    names.ObjectOf("TerraformModule", "vpc"),
		ObjectRef: metav1.OwnerReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformModule", Name: "vpc", UID: "uid-vpc"}}
	const secrets = "/api/v1/namespaces/ns/secrets"
	body := func(name string) []byte {
		// As a run writes it: the entry's labels, the family's type and
		// finalizer.
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: names.ObjectLabels("TerraformModule", "vpc", "uid-vpc")}}
		if types := resolver.Object.FamilyTypes(name); types != nil {
			sec.Labels[names.LabelSecretType] = types[0]
			sec.Finalizers = []string{names.StateFinalizer}
		}
		b, err := json.Marshal(sec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := map[string]struct {
		method, path string
		body         []byte
		allowed      bool
	}{
		"read its inputs":      {method: "GET", path: secrets + "/" + resolver.Job, allowed: true},
		"create its result":    {method: "POST", path: secrets, body: body(resolver.Job + "-result"), allowed: true},
		"write its result":     {method: "PUT", path: secrets + "/" + resolver.Job + "-result", body: body(resolver.Job + "-result"), allowed: true},
		"read the credentials": {method: "GET", path: secrets + "/git-credentials"},
		"create a state":       {method: "POST", path: secrets, body: body(resolver.Object.State())},
		"write a state":        {method: "PUT", path: secrets + "/" + resolver.Object.State(), body: body(resolver.Object.State())},
		"read a state":         {method: "GET", path: secrets + "/" + resolver.Object.State()},
		"take a lock":          {method: "POST", path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases", body: []byte(`{"metadata":{"name":"` + resolver.Object.Lock() + `"}}`)},
		"write a record":       {method: "POST", path: "/api/v1/namespaces/ns/configmaps", body: []byte(`{"metadata":{"name":"x"}}`)},
		"delete its inputs":    {method: "DELETE", path: secrets + "/" + resolver.Job, allowed: true},
		"delete its result":    {method: "DELETE", path: secrets + "/" + resolver.Job + "-result"},
		"ask a pod's phase":    {method: "GET", path: "/api/v1/namespaces/ns/pods/x"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.body != nil {
				r.Header.Set("Content-Type", "application/json")
			}
			if _, err := resolver.authorize(r, tc.body); tc.allowed != (err == nil) {
				t.Fatalf("authorize = %v, want allowed %v", err, tc.allowed)
			}
		})
	}
}

// TestCatalogCredentials: a catalog entry's credentials go to the runner
// (its write key) of an object the manager says uses the entry, as a read;
// never to the module's code, a resolve Job or a write.
func TestCatalogCredentials(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"Secret","metadata":{"name":%q}}`, path.Base(r.URL.Path))
	}))
	defer api.Close()
	runner := *me
	runner.WriteKey, runner.Keyless = "the-key", false
	resolver := runner
	resolver.Catalog = true
	const creds = "/api/v1/namespaces/captf-system/secrets/vpc-git"
	tests := map[string]struct {
		id      *Identity
		method  string
		key     string
		allowed bool
	}{
		"the runner":                   {id: &runner, method: "GET", key: "the-key", allowed: true},
		"the module's code, no key":    {id: &runner, method: "GET"},
		"a Job made before write keys": {id: me, method: "GET"},
		"a resolve Job, of its entry":  {id: &resolver, method: "GET", key: "the-key", allowed: true},
		"a write":                      {id: &runner, method: "PUT", key: "the-key"},
		"another entry's":              {id: &runner, method: "GET", key: "the-key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var asked []string
			s := &Server{CatalogNamespace: "captf-system", host: api.URL, client: api.Client(),
				CatalogCredentials: func(_ context.Context, id *Identity, secret string) error {
					asked = append(asked, secret)
					if name == "another entry's" {
						return errors.New("catalog module vpc does not name these credentials")
					}
					return nil
				}}
			r := httptest.NewRequest(tc.method, creds, nil)
			if tc.key != "" {
				r.Header.Set(run.HeaderWriteKey, tc.key)
			}
			secret, ok := s.credentialsRequest(r)
			if !ok || secret != "vpc-git" {
				t.Fatalf("credentialsRequest = %q, %v", secret, ok)
			}
			w := httptest.NewRecorder()
			s.serveCredentials(context.Background(), w, r, tc.id, secret)
			if got := w.Code == http.StatusOK; got != tc.allowed {
				t.Fatalf("answer %d %s, want allowed %v", w.Code, w.Body, tc.allowed)
			}
			if tc.allowed && !strings.Contains(w.Body.String(), `"vpc-git"`) {
				t.Errorf("forwarded %s", w.Body)
			}
		})
	}
	// Another namespace's Secrets are no credentials request.
	s := &Server{CatalogNamespace: "captf-system"}
	for _, p := range []string{"/api/v1/namespaces/ns/secrets/vpc-git", "/api/v1/namespaces/captf-system/secrets/", "/api/v1/namespaces/captf-system/secrets/a/b"} {
		if name, ok := s.credentialsRequest(httptest.NewRequest("GET", p, nil)); ok {
			t.Errorf("%s read as a credentials request of %q", p, name)
		}
	}
}
