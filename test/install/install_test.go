// Package install installs CAPTF as users do, `kubectl apply -k` of the
// shipped manifests with the images `make images` built, on a plane whose
// pods have their own network, and runs Cluster API's quickstart through
// the manager running as a pod.
package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

var plane *framework.ControlPlane

func TestMain(m *testing.M) {
	capi, err := framework.CAPICRDDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// CAPTF's CRDs come with the install.
	framework.Main(m, framework.Options{PodNetwork: true, CRDDirs: []string{capi}}, &plane)
}

const managerSelector = "app.kubernetes.io/name=captf,app.kubernetes.io/component=manager"

// env is what both installs share: the images, and the plane's
// cert-manager, Cluster API and executor.
type env struct {
	root, instances           string
	managerImage, runnerImage string
	mirrorImage               string
	cloud                     *framework.LocalCloud
	executor                  *framework.Executor
	capi                      *framework.CAPIManager
}

func setup(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{}
	var err error
	if e.root, err = framework.RepoRoot(); err != nil {
		t.Fatal(err)
	}
	images, err := framework.ImageArchives()
	if err != nil {
		t.Fatal(err)
	}
	for ref := range images {
		switch {
		case strings.Contains(ref, "/captf-runner:"):
			e.runnerImage = ref
		case strings.Contains(ref, "/captf-localcloud-providers:"):
			e.mirrorImage = ref
		case strings.Contains(ref, "/captf:"):
			e.managerImage = ref
		}
	}
	if e.managerImage == "" || e.runnerImage == "" || e.mirrorImage == "" {
		t.Fatalf("images %v: want the manager's, the runner's and the provider mirror's (make images)", images)
	}
	if err := plane.StartCertManager(ctx); err != nil {
		t.Fatal(err)
	}
	if e.capi, err = plane.StartCAPI(ctx, "MachinePool=true"); err != nil {
		t.Fatal(err)
	}
	// The quickstart's cloud, where runner pods reach it: an address of
	// this host every pod network routes to.
	host, err := framework.HostAddressForPods()
	if err != nil {
		t.Fatal(err)
	}
	if e.cloud, err = framework.StartLocalCloud(t.TempDir(), "-listen="+host+":0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.cloud.Stop)
	// The instances of this test's own modules: the one host directory
	// every container sees, and the runner's user may write.
	e.instances = t.TempDir()
	if err := os.Chmod(e.instances, 0o777); err != nil {
		t.Fatal(err)
	}
	if e.executor, err = plane.StartExecutor(ctx, framework.ExecutorOptions{Images: images, HostDirs: []string{e.instances}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestKustomizeInstall: an overlay of manifests/default that pins the two
// images (as a user pins a release) is applied with kubectl; the manager
// pod comes up from its own manifest (the certificate cert-manager issued,
// downward-API env, probes, leader election) and becomes Ready; the API
// server calls the webhook through its Service; the quickstart's Cluster
// and MachineDeployment become Ready with Jobs running OpenTofu from the
// runner image, reaching the runner API through its Service. Deleting the
// manager pod: the Deployment brings another, which takes over without
// applying anything again. Deleting the Cluster destroys every instance;
// `kubectl delete -k` then removes the install. The same with an overlay
// that sets its own namespace and name prefix.
func TestKustomizeInstall(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		name, namespace, overlay string
		replacePod               bool
	}{
		{name: "default", namespace: "captf-system", replacePod: true},
		{name: "overlay", namespace: "tenant-x", overlay: "namespace: tenant-x\nnamePrefix: acme-\n"},
	} {
		if !t.Run(tc.name, func(t *testing.T) { e.install(t, tc.namespace, tc.overlay, tc.replacePod) }) {
			return // the next install would meet this one's leftovers
		}
	}
}

func (e *env) install(t *testing.T, namespace, overlayText string, replacePod bool) {
	ctx := context.Background()
	overlay := t.TempDir()
	version := e.managerImage[strings.LastIndex(e.managerImage, ":")+1:]
	if err := framework.InstallOverlay(overlay, e.root, version, overlayText+mirrorPatch(t, e.root, e.mirrorImage)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := plane.Kubectl(ctx, "apply", "-k", overlay); err != nil {
		t.Fatal(err)
	}
	first := e.waitManagerReady(t, namespace, "")
	t.Logf("manager pod %s/%s Ready %s after kubectl apply", namespace, first.Name, time.Since(start).Round(time.Second))
	if img := first.Spec.Containers[0].Image; img != e.managerImage {
		t.Errorf("manager pod runs %s, want %s", img, e.managerImage)
	}
	if !strings.HasPrefix(first.Status.PodIP, "198.18.") {
		t.Errorf("manager pod IP %q is not on the pod network", first.Status.PodIP)
	}
	checkSoftMemoryLimit(t, e.executor, first)

	// The API server reaches the webhook only through its Service (no URL
	// in the configuration): a rejection with CAPTF's message proves it.
	waitWebhookRejects(t)

	if err := plane.ApplyQuickstart(ctx, e.root, e.cloud.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.WaitQuickstartReady(ctx); err != nil {
		t.Fatalf("%v\nmanager log:\n%s\ncapi log:\n%s", err, podLog(e.executor, first), e.capi.Logs(30))
	}
	machines, err := plane.WaitQuickstartMachines(ctx, framework.QuickstartMachines)
	if err != nil {
		t.Fatalf("%v\nmanager log:\n%s", err, podLog(e.executor, first))
	}
	t.Logf("quickstart Ready %s after kubectl apply: %v", time.Since(start).Round(time.Second), machines)

	jobs := jobsByOperation(t)
	if n := len(jobs["apply"]); n != 1+framework.QuickstartMachines {
		t.Errorf("%d apply Jobs, want %d (the cluster and its machines): %v", n, 1+framework.QuickstartMachines, jobs["apply"])
	}
	runnerPods, err := plane.Kube.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: names.LabelOperation + "=apply"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range runnerPods.Items {
		if img := p.Spec.Containers[0].Image; img != e.runnerImage {
			t.Errorf("runner pod %s runs %s, want %s", p.Name, img, e.runnerImage)
		}
		if logs, _ := e.executor.Logs(p.Namespace, p.Name); !strings.Contains(logs, "OpenTofu has been successfully initialized") {
			t.Errorf("runner pod %s did not run OpenTofu from the image:\n%s", p.Name, logs)
		}
	}
	before := cloudResources(t, e.cloud)
	if len(before) == 0 {
		t.Fatal("the quickstart made nothing in the cloud")
	}

	if namespace == "captf-system" {
		checkReadinessCommands(t, e.root)
		checkRunnerOutOfMemory(t, e.executor)
	}
	if replacePod {
		t.Run("TestLeaderPodDeletedDuringApplies", func(t *testing.T) { e.leaderPodDeletedDuringApplies(t, namespace) })
		t.Run("TestCertificateRotationDuringRuns", func(t *testing.T) { e.certificateRotationDuringRuns(t, namespace) })
		// The new leader has synced: every object stays Ready, no Job of
		// theirs starts.
		err := framework.Consistently(15*time.Second, func() error {
			for op, list := range jobsByOperation(t) {
				list = slices.DeleteFunc(list, func(j string) bool {
					return strings.HasPrefix(j, "tfc-handover-") || strings.HasPrefix(j, "tfc-rotation-")
				})
				if !slices.Equal(list, jobs[op]) {
					return fmt.Errorf("%s Jobs after the manager pod's replacement: %v, before: %v", op, list, jobs[op])
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		if got := cloudResources(t, e.cloud); !maps.Equal(got, before) {
			t.Errorf("the cloud's resources changed after the manager pod's replacement:\nbefore %v\nafter  %v", before, got)
		}
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil || !ready(tc.Status.Conditions) {
			t.Errorf("TerraformCluster after the replacement: %v %+v", err, tc)
		}
	}

	// Deleting the Cluster destroys its machines and itself (runner-image
	// destroy Jobs); then the demo namespace and the install go.
	if err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Delete(ctx, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	}); err != nil {
		t.Fatalf("the quickstart's TerraformCluster was not deleted: %v", err)
	}
	if left := instanceFiles(t, e.instances); len(left) > 0 {
		t.Errorf("instances left after the Cluster's deletion: %v", left)
	}
	if left := cloudResources(t, e.cloud); len(left) > 0 {
		t.Errorf("the cloud holds %v after the Cluster's deletion", left)
	}
	if err := plane.Kube.CoreV1().Namespaces().Delete(ctx, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Kube.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		ns, _ := plane.Kube.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{})
		t.Fatalf("namespace demo was not deleted: %v\n%+v", err, ns.Status)
	}
	if _, err := plane.Kubectl(ctx, "delete", "-k", overlay, "--wait", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
}

// checkRunnerOutOfMemory: a module that needs more memory than its runner
// pod's limit is killed by the kernel, as in a real cluster, and the object
// says so, naming the limit and what to raise.
func checkRunnerOutOfMemory(t *testing.T, executor *framework.Executor) {
	t.Helper()
	if err := executor.MemoryLimits(); err != nil {
		framework.CannotCheck(t, "a runner out of memory", err)
		return
	}
	ctx := context.Background()
	// The module's provisioner wants 128 MiB at once (dd's buffer).
	manifest := `apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: small, namespace: demo}
spec:
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: TerraformCluster, name: small}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformCluster
metadata:
  name: small
  namespace: demo
  labels: {cluster.x-k8s.io/cluster-name: small}
spec:
  module:
    inline: |
      resource "terraform_data" "instance" {
        provisioner "local-exec" { command = "dd if=/dev/zero of=/dev/null bs=128M count=1" }
      }
      output "control_plane_endpoint" { value = { host = "small.local.test", port = 6443 } }
  jobs:
    resources:
      requests: {memory: 64Mi}
      limits: {memory: 64Mi}
`
	file := filepath.Join(t.TempDir(), "small.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatal(err)
	}
	var last metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "small", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range tc.Status.Conditions {
			if c.Type == infrav1.ConditionReady {
				last = c
			}
		}
		return last.Reason == "RunnerOutOfMemory" || last.Reason == "Applied", nil
	})
	if err != nil || last.Reason != "RunnerOutOfMemory" || !strings.Contains(last.Message, "(64Mi): raise spec.jobs.resources.limits.memory") {
		t.Errorf("a runner with 64Mi: Ready %s %s: %s (%v), want RunnerOutOfMemory naming the limit", last.Status, last.Reason, last.Message, err)
	} else {
		t.Logf("a runner with 64Mi: Ready=%s %s: %s", last.Status, last.Reason, last.Message)
	}
	if pods, err := plane.Kube.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=small"}); err == nil {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if term := cs.State.Terminated; term != nil {
					t.Logf("runner pod %s: %s, exit code %d", p.Name, term.Reason, term.ExitCode)
				}
			}
		}
	}
	if _, err := plane.Kubectl(ctx, "delete", "-f", file, "--wait", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
}

// checkSoftMemoryLimit: the manager, in a container with a memory limit,
// sets Go's soft memory limit to 90% of it and says so.
func checkSoftMemoryLimit(t *testing.T, executor *framework.Executor, pod *corev1.Pod) {
	t.Helper()
	if err := executor.MemoryLimits(); err != nil {
		framework.CannotCheck(t, "the manager's soft memory limit", err)
		return
	}
	limit := pod.Spec.Containers[0].Resources.Limits.Memory().Value()
	want := fmt.Sprintf("containerLimitBytes=%d GOMEMLIMIT=%d", limit, int64(float64(limit)*0.9))
	logs, err := executor.Logs(pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"Soft memory limit set from the container's"`) {
			if !strings.Contains(line, want) {
				t.Errorf("the manager's soft memory limit: %s, want %s", line, want)
			}
			return
		}
	}
	t.Errorf("the manager's log does not say it set a soft memory limit:\n%s", podLog(executor, pod))
}

// slowModule makes instance <name> 20 s into the apply, and counts how
// many times it was made.
const slowModule = `
variable "instance_dir" { type = string }
variable "name" { type = string }
resource "terraform_data" "instance" {
  input = "${var.instance_dir}/${var.name}"
  provisioner "local-exec" {
    command = "sleep 20 && echo made >> '${self.input}'"
  }
  provisioner "local-exec" {
    when    = destroy
    command = "rm -f '${self.input}'"
  }
}
output "control_plane_endpoint" { value = { host = "${var.name}.local.test", port = 6443 } }
`

// slowCluster makes a Cluster and its TerraformCluster running slowModule
// in namespace demo.
func (e *env) slowCluster(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	raw := func(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", s)} }
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: slowModule},
			Variables: []infrav1.Variable{{Name: "instance_dir", Value: raw(e.instances)}, {Name: "name", Value: raw(name)}}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": name, "namespace": "demo"},
		"spec":     map[string]any{"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": name}}}}
	if _, err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Create(ctx, cluster, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitCreating waits until the apply of slow cluster name is creating its
// instance.
func (e *env) waitCreating(t *testing.T, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := plane.Kube.CoreV1().Pods("demo").List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=" + name + "," + names.LabelOperation + "=apply"})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		logs, _ := e.executor.Logs("demo", list.Items[0].Name)
		return strings.Contains(logs, "Creating..."), nil
	})
	if err != nil {
		t.Fatalf("the apply of %s never started creating", name)
	}
}

// checkMadeOnce checks slow cluster name is Ready within timeout, applied
// by one Job, its instance made once; then deletes its Cluster (the
// install's end waits for it to go).
func (e *env) checkMadeOnce(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, name, metav1.GetOptions{})
		return err == nil && ready(got.Status.Conditions), nil
	})
	if err != nil {
		got, _ := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, name, metav1.GetOptions{})
		t.Errorf("%s never became Ready: %+v", name, got.Status.Conditions)
	}
	var applies []string
	for _, j := range jobsByOperation(t)["apply"] {
		if strings.HasPrefix(j, "tfc-"+name+"-") {
			applies = append(applies, j)
		}
	}
	if len(applies) != 1 {
		t.Errorf("apply Jobs of %s: %v, want the one that ran through", name, applies)
	}
	if b, err := os.ReadFile(filepath.Join(e.instances, name)); err != nil || string(b) != "made\n" {
		t.Errorf("instance %s was made %q (%v), want once", name, b, err)
	}
	if err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// leaderPodDeletedDuringApplies (issue 31, item 2): with the shipped two
// replicas, the leader's pod is deleted while an apply runs: writes to
// Terraform* objects keep being admitted (the other replica serves the
// webhook), the running apply keeps reaching its state and finishes once,
// and the other replica takes the lead.
func (e *env) leaderPodDeletedDuringApplies(t *testing.T, namespace string) {
	ctx := context.Background()
	pods := e.waitManagersReady(t, namespace, 2, "")
	leader := e.leaderOf(t, namespace)
	e.slowCluster(t, "handover")
	e.waitCreating(t, "handover")

	// Writes through the webhook, every 250 ms, from before the deletion
	// until the new leader has finished the apply.
	stop := make(chan struct{})
	var writes, refused []string
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.captf.io/write":"%d"}}}`, i)
			_, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Patch(ctx, "demo", types.MergePatchType, patch, metav1.PatchOptions{})
			writes = append(writes, time.Now().Format(time.TimeOnly))
			if err != nil {
				refused = append(refused, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err))
			}
		}
	}()
	deleted := time.Now()
	if err := plane.Kube.CoreV1().Pods(namespace).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var other string
	for _, p := range pods {
		if p.Name != leader {
			other = p.Name
		}
	}
	var newLeader string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		newLeader = e.leaderOf(t, namespace)
		return newLeader != "" && newLeader != leader, nil
	})
	if err != nil {
		t.Fatalf("no replica took the lead from %s", leader)
	}
	t.Logf("%s leads %s after %s was deleted (the other replica was %s)", newLeader, time.Since(deleted).Round(time.Second), leader, other)
	e.checkMadeOnce(t, "handover", 3*time.Minute)
	close(stop)
	<-written
	t.Logf("%d writes while the leader was replaced, %d refused", len(writes), len(refused))
	if len(refused) > 0 {
		t.Errorf("writes refused while a replica served: %v", refused)
	}
}

// certificateRotationDuringRuns (issue 31, item 3): cert-manager renews the
// serving certificate (a new key, as rotationPolicy: Always makes) while an
// apply runs and while another's Job waits for its pod (a ResourceQuota
// holds it back): both runners got the CA bundle when their Job was made,
// and both finish once. With the certificate its own CA (the old shipped
// Issuer), a renewal was a new CA that neither runner trusted.
func (e *env) certificateRotationDuringRuns(t *testing.T, namespace string) {
	ctx := context.Background()
	serving, err := plane.Kube.CoreV1().Secrets(namespace).Get(ctx, "captf-webhook-server-cert", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "one-pod", Namespace: "demo"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}}}
	if _, err := plane.Kube.CoreV1().ResourceQuotas("demo").Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plane.Kube.CoreV1().ResourceQuotas("demo").Delete(ctx, "one-pod", metav1.DeleteOptions{}) }()
	e.slowCluster(t, "rotation-running")
	e.waitCreating(t, "rotation-running")
	e.slowCluster(t, "rotation-queued")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs, err := plane.Kube.BatchV1().Jobs("demo").List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=rotation-queued"})
		return err == nil && len(jobs.Items) == 1, nil
	})
	if err != nil {
		t.Fatal("the queued cluster's Job was not made")
	}

	if err := plane.RenewCertificate(ctx, namespace, "captf-serving-cert"); err != nil {
		t.Fatal(err)
	}
	var renewed *corev1.Secret
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		renewed, err = plane.Kube.CoreV1().Secrets(namespace).Get(ctx, "captf-webhook-server-cert", metav1.GetOptions{})
		return err == nil && !bytes.Equal(renewed.Data[corev1.TLSPrivateKeyKey], serving.Data[corev1.TLSPrivateKeyKey]), nil
	})
	if err != nil {
		t.Fatal("the serving certificate was not renewed")
	}
	t.Logf("serving certificate renewed with a new key; its CA %s", map[bool]string{true: "is the same", false: "changed"}[bytes.Equal(renewed.Data["ca.crt"], serving.Data["ca.crt"])])
	// The runner API's Service serves the renewed certificate.
	svc, err := plane.Kube.CoreV1().Services(namespace).Get(ctx, "captf-runner-api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		conn, err := tls.Dial("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "9445"), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reads the certificate
		if err != nil {
			return false, nil
		}
		defer conn.Close()
		served := conn.ConnectionState().PeerCertificates[0].Raw
		block, _ := pem.Decode(renewed.Data[corev1.TLSCertKey])
		return block != nil && bytes.Equal(served, block.Bytes), nil
	})
	if err != nil {
		t.Fatal("the runner API never served the renewed certificate")
	}
	e.checkMadeOnce(t, "rotation-running", 3*time.Minute)
	e.checkMadeOnce(t, "rotation-queued", 4*time.Minute)
}

// leaderOf is the pod that holds the manager's leader Lease, or "".
func (e *env) leaderOf(t *testing.T, namespace string) string {
	t.Helper()
	leases, err := plane.Kube.CoordinationV1().Leases(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, l := range leases.Items {
		if l.Spec.HolderIdentity != nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < 15*time.Second {
			pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
			return pod
		}
	}
	return ""
}

// waitManagersReady waits for n Ready manager pods, none named notName.
func (e *env) waitManagersReady(t *testing.T, namespace string, n int, notName string) []corev1.Pod {
	t.Helper()
	var found []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
		if err != nil {
			return false, nil
		}
		found = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Name == notName || p.DeletionTimestamp != nil || !ready(podConditions(p))
		})
		return len(found) == n, nil
	})
	if err != nil {
		t.Fatalf("%d Ready manager pods, want %d", len(found), n)
	}
	return found
}

// waitManagerReady waits for a Ready manager pod other than notName.
func (e *env) waitManagerReady(t *testing.T, namespace, notName string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: managerSelector})
		if err != nil {
			return false, nil
		}
		last = ""
		for i, p := range pods.Items {
			last += fmt.Sprintf("%s phase=%s %v; ", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			if p.Name != notName && p.DeletionTimestamp == nil && ready(podConditions(p)) {
				found = &pods.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		msg := last
		if pods, _ := plane.Kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: managerSelector}); pods != nil {
			for i := range pods.Items {
				msg += "\n" + podLog(e.executor, &pods.Items[i])
			}
		}
		t.Fatalf("no Ready manager pod: %v\n%s", err, msg)
	}
	return found
}

func podConditions(p corev1.Pod) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range p.Status.Conditions {
		out = append(out, metav1.Condition{Type: string(c.Type), Status: metav1.ConditionStatus(c.Status)})
	}
	return out
}

func ready(conds []metav1.Condition) bool {
	for _, c := range conds {
		if c.Type == "Ready" {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func podLog(executor *framework.Executor, p *corev1.Pod) string {
	logs, err := executor.Logs(p.Namespace, p.Name)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}

// waitWebhookRejects waits until CAPTF's webhook refuses a TerraformCluster
// whose module source starts with white space (the CRD's schema lets it
// through).
func waitWebhookRejects(t *testing.T) {
	t.Helper()
	bad := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "versioned", Namespace: "default"},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Source: " ./m"}}}}
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = plane.Captf.InfrastructureV1alpha1().TerraformClusters("default").Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "spec.module.source"), nil
	})
	if err != nil {
		t.Fatalf("the webhook never refused a TerraformCluster with white space around its module source (last: %v)", last)
	}
	if !strings.Contains(last.Error(), "admission webhook") || !strings.Contains(last.Error(), "must not start or end with white space") {
		t.Errorf("refused, but not by the webhook: %v", last)
	}
	t.Logf("webhook through its Service: %v", last)
}

// jobsByOperation lists the quickstart's Jobs' names by operation.
func jobsByOperation(t *testing.T) map[string][]string {
	t.Helper()
	jobs, err := plane.Kube.BatchV1().Jobs("demo").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, j := range jobs.Items {
		op := j.Labels[names.LabelOperation]
		out[op] = append(out[op], j.Name)
	}
	for op := range out {
		slices.Sort(out[op])
	}
	return out
}

// cloudResources lists the quickstart's resources in the cloud.
func cloudResources(t *testing.T, cloud *framework.LocalCloud) map[string]string {
	t.Helper()
	made, err := cloud.Resources(framework.QuickstartAccount)
	if err != nil {
		t.Fatal(err)
	}
	return made
}

// mirrorPatch is the kustomize patch docs/providers.md gives for
// --provider-mirror-image, with image in it.
func mirrorPatch(t *testing.T, root, image string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "providers.md"))
	if err != nil {
		t.Fatal(err)
	}
	const example = "registry.example.com/captf-provider-mirror:1"
	_, block, _ := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !strings.Contains(block, "patches:") || !strings.Contains(block, example) {
		t.Fatalf("docs/providers.md has no patch of the mirror image's flag: %q", block)
	}
	var lines []string
	for l := range strings.Lines(block) {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	return strings.ReplaceAll(strings.Join(lines, ""), example, image)
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

// waitLeader waits until pod holds the manager's leader-election Lease.
func waitLeader(t *testing.T, namespace, pod string) {
	t.Helper()
	var holder string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		leases, err := plane.Kube.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, l := range leases.Items {
			if l.Spec.HolderIdentity != nil && strings.HasPrefix(*l.Spec.HolderIdentity, pod+"_") {
				holder = *l.Spec.HolderIdentity
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s never held the leader Lease (last holder %q)", pod, holder)
	}
}
