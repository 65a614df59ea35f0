// Package clusterctl installs Cluster API and CAPTF with the real
// clusterctl from local repositories (CAPTF's made by hack/release.sh),
// generates clusters from CAPTF's templates and removes the provider.
package clusterctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
	"k8s.io/apimachinery/pkg/util/yaml"
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
	root, config string
	// version is this checkout's release; previous, an earlier one made of
	// the same files (the upgrade's starting point).
	version, previous string
	// instances of the demo cluster; kinstances of the kdemo cluster,
	// made on the plane where CAPTF was installed with kubectl apply -k.
	instances, kinstances string
	images                map[string]string
}

// previousVersion is the release the source plane starts with and
// upgrades from: a pseudo-version older than any this checkout gets.
const previousVersion = "v0.0.0-20000101000000-000000000000"

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
	s.version, s.previous = strings.TrimSpace(string(out)), previousVersion
	// Two releases in one local repository, as a user's has after a
	// second `make release`; the previous one's images are this checkout's.
	release := t.TempDir()
	for _, v := range []string{s.previous, s.version} {
		cmd := exec.Command(filepath.Join(s.root, "hack", "release.sh"))
		cmd.Env = append(os.Environ(), "RELEASE_DIR="+release, "VERSION="+v)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/release.sh %s: %v\n%s", v, err, out)
		}
	}
	checkPlugin(t, filepath.Join(release, "infrastructure-terraform", s.version), s.version)
	for ref, archive := range maps.Clone(s.images) {
		if strings.HasSuffix(ref, ":"+s.version) {
			s.images[strings.TrimSuffix(ref, s.version)+s.previous] = archive
		}
	}
	if s.config, err = framework.ClusterctlConfig(t.TempDir(), release, s.version); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []*string{&s.instances, &s.kinstances} {
		*dir = t.TempDir()
		if err := os.Chmod(*dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// init runs clusterctl init on the plane with CAPTF's release version
// and waits for Cluster API's and CAPTF's managers to be Ready.
func (s *suite) init(t *testing.T, cp *framework.ControlPlane, version string) *env {
	t.Helper()
	start := time.Now()
	e := s.initCAPI(t, cp, "--infrastructure", "terraform:"+version)
	e.waitReady(t, "captf-system", managerSelector)
	t.Logf("Cluster API and CAPTF %s Ready %s after clusterctl init", version, time.Since(start).Round(time.Second))
	return e
}

// initKustomize installs Cluster API with clusterctl init and CAPTF as
// without clusterctl, `kubectl apply -k` of manifests/default with this
// checkout's images.
func (s *suite) initKustomize(t *testing.T, cp *framework.ControlPlane) *env {
	t.Helper()
	e := s.initCAPI(t, cp)
	overlay := t.TempDir()
	if err := framework.InstallOverlay(overlay, s.root, s.version, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kubectl(context.Background(), "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, "captf-system", managerSelector)
	return e
}

// initCAPI starts cert-manager and the executor on the plane and runs
// clusterctl init with Cluster API's providers and args.
func (s *suite) initCAPI(t *testing.T, cp *framework.ControlPlane, args ...string) *env {
	t.Helper()
	ctx := context.Background()
	if err := cp.StartCertManager(ctx); err != nil {
		t.Fatal(err)
	}
	executor, err := cp.StartExecutor(ctx, framework.ExecutorOptions{Images: s.images,
		HostDirs: []string{s.instances, s.kinstances, filepath.Join(s.root, "examples")}})
	if err != nil {
		t.Fatal(err)
	}
	// CLUSTER_TOPOLOGY: Cluster API's ClusterClass support, for the
	// clusterclass flavor.
	out, err := cp.Clusterctl(ctx, s.config, []string{"CLUSTER_TOPOLOGY=true"}, append([]string{"init",
		"--core", "cluster-api:" + framework.CAPIVersion, "--bootstrap", "kubeadm:" + framework.CAPIVersion,
		"--control-plane", "kubeadm:" + framework.CAPIVersion}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clusterctl init %s:\n%s", strings.Join(args, " "), out)
	e := &env{plane: cp, executor: executor}
	e.waitReady(t, "capi-system", "cluster.x-k8s.io/provider=cluster-api")
	return e
}

const managerSelector = "app.kubernetes.io/name=captf,app.kubernetes.io/component=manager"

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

// TestClusterctl: clusterctl init installs Cluster API and a previous
// CAPTF release from local repositories (CAPTF's built by hack/release.sh);
// clusterctl generate cluster with CAPTF's default flavor makes a Cluster
// that becomes Ready with its workers, the machinepool flavor passes the API
// server and every webhook, and --list-variables names the templates'
// variables; clusterctl upgrade plan reads CAPTF's metadata, and clusterctl
// upgrade apply, while an apply runs, replaces the manager with this
// release's without a Job run twice or an instance changed, and the apply
// finishes; clusterctl move, started while an apply runs, waits for it and
// takes the cluster to a second plane where every object converges with an
// empty plan, nothing created or destroyed, nothing run in the source after
// the pause. On a third plane CAPTF is installed with kubectl apply -k:
// clusterctl refuses to move a cluster there before touching anything, and
// moves a cluster made there to the second plane like any other. clusterctl
// delete --infrastructure terraform removes the manager and keeps the
// objects, their state and the infrastructure: nothing destroyed, nothing
// applied.
func TestClusterctl(t *testing.T) {
	ctx := context.Background()
	s := newSuite(t)
	source := s.init(t, plane, s.previous)

	generate := s.generateArgs("demo")
	listed, err := plane.Clusterctl(ctx, s.config, nil, append(generate, "--list-variables")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"CAPTF_CLUSTER_MODULE_SOURCE", "CAPTF_MACHINE_MODULE_SOURCE", "CAPTF_INSTANCE_DIR", "KUBERNETES_VERSION", "WORKER_MACHINE_COUNT", "CONTROL_PLANE_MACHINE_COUNT"} {
		if !strings.Contains(listed, v) {
			t.Errorf("--list-variables does not list %s:\n%s", v, listed)
		}
	}
	createNamespace(t, plane, "demo")
	// The machinepool flavor: every object passes the API server, Cluster
	// API's and CAPTF's webhooks.
	pool, err := plane.Clusterctl(ctx, s.config, s.vars(s.instances), append(generate, "--flavor", "machinepool")...)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := plane.Kubectl(ctx, "apply", "--dry-run=server", "-f", writeFile(t, pool)); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "machinepool.cluster.x-k8s.io/demo-pool created (server dry run)") {
		t.Errorf("the machinepool flavor's dry run:\n%s", out)
	}
	s.generate(t, plane, "demo", s.instances)
	start := time.Now()
	waitClusterReady(t, source, "demo")
	t.Logf("the generated cluster is Ready with 2 workers %s after it was applied", time.Since(start).Round(time.Second))
	before := instanceFiles(t, s.instances)
	if len(before) != 3 {
		t.Errorf("instances %v, want the control-plane host and 2 workers", slices.Sorted(maps.Keys(before)))
	}

	clusterClass(t, s, s.vars(s.instances))

	plan, err := plane.Clusterctl(ctx, s.config, nil, "upgrade", "plan")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "infrastructure-terraform") || !strings.Contains(plan, s.previous) {
		t.Errorf("clusterctl upgrade plan does not show CAPTF %s:\n%s", s.previous, plan)
	}
	s.upgrade(t, source, before)

	// clusterctl move takes only clusters whose control plane is
	// initialized and whose Machines all have Nodes: a control-plane Machine
	// stands in for a control-plane provider's (the default flavor leaves
	// the control plane to one), and the workload cluster's node agent
	// registers the hosts as they join.
	addControlPlaneMachine(t, plane, "demo")
	if _, err := plane.StartWorkload(ctx, "demo", "demo", s.instances); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitNodes(t, source, "demo", 3)
	t.Logf("every Machine has its Node %s after the workload cluster started", time.Since(start).Round(time.Second))
	before = instanceFiles(t, s.instances)
	states := stateSecrets(t, plane, "demo")
	if len(states) != 4 {
		t.Errorf("state Secrets: %v, want one per object", states)
	}

	// The target: a second plane, its own clusterctl init.
	target := s.init(t, startPlane(t), s.version)

	// A third control-plane host, slow to create: the move starts while
	// its apply runs, and must wait for it (CAPTF's block-move annotation),
	// or the target would get the state without it and create it again.
	slowApply(t, plane, "demo", 3)
	s.move(t, source, target, "demo", s.instances, before, "demo-2")

	// A third plane whose CAPTF was installed with kubectl apply -k:
	// clusterctl's inventory does not list it there, and clusterctl
	// refuses to move a cluster of CAPTF's to it, before pausing anything.
	kplane := s.initKustomize(t, startPlane(t))
	jobs := jobNames(t, target.plane, "demo")
	out, err := target.plane.Clusterctl(ctx, s.config, nil, "move", "--namespace", "demo", "--to-kubeconfig", kplane.plane.KubeconfigFile)
	if err == nil || !strings.Contains(out, "provider infrastructure-terraform not found in the target cluster") {
		t.Errorf("clusterctl move to a plane whose CAPTF clusterctl did not install: %v, want it refused naming the provider:\n%s", err, out)
	} else {
		t.Logf("clusterctl move to a plane whose CAPTF clusterctl did not install, refused:\n%s", tail(out, 3))
	}
	cluster, err := target.plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if paused, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused"); paused {
		t.Errorf("the refused move left the Cluster paused")
	}
	if list, err := kplane.plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("the refused move created TerraformClusters in the target: %v %v", list, err)
	}

	// A cluster made where CAPTF was installed with kubectl apply -k moves
	// like any other: its CRDs carry clusterctl's label, by which move finds
	// the Terraform* kinds.
	createNamespace(t, kplane.plane, "kdemo")
	s.generate(t, kplane.plane, "kdemo", s.kinstances)
	waitClusterReady(t, kplane, "kdemo")
	addControlPlaneMachine(t, kplane.plane, "kdemo")
	if _, err := kplane.plane.StartWorkload(ctx, "kdemo", "kdemo", s.kinstances); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, kplane, "kdemo", 3)
	s.move(t, kplane, target, "kdemo", s.kinstances, instanceFiles(t, s.kinstances), "")

	// The target's CAPTF goes; its objects and the infrastructure stay.
	before = instanceFiles(t, s.instances)
	states = stateSecrets(t, target.plane, "demo")
	if out, err := target.plane.Clusterctl(ctx, s.config, nil, "delete", "--infrastructure", "terraform"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("clusterctl delete --infrastructure terraform:\n%s", out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := target.plane.Kube.CoreV1().Pods("captf-system").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the target's CAPTF manager is still there: %v", err)
	}
	if _, err := target.plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Errorf("the TerraformCluster after clusterctl delete: %v", err)
	}
	if got := stateSecrets(t, target.plane, "demo"); !slices.Equal(got, states) {
		t.Errorf("state Secrets after clusterctl delete: %v, before %v", got, states)
	}

	// Nothing was destroyed or applied again.
	err = framework.Consistently(5*time.Second, func() error {
		if got := instanceFiles(t, s.instances); !maps.Equal(got, before) {
			return fmt.Errorf("instances changed after clusterctl delete:\nbefore %v\nafter  %v", before, got)
		}
		if got := jobNames(t, target.plane, "demo"); !slices.Equal(got, jobs) {
			return fmt.Errorf("jobs changed after clusterctl delete: before %v, after %v", jobs, got)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// startPlane starts another management plane, with a pod network and no CRDs.
func startPlane(t *testing.T) *framework.ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := framework.Start(ctx, framework.Options{PodNetwork: true, CRDDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

func createNamespace(t *testing.T, cp *framework.ControlPlane, name string) {
	t.Helper()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// vars are the templates' CAPTF variables: the example modules, whose
// instances go to instances.
func (s *suite) vars(instances string) []string {
	return []string{
		"CAPTF_CLUSTER_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-cloud"),
		"CAPTF_MACHINE_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-machine"),
		"CAPTF_POOL_MODULE_SOURCE=" + filepath.Join(s.root, "examples", "local-pool"),
		"CAPTF_INSTANCE_DIR=" + instances,
	}
}

// generateArgs: clusterctl generate cluster <name> in namespace <name>,
// one control-plane host and 2 workers.
func (s *suite) generateArgs(name string) []string {
	return []string{"generate", "cluster", name, "--infrastructure", "terraform:" + s.version, "--target-namespace", name,
		"--kubernetes-version", "v1.34.0", "--control-plane-machine-count", "1", "--worker-machine-count", "2"}
}

// generate applies the default flavor's cluster <name> on the plane.
func (s *suite) generate(t *testing.T, cp *framework.ControlPlane, name, instances string) {
	t.Helper()
	ctx := context.Background()
	manifest, err := cp.Clusterctl(ctx, s.config, s.vars(instances), s.generateArgs(name)...)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", writeFile(t, manifest)); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("kubectl apply of clusterctl generate cluster %s's output:\n%s", name, out)
	}
}

// upgrade runs clusterctl upgrade apply from the previous release to this
// one while an apply of the demo cluster runs (a second control-plane
// host, slow to create): the new manager comes up with this release's
// image, the apply finishes through the gap with its Job, no Job repeats
// one already run (the machines apply the cluster's new exports), no
// instance changes.
func (s *suite) upgrade(t *testing.T, e *env, before map[string]string) {
	t.Helper()
	ctx := context.Background()
	ran := jobNames(t, e.plane, "demo")
	slowApply(t, e.plane, "demo", 2)
	jobs := watchJobs(t, e.plane, "demo")
	start := time.Now()
	out, err := e.plane.Clusterctl(ctx, s.config, nil, "upgrade", "apply", "--infrastructure", "captf-system/terraform:"+s.version)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clusterctl upgrade apply, while an apply ran, in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	image := "ghcr.io/captf/captf:" + s.version
	e.waitReady(t, "captf-system", managerSelector)
	pods, err := e.plane.Kube.CoreV1().Pods("captf-system").List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image != image {
			t.Errorf("manager pod %s runs %s after the upgrade, want %s", p.Name, p.Spec.Containers[0].Image, image)
		}
	}
	t.Logf("CAPTF %s Ready %s after clusterctl upgrade apply started", s.version, time.Since(start).Round(100*time.Millisecond))
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := e.plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		_, blocked := tc.Annotations[capi.BlockMoveAnnotation]
		last = fmt.Sprintf("block-move %v, %s", blocked, readyCondition(tc.Status.Conditions))
		c := meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionReady)
		return !blocked && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == tc.Generation, nil
	}); err != nil {
		t.Fatalf("the apply that ran through the upgrade did not finish: %v (%s)", err, last)
	}
	t.Logf("the apply that ran through the upgrade finished %s after the upgrade started: %s", time.Since(start).Round(100*time.Millisecond), last)
	for _, name := range jobsOf(t, e.plane, "demo", "tfc-demo-apply-") {
		job, err := e.plane.Kube.BatchV1().Jobs("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if job.Status.Failed > 0 {
			t.Errorf("apply Job %s has a failed pod: %+v", name, job.Status)
		}
	}
	after := instanceFiles(t, s.instances)
	if _, ok := after["demo-1"]; !ok {
		t.Errorf("the apply that ran through the upgrade did not make demo-1: %v", slices.Sorted(maps.Keys(after)))
	}
	before["demo-1"] = after["demo-1"]
	// The machines apply the cluster's new exports (its instances output lists demo-1):
	// inputs none of their Jobs had. A Job that repeats an operation on
	// inputs already run (the name less its attempt) would be the upgrade's.
	err = framework.Consistently(5*time.Second, func() error {
		for _, name := range jobs() {
			run := name[:strings.LastIndex(name, "-")]
			if !strings.HasPrefix(name, "tfm-demo-") || !strings.Contains(name, "-apply-") || slices.ContainsFunc(ran, func(n string) bool { return strings.HasPrefix(n, run+"-") }) {
				return fmt.Errorf("job %s created during or after the upgrade, not a machine's apply of new inputs (Jobs before: %v)", name, ran)
			}
		}
		if got := instanceFiles(t, s.instances); !maps.Equal(got, before) {
			return fmt.Errorf("instances changed by the upgrade:\nbefore %v\nafter  %v", before, got)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	plan, err := e.plane.Clusterctl(ctx, s.config, nil, "upgrade", "plan")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, s.version) {
		t.Errorf("clusterctl upgrade plan after the upgrade does not show CAPTF %s:\n%s", s.version, plan)
	}
}

// slowApply sets the cluster module's instances of the TerraformCluster
// <ns>/<ns> to n, each taking 8 s to create, and waits until its apply
// Job exists and the object carries clusterctl's block-move annotation.
func slowApply(t *testing.T, cp *framework.ControlPlane, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{"instances": strconv.Itoa(n), "sleep_seconds": "8"}
	for i, v := range tc.Spec.Variables {
		if value, ok := set[v.Name]; ok {
			tc.Spec.Variables[i].Value = &runtime.RawExtension{Raw: []byte(value)}
			delete(set, v.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: name, Value: &runtime.RawExtension{Raw: []byte(set[name])}})
	}
	prefix := "tfc-" + ns + "-apply-"
	applies := len(jobsOf(t, cp, ns, prefix))
	if _, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Update(ctx, tc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, ns, metav1.GetOptions{})
		_, blocked := tc.Annotations[capi.BlockMoveAnnotation]
		return err == nil && blocked && len(jobsOf(t, cp, ns, prefix)) > applies, nil
	}); err != nil {
		t.Fatalf("no apply Job of %d hosts with the block-move annotation: %v", n, err)
	}
}

// move runs clusterctl move of the cluster <ns> from one plane to another
// and checks what a move must keep: the source keeps nothing of it and ran
// no Job from the move on; in the target every Machine has its Node again
// and every object is Ready with an empty plan, on the state that moved;
// no instance was created or destroyed. made is an instance an apply that
// ran when the move started makes: the move must have waited for it.
func (s *suite) move(t *testing.T, from, to *env, ns, instances string, before map[string]string, made string) {
	t.Helper()
	ctx := context.Background()
	states := stateSecrets(t, from.plane, ns)
	sourceJobs := watchJobs(t, from.plane, ns)
	start := time.Now()
	out, err := from.plane.Clusterctl(ctx, s.config, nil, "move", "--namespace", ns, "--to-kubeconfig", to.plane.KubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clusterctl move of %s in %s:\n%s", ns, time.Since(start).Round(100*time.Millisecond), out)
	moved := time.Now()
	if made != "" {
		if _, ok := instanceFiles(t, instances)[made]; !ok {
			t.Errorf("clusterctl move finished before the apply it had to wait for made %s", made)
		}
		before[made] = instanceFiles(t, instances)[made]
	}

	// The source has nothing left of the cluster.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tcs, err := from.plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).List(ctx, metav1.ListOptions{})
		tms, err2 := from.plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		return err == nil && err2 == nil && len(tcs.Items) == 0 && len(tms.Items) == 0 && len(stateSecrets(t, from.plane, ns)) == 0, nil
	}); err != nil {
		t.Errorf("the source keeps the cluster's objects or state after the move: %v", err)
	}
	// In the target: the same state, the Machines with their Nodes again
	// (its Cluster API reaches the workload cluster with the kubeconfig
	// Secret that moved), every object Ready.
	waitNodes(t, to, ns, 3)
	waitObjectsReady(t, to.plane, ns)
	t.Logf("the target has every Machine of %s with its Node and every object Ready %s after the move", ns, time.Since(moved).Round(time.Second))
	if got := stateSecrets(t, to.plane, ns); !slices.Equal(got, states) {
		t.Errorf("state Secrets in the target %v, want the source's %v", got, states)
	}
	err = framework.Consistently(5*time.Second, func() error {
		if got := instanceFiles(t, instances); !maps.Equal(got, before) {
			return fmt.Errorf("instances changed by the move:\nbefore %v\nafter  %v", before, got)
		}
		if added := sourceJobs(); len(added) != 0 {
			return fmt.Errorf("jobs created in the source during or after the move: %v", added)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	targetJobs := jobNames(t, to.plane, ns)
	t.Logf("Jobs in the target after the move: %v", targetJobs)
	for _, name := range targetJobs {
		if !strings.Contains(name, "-apply-") {
			t.Errorf("a Job other than an apply ran in the target: %s", name)
		}
	}
}

// addControlPlaneMachine adds to the cluster a control-plane Machine of
// the workers' TerraformMachineTemplate.
func addControlPlaneMachine(t *testing.T, cp *framework.ControlPlane, cluster string) {
	t.Helper()
	ctx := context.Background()
	tmpl, err := cp.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(cluster).Get(ctx, cluster+"-workers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := cluster + "-control-plane"
	labels := map[string]string{"cluster.x-k8s.io/cluster-name": cluster}
	if _, err := cp.Captf.InfrastructureV1alpha1().TerraformMachines(cluster).Create(ctx, &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: tmpl.Spec.Template.Spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": cluster, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": cluster, "version": "v1.34.0", "bootstrap": map[string]any{"dataSecretName": cluster + "-workers-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": name}}}}
	if _, err := cp.Dynamic.Resource(capi.Machine.Resource).Namespace(cluster).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitNodes waits until the Cluster <ns>/<ns>'s control plane is
// initialized and its n Machines have Nodes.
func waitNodes(t *testing.T, e *env, ns string, n int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster, err := e.plane.Dynamic.Resource(capi.Cluster.Resource).Namespace(ns).Get(ctx, ns, metav1.GetOptions{})
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
		machines, err := e.plane.Dynamic.Resource(capi.Machine.Resource).Namespace(ns).List(ctx, metav1.ListOptions{})
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
		t.Fatalf("the %s cluster's Machines did not get their Nodes: %v (%s)", ns, err, last)
	}
}

// waitObjectsReady waits until the TerraformCluster <ns>/<ns> and 3
// TerraformMachines are Ready with a plan that changed nothing.
func waitObjectsReady(t *testing.T, cp *framework.ControlPlane, ns string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		tms, err := cp.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
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

// jobsOf are the names of the Jobs in ns named prefix*.
func jobsOf(t *testing.T, cp *framework.ControlPlane, ns, prefix string) []string {
	return slices.DeleteFunc(jobNames(t, cp, ns), func(n string) bool { return !strings.HasPrefix(n, prefix) })
}

// watchJobs records the Jobs created in ns from now on; the returned
// function lists them.
func watchJobs(t *testing.T, cp *framework.ControlPlane, ns string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list, err := cp.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cp.Kube.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
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

// stateSecrets are the names of the state Secrets in ns.
func stateSecrets(t *testing.T, cp *framework.ControlPlane, ns string) []string {
	t.Helper()
	list, err := cp.Kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelSecretType + "=state"})
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

// waitClusterReady waits until the Cluster <ns>/<ns>'s infrastructure is
// provisioned and its 2 Machines have provider IDs.
func waitClusterReady(t *testing.T, e *env, ns string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		cluster, err := e.plane.Dynamic.Resource(capi.Cluster.Resource).Namespace(ns).Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		provisioned, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
		machines, err := e.plane.Dynamic.Resource(capi.Machine.Resource).Namespace(ns).List(ctx, metav1.ListOptions{})
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
		t.Fatalf("the %s cluster did not become Ready: %v (%s)", ns, err, last)
	}
}

func jobNames(t *testing.T, cp *framework.ControlPlane, ns string) []string {
	t.Helper()
	jobs, err := cp.Kube.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
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

// checkPlugin checks the release's kubectl plugin as krew installs it: the
// manifest names this machine's archive with its sha256, and the binary
// in it runs and says the release's version.
func checkPlugin(t *testing.T, dir, version string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "captf.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		Kind string
		Spec struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string } `json:"selector"`
				URI      string                                  `json:"uri"`
				Sha256   string                                  `json:"sha256"`
				Bin      string                                  `json:"bin"`
			}
		}
	}
	if err := yaml.Unmarshal(b, &manifest); err != nil || manifest.Kind != "Plugin" || manifest.Spec.Version != version || len(manifest.Spec.Platforms) == 0 {
		t.Fatalf("krew manifest %v: %+v\n%s", err, manifest, b)
	}
	p := manifest.Spec.Platforms[0]
	archive := filepath.Join(dir, filepath.Base(p.URI))
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.Sha256 {
		t.Fatalf("%s: sha256 %x, the manifest says %s", archive, sum, p.Sha256)
	}
	unpacked := t.TempDir()
	if out, err := exec.Command("tar", "-C", unpacked, "-xzf", archive).CombinedOutput(); err != nil {
		t.Fatalf("unpacking %s: %v\n%s", archive, err, out)
	}
	// krew installs only archives that carry the license.
	if _, err := os.Stat(filepath.Join(unpacked, "LICENSE")); err != nil {
		t.Errorf("the plugin's archive %s carries no LICENSE: %v", archive, err)
	}
	out, err := exec.Command(filepath.Join(unpacked, p.Bin), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kubectl-captf "+version) {
		t.Errorf("the released plugin says %q (%v), want its version %s", out, err, version)
	}
}
