// Package clusterctl installs Cluster API and CAPTF with the real
// clusterctl from local repositories (CAPTF's made by hack/release.sh),
// generates clusters from CAPTF's templates and removes the provider.
package clusterctl

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

var plane *framework.ControlPlane

func TestMain(m *testing.M) {
	// A fresh plane: clusterctl installs every CRD.
	framework.Main(m, framework.Options{PodNetwork: true, CRDDirs: []string{}}, &plane)
}

// env is a management plane with what runs pods on it.
type env struct {
	plane    *framework.ControlPlane
	executor *framework.Executor
}

// suite is what the planes share: images, the clusterctl configuration,
// the instances' directory.
type suite struct {
	root, instances, config, version string
	images                           map[string]string
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{}
	var err error
	if s.root, err = framework.RepoRoot(); err != nil {
		t.Fatal(err)
	}
	if s.images, err = framework.ImageArchives(); err != nil {
		t.Fatal(err)
	}
	capiImages, err := framework.CAPIImages()
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(s.images, capiImages)
	out, err := exec.Command(filepath.Join(s.root, "hack", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	s.version = strings.TrimSpace(string(out))
	release := t.TempDir()
	cmd := exec.Command(filepath.Join(s.root, "hack", "release.sh"))
	cmd.Env = append(os.Environ(), "RELEASE_DIR="+release)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/release.sh: %v\n%s", err, out)
	}
	if s.config, err = framework.ClusterctlConfig(t.TempDir(), release, s.version); err != nil {
		t.Fatal(err)
	}
	s.instances = t.TempDir()
	if err := os.Chmod(s.instances, 0o777); err != nil {
		t.Fatal(err)
	}
	return s
}

// init runs clusterctl init on the plane and waits for Cluster API's and
// CAPTF's managers to be Ready.
func (s *suite) init(t *testing.T, cp *framework.ControlPlane) *env {
	t.Helper()
	ctx := context.Background()
	if err := cp.StartCertManager(ctx); err != nil {
		t.Fatal(err)
	}
	executor, err := cp.StartExecutor(ctx, framework.ExecutorOptions{Images: s.images,
		HostDirs: []string{s.instances, filepath.Join(s.root, "examples")}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// CLUSTER_TOPOLOGY: Cluster API's ClusterClass support, for the
	// clusterclass flavor.
	out, err := cp.Clusterctl(ctx, s.config, []string{"CLUSTER_TOPOLOGY=true"}, "init", "--infrastructure", "terraform:"+s.version,
		"--core", "cluster-api:"+framework.CAPIVersion, "--bootstrap", "kubeadm:"+framework.CAPIVersion,
		"--control-plane", "kubeadm:"+framework.CAPIVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clusterctl init:\n%s", out)
	e := &env{plane: cp, executor: executor}
	e.waitReady(t, "capi-system", "cluster.x-k8s.io/provider=cluster-api")
	e.waitReady(t, "captf-system", "app.kubernetes.io/name=captf,app.kubernetes.io/component=manager")
	t.Logf("Cluster API and CAPTF Ready %s after clusterctl init", time.Since(start).Round(time.Second))
	return e
}

// waitReady waits for a Ready pod of the selector.
func (e *env) waitReady(t *testing.T, namespace, selector string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.plane.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		last = ""
		for _, p := range pods.Items {
			last += fmt.Sprintf("%s: %s %v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		logs := ""
		if pods, _ := e.plane.Kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector}); pods != nil {
			for _, p := range pods.Items {
				l, _ := e.executor.Logs(p.Namespace, p.Name)
				logs += p.Name + ":\n" + tail(l, 30) + "\n"
			}
		}
		t.Fatalf("no Ready pod %s in %s: %v\n%s\n%s", selector, namespace, err, last, logs)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestClusterctl: clusterctl init installs Cluster API and CAPTF from local
// repositories (CAPTF's built by hack/release.sh); clusterctl generate
// cluster with CAPTF's default flavor makes a Cluster that becomes Ready
// with its workers, the machinepool flavor passes the API server and every
// webhook, and --list-variables names the templates' variables; clusterctl
// upgrade plan reads CAPTF's metadata; clusterctl move, started while an
// apply runs, waits for it and takes the cluster to a second plane where
// every object converges with an empty plan, nothing created or destroyed,
// nothing run in the source after the pause; clusterctl delete
// --infrastructure terraform removes the manager and keeps the objects,
// their state and the infrastructure: nothing destroyed, nothing applied.
func TestClusterctl(t *testing.T) {
	ctx := context.Background()
	s := newSuite(t)
	source := s.init(t, plane)

	// clusterctl generate cluster, with the example modules.
	vars := []string{
		"CAPTF_CLUSTER_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-cloud"),
		"CAPTF_MACHINE_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-machine"),
		"CAPTF_POOL_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-pool"),
		"CAPTF_INSTANCE_DIR=" + s.instances,
	}
	generate := []string{"generate", "cluster", "demo", "--infrastructure", "terraform:" + s.version, "--target-namespace", "demo",
		"--kubernetes-version", "v1.34.0", "--control-plane-machine-count", "1", "--worker-machine-count", "2"}
	listed, err := plane.Clusterctl(ctx, s.config, nil, append(generate, "--list-variables")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"CAPTF_CLUSTER_MODULE_SOURCE", "CAPTF_MACHINE_MODULE_SOURCE", "CAPTF_INSTANCE_DIR", "KUBERNETES_VERSION", "WORKER_MACHINE_COUNT", "CONTROL_PLANE_MACHINE_COUNT"} {
		if !strings.Contains(listed, v) {
			t.Errorf("--list-variables does not list %s:\n%s", v, listed)
		}
	}
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The machinepool flavor: every object passes the API server, Cluster
	// API's and CAPTF's webhooks.
	pool, err := plane.Clusterctl(ctx, s.config, vars, append(generate, "--flavor", "machinepool")...)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := plane.Kubectl(ctx, "apply", "--dry-run=server", "-f", writeFile(t, pool)); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "machinepool.cluster.x-k8s.io/demo-pool created (server dry run)") {
		t.Errorf("the machinepool flavor's dry run:\n%s", out)
	}
	manifest, err := plane.Clusterctl(ctx, s.config, vars, generate...)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := plane.Kubectl(ctx, "apply", "-f", writeFile(t, manifest)); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply of clusterctl generate cluster's output:\n%s", out)
	}
	start := time.Now()
	waitClusterReady(t, source)
	t.Logf("the generated cluster is Ready with 2 workers %s after it was applied", time.Since(start).Round(time.Second))
	before := instanceFiles(t, s.instances)
	if len(before) != 3 {
		t.Errorf("instances %v, want the control-plane host and 2 workers", slices.Sorted(maps.Keys(before)))
	}

	clusterClass(t, s, vars)

	plan, err := plane.Clusterctl(ctx, s.config, nil, "upgrade", "plan")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "infrastructure-terraform") || !strings.Contains(plan, s.version) {
		t.Errorf("clusterctl upgrade plan does not show CAPTF:\n%s", plan)
	}

	// clusterctl move takes only clusters whose control plane is
	// initialized and whose Machines all have Nodes: a control-plane Machine
	// stands in for a control-plane provider's (the default flavor leaves
	// the control plane to one), and the workload cluster's node agent
	// registers the hosts as they join.
	addControlPlaneMachine(t, "demo")
	if _, err := plane.StartWorkload(ctx, "demo", "demo", s.instances); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitNodes(t, source, 3)
	t.Logf("every Machine has its Node %s after the workload cluster started", time.Since(start).Round(time.Second))
	before = instanceFiles(t, s.instances)
	states := stateSecrets(t, plane)
	if len(states) != 4 {
		t.Errorf("state Secrets: %v, want one per object", states)
	}

	// The target: a second plane, its own clusterctl init.
	ctx2, cancel := context.WithTimeout(ctx, 3*time.Minute)
	targetPlane, err := framework.Start(ctx2, framework.Options{PodNetwork: true, CRDDirs: []string{}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(targetPlane.Stop)
	target := s.init(t, targetPlane)

	// A second control-plane host, slow to create: the move starts while
	// its apply runs, and must wait for it (CAPTF's block-move annotation),
	// or the target would get the state without it and create it again.
	tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range tc.Spec.Variables {
		if v.Name == "instances" {
			tc.Spec.Variables[i].Value = &runtime.RawExtension{Raw: []byte("2")}
		}
	}
	tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "sleep_seconds", Value: &runtime.RawExtension{Raw: []byte("8")}})
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Update(ctx, tc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	applies := len(jobsOf(t, plane, "tfc-demo-apply-"))
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
		_, blocked := tc.Annotations[capi.BlockMoveAnnotation]
		return err == nil && blocked && len(jobsOf(t, plane, "tfc-demo-apply-")) > applies, nil
	}); err != nil {
		t.Fatalf("no apply Job of the second host with the block-move annotation: %v", err)
	}

	sourceJobs := watchJobs(t, plane)
	start = time.Now()
	out, err := plane.Clusterctl(ctx, s.config, nil, "move", "--namespace", "demo", "--to-kubeconfig", targetPlane.KubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clusterctl move, started while an apply ran, in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	moved := time.Now()
	if _, ok := instanceFiles(t, s.instances)["demo-1"]; !ok {
		t.Errorf("clusterctl move finished before the apply it had to wait for made demo-1")
	}
	before["demo-1"] = instanceFiles(t, s.instances)["demo-1"]

	// The source has nothing left of the cluster.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tcs, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").List(ctx, metav1.ListOptions{})
		tms, err2 := plane.Captf.InfrastructureV1alpha1().TerraformMachines("demo").List(ctx, metav1.ListOptions{})
		return err == nil && err2 == nil && len(tcs.Items) == 0 && len(tms.Items) == 0 && len(stateSecrets(t, plane)) == 0, nil
	}); err != nil {
		t.Errorf("the source keeps the cluster's objects or state after the move: %v", err)
	}
	// In the target: the same state, the Machines with their Nodes again
	// (its Cluster API reaches the workload cluster with the kubeconfig
	// Secret that moved), every object Ready.
	waitNodes(t, target, 3)
	waitObjectsReady(t, targetPlane)
	t.Logf("the target has every Machine with its Node and every object Ready %s after the move", time.Since(moved).Round(time.Second))
	if got := stateSecrets(t, targetPlane); !slices.Equal(got, states) {
		t.Errorf("state Secrets in the target %v, want the source's %v", got, states)
	}
	time.Sleep(5 * time.Second)
	if got := instanceFiles(t, s.instances); !maps.Equal(got, before) {
		t.Errorf("instances changed by the move:\nbefore %v\nafter  %v", before, got)
	}
	if added := sourceJobs(); len(added) != 0 {
		t.Errorf("Jobs created in the source during or after the move: %v", added)
	}
	targetJobs := jobNames(t, targetPlane)
	t.Logf("Jobs in the target after the move: %v", targetJobs)
	for _, name := range targetJobs {
		if !strings.Contains(name, "-apply-") {
			t.Errorf("a Job other than an apply ran in the target: %s", name)
		}
	}

	// The target's CAPTF goes; its objects and the infrastructure stay.
	jobs := jobNames(t, targetPlane)
	if out, err := targetPlane.Clusterctl(ctx, s.config, nil, "delete", "--infrastructure", "terraform"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("clusterctl delete --infrastructure terraform:\n%s", out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := targetPlane.Kube.CoreV1().Pods("captf-system").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the target's CAPTF manager is still there: %v", err)
	}
	if _, err := targetPlane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Errorf("the TerraformCluster after clusterctl delete: %v", err)
	}
	if got := stateSecrets(t, targetPlane); !slices.Equal(got, states) {
		t.Errorf("state Secrets after clusterctl delete: %v, before %v", got, states)
	}

	// Nothing was destroyed or applied again.
	time.Sleep(5 * time.Second)
	if got := instanceFiles(t, s.instances); !maps.Equal(got, before) {
		t.Errorf("instances changed after clusterctl delete:\nbefore %v\nafter  %v", before, got)
	}
	if got := jobNames(t, targetPlane); !slices.Equal(got, jobs) {
		t.Errorf("Jobs changed after clusterctl delete: before %v, after %v", jobs, got)
	}
}

// addControlPlaneMachine adds to the cluster a control-plane Machine of
// the workers' TerraformMachineTemplate.
func addControlPlaneMachine(t *testing.T, cluster string) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates("demo").Get(ctx, cluster+"-workers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := cluster + "-control-plane"
	labels := map[string]string{"cluster.x-k8s.io/cluster-name": cluster}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines("demo").Create(ctx, &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: tmpl.Spec.Template.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": "demo", "labels": map[string]any{"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": cluster, "version": "v1.34.0", "bootstrap": map[string]any{"dataSecretName": cluster + "-workers-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": name}}}}
	if _, err := plane.Dynamic.Resource(capi.Machine.Resource).Namespace("demo").Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitNodes waits until the demo Cluster's control plane is initialized
// and its n Machines have Nodes.
func waitNodes(t *testing.T, e *env, n int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster, err := e.plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		// A Cluster without a control-plane provider has the condition only.
		initialized := false
		conds, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "ControlPlaneInitialized" {
				initialized = m["status"] == "True"
			}
		}
		machines, err := e.plane.Dynamic.Resource(capi.Machine.Resource).Namespace("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		withNode := 0
		for _, m := range machines.Items {
			if node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); node != "" {
				withNode++
			}
		}
		last = fmt.Sprintf("control plane initialized=%v, %d of %d Machines with a Node", initialized, withNode, len(machines.Items))
		return initialized && withNode == n && len(machines.Items) == n, nil
	})
	if err != nil {
		t.Fatalf("the demo cluster's Machines did not get their Nodes: %v (%s)", err, last)
	}
}

// waitObjectsReady waits until the demo TerraformCluster and every
// TerraformMachine are Ready with a plan that changed nothing.
func waitObjectsReady(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		tms, err := cp.Captf.InfrastructureV1alpha1().TerraformMachines("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = fmt.Sprintf("TerraformCluster %v", readyCondition(tc.Status.Conditions))
		ready := appliedEmpty(tc.Status.Conditions)
		for _, tm := range tms.Items {
			last += fmt.Sprintf(", TerraformMachine %s %v", tm.Name, readyCondition(tm.Status.Conditions))
			ready = ready && appliedEmpty(tm.Status.Conditions)
		}
		return ready && len(tms.Items) == 3, nil
	})
	if err != nil {
		t.Fatalf("the moved objects did not become Ready: %v (%s)", err, last)
	}
	t.Logf("moved objects: %s", last)
}

func readyCondition(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, infrav1.ConditionReady); c != nil {
		return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
	}
	return "no Ready condition"
}

// appliedEmpty tells whether an object is Ready with a plan that changed
// nothing.
func appliedEmpty(conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, infrav1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "0 to add, 0 to change, 0 to destroy, 0 to replace")
}

// jobsOf are the names of the Jobs in demo named prefix*.
func jobsOf(t *testing.T, cp *framework.ControlPlane, prefix string) []string {
	return slices.DeleteFunc(jobNames(t, cp), func(n string) bool { return !strings.HasPrefix(n, prefix) })
}

// watchJobs records the Jobs created in demo from now on; the returned
// function lists them.
func watchJobs(t *testing.T, cp *framework.ControlPlane) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list, err := cp.Kube.BatchV1().Jobs("demo").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cp.Kube.BatchV1().Jobs("demo").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var added []string
	go func() {
		for e := range w.ResultChan() {
			if j, ok := e.Object.(*batchv1.Job); ok && e.Type == watch.Added {
				mu.Lock()
				added = append(added, j.Name)
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(added)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// stateSecrets are the names of the state Secrets in demo.
func stateSecrets(t *testing.T, cp *framework.ControlPlane) []string {
	t.Helper()
	list, err := cp.Kube.CoreV1().Secrets("demo").List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelSecretType + "=state"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// waitClusterReady waits until the demo Cluster's infrastructure is
// provisioned and its 2 Machines have provider IDs.
func waitClusterReady(t *testing.T, e *env) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster, err := e.plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		provisioned, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
		machines, err := e.plane.Dynamic.Resource(capi.Machine.Resource).Namespace("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		withID := 0
		for _, m := range machines.Items {
			if id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); id != "" {
				withID++
			}
		}
		last = fmt.Sprintf("provisioned=%v, %d of %d Machines with a provider ID", provisioned, withID, len(machines.Items))
		return provisioned && withID == 2, nil
	})
	if err != nil {
		t.Fatalf("the demo cluster did not become Ready: %v (%s)", err, last)
	}
}

func jobNames(t *testing.T, cp *framework.ControlPlane) []string {
	t.Helper()
	jobs, err := cp.Kube.BatchV1().Jobs("demo").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range jobs.Items {
		out = append(out, j.Name)
	}
	slices.Sort(out)
	return out
}

// instanceFiles is framework.InstanceFiles of dir.
func instanceFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := framework.InstanceFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// clusterClass: the clusterclass flavor (with the ClusterClass clusterctl
// adds from the repository) makes a Cluster whose TerraformCluster Cluster
// API's topology controller creates from CAPTF's TerraformClusterTemplate,
// with the module and variables the Cluster's topology variables set; CAPTF
// applies it and the Cluster's infrastructure is provisioned. (Its kubeadm
// control plane and workers wait: no kubeadm controller runs here.)
func clusterClass(t *testing.T, s *suite, vars []string) {
	ctx := context.Background()
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "classy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	manifest, err := plane.Clusterctl(ctx, s.config, vars, "generate", "cluster", "classy", "--infrastructure", "terraform:"+s.version,
		"--target-namespace", "classy", "--flavor", "clusterclass", "--kubernetes-version", "v1.34.0",
		"--control-plane-machine-count", "1", "--worker-machine-count", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(manifest, "kind: ClusterClass") {
		t.Fatalf("clusterctl did not add the ClusterClass to the clusterclass flavor:\n%s", manifest)
	}
	// A machine pool of the class's default-pool too, as a user adds one to
	// the generated Cluster (Cluster API creates pools added later only once
	// the control plane is up, which kubeadm's, not running here, never is).
	workers := "      machineDeployments:\n      - class: default-worker\n        name: md-0\n        replicas: 1\n"
	variables := "    variables:\n"
	if strings.Count(manifest, workers) != 1 || strings.Count(manifest, variables) != 1 {
		t.Fatalf("the clusterclass flavor's Cluster is not as this test expects:\n%s", manifest)
	}
	manifest = strings.Replace(manifest, workers, workers+"      machinePools:\n      - class: default-pool\n        name: mp-0\n        replicas: 1\n", 1)
	manifest = strings.Replace(manifest, variables, variables+fmt.Sprintf("    - name: poolModuleSource\n      value: %s\n", filepath.Join(s.root, "examples", "local-pool")), 1)
	// kubeadm's providers are installed but cannot run here (no image of
	// theirs): their webhooks, failing closed, would refuse the kubeadm
	// templates. Without them the API server's schema still checks those.
	for _, provider := range []string{"bootstrap-kubeadm", "control-plane-kubeadm"} {
		sel := metav1.ListOptions{LabelSelector: "cluster.x-k8s.io/provider=" + provider}
		if err := plane.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
			t.Fatal(err)
		}
		if err := plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := plane.Kubectl(ctx, "apply", "--server-side", "-f", writeFile(t, manifest)); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply of the clusterclass flavor:\n%s", out)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster, err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("classy").Get(ctx, "classy", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		provisioned, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("classy").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			last = fmt.Sprintf("provisioned=%v, TerraformClusters: %v %v", provisioned, list, err)
			return false, nil
		}
		tc := list.Items[0]
		last = fmt.Sprintf("provisioned=%v, TerraformCluster %s: module %+v, variables %d, conditions %+v", provisioned, tc.Name, tc.Spec.Module, len(tc.Spec.Variables), tc.Status.Conditions)
		owner := metav1.GetControllerOf(&tc)
		var varNames []string
		for _, v := range tc.Spec.Variables {
			varNames = append(varNames, v.Name)
		}
		return provisioned && tc.Status.Ready && owner != nil && owner.Kind == "Cluster" && owner.Name == "classy" &&
			tc.Spec.Module.Source == filepath.Join(s.root, "examples", "local-cloud") && slices.Equal(varNames, []string{"instances", "instance_dir"}), nil
	})
	if err != nil {
		t.Fatalf("the ClusterClass cluster's infrastructure was not provisioned: %v (%s)", err, last)
	}
	t.Logf("the ClusterClass cluster's infrastructure is provisioned: %s", last)

	// The machine pool: the topology controller made its
	// TerraformMachinePool from CAPTF's TerraformMachinePoolTemplate, with
	// the module the variables name.
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformMachinePools("classy").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			last = fmt.Sprintf("TerraformMachinePools: %d %v", len(list.Items), err)
			return false, nil
		}
		pool := list.Items[0]
		owner := metav1.GetControllerOf(&pool)
		last = fmt.Sprintf("TerraformMachinePool %s: module %+v, variables %d, owner %v, conditions %+v", pool.Name, pool.Spec.Module, len(pool.Spec.Variables), owner, pool.Status.Conditions)
		return owner != nil && owner.Kind == "MachinePool" && pool.Spec.Module.Source == filepath.Join(s.root, "examples", "local-pool") &&
			len(pool.Spec.Variables) == 1 && pool.Spec.Variables[0].Name == "instance_dir", nil
	})
	if err != nil {
		t.Fatalf("the ClusterClass cluster's machine pool got no TerraformMachinePool from the template: %v (%s)", err, last)
	}
	t.Logf("the ClusterClass cluster's machine pool: %s", last)
}
