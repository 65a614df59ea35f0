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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

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
// upgrade plan reads CAPTF's metadata; clusterctl delete --infrastructure
// terraform removes the manager and keeps the objects, their state and the
// infrastructure: nothing destroyed, nothing applied.
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

	// clusterctl move (and its --to-directory backup) waits for an
	// initialized control plane and a Node for every Machine: there are
	// none without a workload cluster, which this plane does not run yet.
	states := stateSecrets(t, plane)
	if len(states) != 3 {
		t.Errorf("state Secrets: %v, want one per object", states)
	}
	jobs := jobNames(t, plane)

	// The source's CAPTF goes; its objects and the infrastructure stay.
	if out, err := plane.Clusterctl(ctx, s.config, nil, "delete", "--infrastructure", "terraform"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("clusterctl delete --infrastructure terraform:\n%s", out)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods("captf-system").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the source's CAPTF manager is still there: %v", err)
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Errorf("the source's TerraformCluster after clusterctl delete: %v", err)
	}
	if got := stateSecrets(t, plane); !slices.Equal(got, states) {
		t.Errorf("state Secrets after clusterctl delete: %v, before %v", got, states)
	}

	// Nothing was destroyed or applied again.
	time.Sleep(5 * time.Second)
	if got := instanceFiles(t, s.instances); !maps.Equal(got, before) {
		t.Errorf("instances changed after clusterctl delete:\nbefore %v\nafter  %v", before, got)
	}
	if got := jobNames(t, plane); !slices.Equal(got, jobs) {
		t.Errorf("Jobs changed after clusterctl delete: before %v, after %v", jobs, got)
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
}
