package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

var clustersGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}

// env is one test's namespace, instance directory and managers.
type env struct {
	t         *testing.T
	ns        string
	instances string
	// front and cert are the runner API's Service and certificate, shared
	// by the test's managers as a Deployment's replicas share them.
	front *framework.Front
	cert  *framework.WebhookCert
}

func newEnv(t *testing.T) *env {
	t.Helper()
	setup(t)
	ctx := context.Background()
	// Runner pods must pass Pod Security "restricted", the manager's
	// default --runner-pod-security.
	ns, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ns: ns.Name, instances: t.TempDir()}
	if err := plane.InstallRBAC(ctx, e.ns); err != nil {
		t.Fatal(err)
	}
	crb := "captf-manager-" + e.ns
	t.Cleanup(func() {
		_ = plane.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb, metav1.DeleteOptions{})
		if t.Failed() {
			e.dumpJobs()
		}
		// Its managers have stopped (their cleanups ran first): a run left
		// here would wait for them until its deadline, and a later test's
		// manager that watches every namespace would count it toward its
		// cap (TestForgedJobs).
		err := plane.Kube.BatchV1().Jobs(e.ns).DeleteCollection(context.Background(),
			metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
		if err != nil {
			t.Logf("deleting the Jobs of %s: %v", e.ns, err)
		}
	})
	return e
}

// startManager starts a manager as the captf-manager ServiceAccount of the
// test's namespace, watching only that namespace.
func (e *env) startManager(extra ...string) *framework.Manager {
	t := e.t
	t.Helper()
	if e.front == nil {
		var err error
		if e.front, err = framework.NewFront(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.front.Close)
		if e.cert, err = framework.NewWebhookCert(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	m, err := plane.StartManager(context.Background(), framework.ManagerOptions{Binary: captfBinary, Namespace: e.ns, Dir: t.TempDir(),
		Args: append([]string{"--namespace=" + e.ns}, extra...), Front: e.front, Cert: e.cert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(m.LogFile)
			t.Logf("manager log:\n%s", tail(string(b), 60))
		}
	})
	return m
}

// startManagerWithWebhook starts a manager and registers its webhook for
// the test's namespace, and waits until it serves.
func (e *env) startManagerWithWebhook(extra ...string) *framework.Manager {
	t := e.t
	t.Helper()
	m := e.startManager(extra...)
	if _, err := plane.RegisterWebhook(context.Background(), "captf-"+e.ns, m.WebhookAddr, m.WebhookCert.CA.CertPEM, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "captf-"+e.ns, metav1.DeleteOptions{})
	})
	waitReady(t, m)
	return m
}

// newCluster creates a Cluster API Cluster whose infrastructureRef names
// the TerraformCluster of the same name.
func (e *env) newCluster(name string, paused bool) *unstructured.Unstructured {
	e.t.Helper()
	return e.newClusterOf(name, name, paused)
}

// newClusterOf creates a Cluster API Cluster name whose infrastructureRef
// names TerraformCluster infra: only then is it infra's owner.
func (e *env) newClusterOf(name, infra string, paused bool) *unstructured.Unstructured {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{
			"paused":            paused,
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": infra},
		},
	}}
	created, err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// localCloud is a TerraformCluster of examples/local-cloud, owned by cluster
// as Cluster API would own it.
func (e *env) localCloud(name string, cluster *unstructured.Unstructured, vars map[string]any) *infrav1.TerraformCluster {
	e.t.Helper()
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		e.t.Fatal(err)
	}
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": name}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module: infrav1.Module{Inline: string(module)},
			Jobs:   &infrav1.JobPolicy{LockTimeout: &metav1.Duration{Duration: 20 * time.Second}},
		}},
	}
	vars["instance_dir"] = e.instances
	setVariables(&tc.Spec.WorkspaceSpec, vars)
	if cluster != nil {
		tc.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(cluster)}
	}
	return tc
}

func clusterOwnerRef(cluster *unstructured.Unstructured) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: cluster.GetName(), UID: cluster.GetUID()}
}

func setVariables(ws *infrav1.WorkspaceSpec, vars map[string]any) {
	ws.Variables = nil
	for _, k := range sortedKeys(vars) {
		b, _ := json.Marshal(vars[k])
		ws.Variables = append(ws.Variables, infrav1.Variable{Name: k, Value: &runtime.RawExtension{Raw: b}})
	}
}

func (e *env) create(tc *infrav1.TerraformCluster) *infrav1.TerraformCluster {
	e.t.Helper()
	created, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(context.Background(), tc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

func (e *env) get(name string) *infrav1.TerraformCluster {
	e.t.Helper()
	tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return tc
}

// update applies change to the latest version of the object.
func (e *env) update(name string, change func(*infrav1.TerraformCluster)) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(tc)
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Update(ctx, tc, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// never fails the test if check reports anything during d, checking all
// along: a "nothing happens" check that also catches what happens early,
// where a sleep and one look catch only what is there at the end.
func (e *env) never(d time.Duration, check func() error) {
	e.t.Helper()
	if err := framework.Consistently(d, check); err != nil {
		e.t.Error(err)
	}
}

// observed waits until the manager has synced the TerraformCluster's
// current spec: it says so in status.observedGeneration.
func (e *env) observed(name string) {
	e.t.Helper()
	e.waitFor(name, time.Minute, "its spec observed", func(tc *infrav1.TerraformCluster) bool {
		return tc != nil && tc.Status.ObservedGeneration == tc.Generation
	})
}

// waitFor polls the TerraformCluster until ok says so.
func (e *env) waitFor(name string, timeout time.Duration, what string, ok func(*infrav1.TerraformCluster) bool) *infrav1.TerraformCluster {
	e.t.Helper()
	var tc *infrav1.TerraformCluster
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			tc = nil
			return ok(nil), nil
		}
		if err != nil { // keep the last object read for the failure message
			return false, nil
		}
		tc = got
		return ok(tc), nil
	})
	if err != nil {
		var conds any
		if tc != nil {
			conds = tc.Status.Conditions
		}
		e.t.Fatalf("TerraformCluster %s: never %s; conditions %+v", name, what, conds)
	}
	return tc
}

func condition(tc *infrav1.TerraformCluster, t string) *metav1.Condition {
	if tc == nil {
		return nil
	}
	return meta.FindStatusCondition(tc.Status.Conditions, t)
}

func isReady(tc *infrav1.TerraformCluster) bool {
	c := condition(tc, infrav1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "Applied"
}

func (e *env) jobs(op string) []batchv1.Job {
	e.t.Helper()
	sel := names.LabelManagedBy + "=" + names.ManagedByValue
	if op != "" {
		sel += "," + names.LabelOperation + "=" + op
	}
	list, err := plane.Kube.BatchV1().Jobs(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// jobsOf lists the Jobs of op of the object name.
func (e *env) jobsOf(name, op string) []batchv1.Job {
	e.t.Helper()
	return slices.DeleteFunc(e.jobs(op), func(j batchv1.Job) bool { return j.Labels[names.LabelObjectName] != names.LabelValue(name) })
}

func (e *env) secrets() []corev1.Secret {
	e.t.Helper()
	list, err := plane.Kube.CoreV1().Secrets(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelManagedBy + "=" + names.ManagedByValue})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) instanceFiles() []string {
	entries, _ := os.ReadDir(e.instances)
	var out []string
	for _, en := range entries {
		if !strings.HasPrefix(en.Name(), ".") { // the modules' generation files
			out = append(out, en.Name())
		}
	}
	return out
}

func (e *env) dumpJobs() {
	for _, j := range e.jobs("") {
		e.t.Logf("job %s: active=%d succeeded=%d failed=%d", j.Name, j.Status.Active, j.Status.Succeeded, j.Status.Failed)
		pods, _ := plane.Kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.Name})
		for _, p := range pods.Items {
			if logs, err := executor.Logs(e.ns, p.Name); err == nil {
				e.t.Logf("pod %s log:\n%s", p.Name, tail(logs, 30))
			}
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := framework.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

func sortedKeys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

// scrape reads m's /metrics as a scraper bound to the shipped
// captf-metrics-reader role does.
func (e *env) scrape(m *framework.Manager) string {
	e.t.Helper()
	token, err := plane.MetricsReaderToken(context.Background(), e.ns)
	if err != nil {
		e.t.Fatal(err)
	}
	code, body, err := m.Scrape(token)
	if err != nil || code != http.StatusOK {
		e.t.Fatalf("scraping %s: %d %v\n%s", m.MetricsAddr, code, err, tail(body, 5))
	}
	return body
}
