// Package capi runs CAPTF beside Cluster API's real core controllers.
package capi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/test/framework"
)

var (
	plane  *framework.ControlPlane
	binary string
)

func TestMain(m *testing.M) {
	var err error
	if binary, err = framework.BuildCAPTF("captf-capi"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	framework.Main(m, framework.Options{}, &plane)
}

var clustersGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}

var (
	setupOnce sync.Once
	capiMgr   *framework.CAPIManager
	// captfMgr is the CAPTF manager every test shares; a test that stops
	// it restarts it (Restart keeps its ports and certificate).
	captfMgr *framework.Manager
	// mirrorImage is the provider mirror image runner pods mount.
	mirrorImage string
	setupErr    error
)

// setup starts, once per package, CAPI's core manager, the executor and a
// CAPTF manager watching every namespace; they stop with the plane.
func setup(t *testing.T) (string, *framework.CAPIManager) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	setupOnce.Do(func() {
		ctx := context.Background()
		// ClusterTopology: the topology controller writes objects from
		// ClusterClass templates (TestTopologyPatchCannotAddReferences).
		if capiMgr, setupErr = plane.StartCAPI(ctx, "MachinePool=true,ClusterTopology=true"); setupErr != nil {
			return
		}
		if setupErr = plane.InstallRBAC(ctx, "captf-system"); setupErr != nil {
			return
		}
		// Runner pods mount the local cloud's provider mirror, as a
		// user's with real providers do (--provider-mirror-image).
		if mirrorImage, setupErr = framework.ProviderMirrorImage(); setupErr != nil {
			return
		}
		var images map[string]string
		if images, setupErr = framework.ImageArchives(); setupErr != nil {
			return
		}
		if _, setupErr = plane.StartExecutor(ctx, framework.ExecutorOptions{Commands: map[string]string{"/captf": binary},
			Images: map[string]string{mirrorImage: images[mirrorImage]},
			Env:    []string{framework.PathEnv(), "CAPTF_TERRAFORM=" + os.Getenv("CAPTF_TERRAFORM")}}); setupErr != nil {
			return
		}
		var mgr *framework.Manager
		if mgr, setupErr = plane.StartManager(ctx, framework.ManagerOptions{Binary: binary, Namespace: "captf-system", Dir: plane.Dir,
			Args: []string{"--provider-mirror-image=" + mirrorImage}}); setupErr != nil {
			return
		}
		if setupErr = mgr.WaitReady(ctx); setupErr != nil {
			return
		}
		captfMgr = mgr
		// The webhook guards every write, CAPI's and the manager's own
		// provider ID writes included.
		_, setupErr = plane.RegisterWebhook(ctx, "captf", mgr.WebhookAddr, mgr.WebhookCert.CA.CertPEM, "capi", "move", "workload", "topology", "defaults", "outage", "chaos", "quota")
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return root, capiMgr
}

// TestClusterProvisionedByCAPI: with Cluster API's own controllers, a
// Cluster whose infrastructureRef names a TerraformCluster gets an owner
// reference from CAPI, CAPTF applies the module, and CAPI reads back
// provisioned, Ready and the control-plane endpoint.
func TestClusterProvisionedByCAPI(t *testing.T) {
	ctx := context.Background()
	root, capi := setup(t)
	ns := "capi"
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	instances := t.TempDir()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module:    infrav1.Module{Inline: string(module)},
			Variables: []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}},
		},
			// Machines and pools inherit these unless they set their own.
			Defaults: &infrav1.ClusterDefaults{Jobs: &infrav1.JobPolicy{ActiveDeadlineSeconds: &clusterDeadline}},
		},
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": "work", "namespace": ns},
		"spec": map[string]any{"infrastructureRef": map[string]any{
			"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": "work"}},
	}}
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Create(ctx, cluster, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var got *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = plane.Dynamic.Resource(clustersGVR).Namespace(ns).Get(ctx, "work", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		provisioned, _, _ := unstructured.NestedBool(got.Object, "status", "initialization", "infrastructureProvisioned")
		host, _, _ := unstructured.NestedString(got.Object, "spec", "controlPlaneEndpoint", "host")
		return provisioned && host != "", nil
	})
	if err != nil {
		tc, _ := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "work", metav1.GetOptions{})
		t.Fatalf("the Cluster never became infrastructure-provisioned with an endpoint: %v\ncluster status: %v\nTerraformCluster: %+v\ncapi log:\n%s",
			err, got.Object["status"], tc.Status.Conditions, capi.Logs(30))
	}
	host, _, _ := unstructured.NestedString(got.Object, "spec", "controlPlaneEndpoint", "host")
	port, _, _ := unstructured.NestedInt64(got.Object, "spec", "controlPlaneEndpoint", "port")
	if host != "work.local.test" || port != 6443 {
		t.Errorf("Cluster endpoint %s:%d, want work.local.test:6443 from the module", host, port)
	}
	fds, _, _ := unstructured.NestedSlice(got.Object, "status", "failureDomains")
	if len(fds) != 2 {
		t.Errorf("Cluster failureDomains = %v, want the module's 2", fds)
	}
	// CAPI mirrors the TerraformCluster's Ready into InfrastructureReady.
	conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	var infraReady string
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "InfrastructureReady" {
			infraReady = fmt.Sprint(m["status"])
		}
	}
	if infraReady != "True" {
		t.Errorf("Cluster InfrastructureReady = %q, want True; conditions %v", infraReady, conds)
	}
	tcNow, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(tcNow.Status.Conditions, infrav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("TerraformCluster Ready = %+v", c)
	}
	if tcNow.Labels["cluster.x-k8s.io/cluster-name"] != "work" {
		t.Errorf("CAPI did not label the TerraformCluster: %v", tcNow.Labels)
	}

	t.Run("a Machine gets its providerID and addresses", func(t *testing.T) { machine(t, ns, root, instances) })
	t.Run("a MachineDeployment scales 0 to 3 to 1", func(t *testing.T) { machineDeployment(t, ns, root, instances) })
	t.Run("a MachinePool reaches its replicas; exports re-apply it", func(t *testing.T) { machinePool(t, ns, root, instances, capi) })

	// Deleting the Cluster deletes its Machine and the TerraformCluster,
	// which destroy.
	if err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Delete(ctx, "work", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Get(ctx, "work", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the Cluster was never deleted\ncapi log:\n%s", capi.Logs(30))
	}
	if entries, _ := os.ReadDir(instances); len(entries) != 0 {
		t.Errorf("instances left after the Cluster was deleted: %d", len(entries))
	}
	// The garbage collector takes CAPTF's Secrets, Jobs and Leases with
	// their objects.
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=captf"}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		secrets, _ := plane.Kube.CoreV1().Secrets(ns).List(ctx, selector)
		jobs, _ := plane.Kube.BatchV1().Jobs(ns).List(ctx, selector)
		leases, _ := plane.Kube.CoordinationV1().Leases(ns).List(ctx, selector)
		for _, o := range secrets.Items {
			left = append(left, "secret/"+o.Name)
		}
		for _, o := range jobs.Items {
			left = append(left, "job/"+o.Name)
		}
		for _, o := range leases.Items {
			left = append(left, "lease/"+o.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("left after the Cluster was deleted: %v", left)
	}
}

// clusterDeadline is the cluster's spec.defaults.jobs.activeDeadlineSeconds.
var clusterDeadline int64 = 1234

// applyJobDeadline is the activeDeadlineSeconds of an object's apply Jobs.
func applyJobDeadline(t *testing.T, ns, prefix string) int64 {
	t.Helper()
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "captf.io/operation=apply"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if strings.HasPrefix(j.Name, prefix) && j.Spec.ActiveDeadlineSeconds != nil {
			return *j.Spec.ActiveDeadlineSeconds
		}
	}
	t.Fatalf("no apply Job named %s*", prefix)
	return 0
}

var machinesGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}

// machine: a Machine with bootstrap.dataSecretName referencing a
// TerraformMachine gets spec.providerID and addresses through CAPI's own
// copy, and the module saw the bootstrap data.
func machine(t *testing.T, ns, root, instances string) {
	ctx := context.Background()
	const bootstrap = "#cloud-config\nruncmd: [echo hello]\n"
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "worker-bootstrap", Labels: map[string]string{infrav1.LabelBootstrapData: "true"}},
		Data: map[string][]byte{"value": []byte(bootstrap), "format": []byte("cloud-config")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-machine", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	tm := &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module:    infrav1.Module{Inline: string(module)},
			Variables: []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}},
			Drift:     &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}, Remediation: infrav1.DriftRemediationApply},
		}},
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, tm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "worker-0", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work"}},
		"spec": map[string]any{
			"clusterName":       "work",
			"bootstrap":         map[string]any{"dataSecretName": "worker-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": "worker-0"},
		},
	}}
	if _, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = plane.Dynamic.Resource(machinesGVR).Namespace(ns).Get(ctx, "worker-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		id, _, _ := unstructured.NestedString(got.Object, "spec", "providerID")
		return id != "", nil
	})
	if err != nil {
		tm, _ := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, "worker-0", metav1.GetOptions{})
		t.Fatalf("the Machine never got a providerID: %v\nmachine status %v\nTerraformMachine conditions %+v", err, got.Object["status"], tm.Status.Conditions)
	}
	if id, _, _ := unstructured.NestedString(got.Object, "spec", "providerID"); id != "local:///worker-0" {
		t.Errorf("Machine providerID = %q, want local:///worker-0 from the module", id)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err = plane.Dynamic.Resource(machinesGVR).Namespace(ns).Get(ctx, "worker-0", metav1.GetOptions{})
		addrs, _, _ := unstructured.NestedSlice(got.Object, "status", "addresses")
		return err == nil && len(addrs) == 2, nil
	})
	if err != nil {
		t.Errorf("Machine addresses = %v, want the module's 2", got.Object["status"])
	}
	content, err := os.ReadFile(filepath.Join(instances, "worker-0"))
	if err != nil || string(content) != bootstrap {
		t.Errorf("the instance holds %q (%v), want the bootstrap data", content, err)
	}
	tmNow, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, "worker-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tmNow.Status.FailureDomain != "zone-a" || !tmNow.Status.Ready {
		t.Errorf("TerraformMachine status = %+v", tmNow.Status)
	}
	// kubectl captf describe shows the instance as the manager holds it
	// (the last note of the line: a drift check may run meanwhile).
	plugin, err := framework.PluginBinary("kubectl-captf-capi")
	if err != nil {
		t.Fatal(err)
	}
	describe, err := exec.Command(plugin, "describe", "cluster", "work", "-n", ns, "--kubeconfig", plane.KubeconfigFile).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^ *└─TerraformMachine/worker-0 +True +Applied;.* instance local:///worker-0$`).Match(describe) {
		t.Errorf("kubectl captf describe cluster work (%v) does not show worker-0's instance:\n%s", err, describe)
	}
	if d := applyJobDeadline(t, ns, "tfm-worker-0-apply-"); d != clusterDeadline {
		t.Errorf("the machine's apply Job deadline is %ds, want the cluster's default %ds", d, clusterDeadline)
	}

	// The instance goes away out of band: the drift check sees it, and the
	// machine's remediation replaces it (a destructive change: machines are
	// never gated).
	if err := os.Remove(filepath.Join(instances, "worker-0")); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tmNow, err = plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, "worker-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(tmNow.Status.Conditions, infrav1.ConditionDrifted)
		_, statErr := os.Stat(filepath.Join(instances, "worker-0"))
		return statErr == nil && c != nil && c.Reason == workspace.ReasonConverged && tmNow.Status.Ready, nil
	})
	if err != nil {
		t.Fatalf("the drifted machine did not converge: conditions %+v", tmNow.Status.Conditions)
	}
	events, _ := plane.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=worker-0,reason=" + workspace.ReasonDriftDetected})
	if len(events.Items) == 0 || !strings.Contains(events.Items[0].Message, "1 to replace") || !strings.Contains(events.Items[0].Message, "remediating with an apply") {
		t.Errorf("DriftDetected events: %+v", events.Items)
	}
	for _, c := range tmNow.Status.Conditions {
		if c.Type == infrav1.ConditionDestructivePlanBlocked || c.Type == infrav1.ConditionPlanAwaitingApproval {
			t.Errorf("a machine has gate condition %+v", c)
		}
	}
}

var machineDeploymentsGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinedeployments"}

// machineDeployment: a MachineDeployment of a TerraformMachineTemplate
// scales 0 → 3 → 1: three instances made, two destroyed, none left over.
func machineDeployment(t *testing.T, ns, root, instances string) {
	ctx := context.Background()
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-machine", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &infrav1.TerraformMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: infrav1.TerraformMachineTemplateSpec{
			Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{
				WorkspaceSpec: infrav1.WorkspaceSpec{
					Module:    infrav1.Module{Inline: string(module)},
					Variables: []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}},
				}}},
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
			NodeInfo: &infrav1.NodeInfo{Architecture: "arm64", OperatingSystem: "linux"},
		},
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]any{"pool": "workers", "cluster.x-k8s.io/cluster-name": "work"}
	md := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
		"metadata": map[string]any{"name": "workers", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work"}},
		"spec": map[string]any{
			"clusterName": "work",
			"replicas":    int64(0),
			// What CAPI's defaulting webhook would set; its webhooks do not
			// run here.
			"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"clusterName":       "work",
					"bootstrap":         map[string]any{"dataSecretName": "worker-bootstrap"},
					"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachineTemplate", "name": "workers"},
				},
			},
		},
	}}
	if _, err := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Create(ctx, md, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scale := func(n int64) {
		t.Helper()
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if _, err := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Patch(ctx, "workers", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor waits until n Machines of the deployment have provider IDs and
	// n instance files exist.
	waitFor := func(n int) {
		t.Helper()
		var ids []string
		var files []string
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "pool=workers"})
			if err != nil {
				return false, nil
			}
			ids = nil
			for _, m := range list.Items {
				if id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); id != "" {
					ids = append(ids, id)
				}
			}
			files = instanceFiles(instances, "workers-")
			return len(list.Items) == n && len(ids) == n && len(files) == n, nil
		})
		if err != nil {
			mds, _ := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Get(ctx, "workers", metav1.GetOptions{})
			machines, _ := plane.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			tms, _ := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
			for _, tm := range tms.Items {
				t.Logf("TerraformMachine %s: %+v", tm.Name, tm.Status.Conditions)
			}
			for _, m := range machines.Items {
				t.Logf("Machine %s: %v", m.GetName(), m.Object["status"])
			}
			t.Fatalf("want %d machines with provider IDs and %d instances; have provider IDs %v, instances %v\nMachineDeployment status %v\ncapi log:\n%s",
				n, n, ids, files, mds.Object["status"], plane.Logs("capi-manager", 40))
		}
	}
	// The autoscaler reads the template's status to scale from zero.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Get(ctx, "workers", metav1.GetOptions{})
		return err == nil && got.Status.Capacity.Memory().String() == "4Gi" && got.Status.NodeInfo != nil && got.Status.NodeInfo.Architecture == "arm64", nil
	})
	if err != nil {
		t.Errorf("the template's status never got its capacity and nodeInfo")
	}
	scale(3)
	waitFor(3)
	scale(1)
	waitFor(1)
	tms, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{LabelSelector: "pool=workers"})
	if err != nil || len(tms.Items) != 1 {
		t.Errorf("TerraformMachines of the deployment: %d (%v), want 1", len(tms.Items), err)
	}
}

func instanceFiles(dir, prefix string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

var poolDeadline int64 = 900

var machinePoolsGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinepools"}

// machinePool: a MachinePool with a TerraformMachinePool reaches its
// replicas with a providerIDList matching the instances, and a change of
// the cluster's exports re-applies the pool, without approval.
func machinePool(t *testing.T, ns, root, instances string, capi *framework.CAPIManager) {
	ctx := context.Background()
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-pool", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := &infrav1.TerraformMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
		Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module:    infrav1.Module{Inline: string(module)},
			Variables: []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}},
			Jobs:      &infrav1.JobPolicy{ActiveDeadlineSeconds: &poolDeadline},
		}},
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Create(ctx, tmp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
		"metadata": map[string]any{"name": "pool", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work"}},
		"spec": map[string]any{
			"clusterName": "work",
			"replicas":    int64(2),
			"template": map[string]any{"spec": map[string]any{
				"clusterName":       "work",
				"bootstrap":         map[string]any{"dataSecretName": "worker-bootstrap"},
				"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachinePool", "name": "pool"},
			}},
		},
	}}
	if _, err := plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Create(ctx, mp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// CAPI copies providerIDList and replicas only once it reaches the
	// workload cluster through the "<cluster>-kubeconfig" Secret. The plane
	// itself is the workload cluster here (a self-hosted management
	// cluster); the test plays the kubelets, registering a Node per
	// instance with its providerID.
	kubeconfig, err := os.ReadFile(plane.KubeconfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "work-kubeconfig", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": kubeconfig},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *unstructured.Unstructured
	var pool *infrav1.TerraformMachinePool
	var mpIDs []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if got, err = plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if pool, err = plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Get(ctx, "pool", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		provisioned, _, _ := unstructured.NestedBool(got.Object, "status", "initialization", "infrastructureProvisioned")
		replicas, _, _ := unstructured.NestedInt64(got.Object, "status", "replicas")
		mpIDs, _, _ = unstructured.NestedStringSlice(got.Object, "spec", "providerIDList")
		return provisioned && replicas == 2 && len(mpIDs) == 2, nil
	})
	if err != nil {
		t.Fatalf("the MachinePool never got 2 replicas and their providerIDs from CAPI: MachinePool spec.providerIDList %v status %v\nTerraformMachinePool %+v", mpIDs, got.Object["status"], pool)
	}
	ids := pool.Spec.ProviderIDList
	files := instanceFiles(instances, "pool-")
	if len(files) != 2 || ids[0] != "local:///"+files[0] || ids[1] != "local:///"+files[1] {
		t.Errorf("providerIDList %v does not match the instances %v", ids, files)
	}
	if d := applyJobDeadline(t, ns, "tfmp-pool-apply-"); d != poolDeadline {
		t.Errorf("the pool's apply Job deadline is %ds, want its own %ds over the cluster's default", d, poolDeadline)
	}
	if !slices.Equal(mpIDs, ids) {
		t.Errorf("MachinePool spec.providerIDList %v, want the TerraformMachinePool's %v", mpIDs, ids)
	}
	for i, id := range mpIDs {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-node-%d", i)},
			Spec:       corev1.NodeSpec{ProviderID: id},
		}
		node, err := plane.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = plane.Kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
		})
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := plane.Kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if got, err = plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		ready, _, _ := unstructured.NestedInt64(got.Object, "status", "readyReplicas")
		refs, _, _ := unstructured.NestedSlice(got.Object, "status", "nodeRefs")
		return ready == 2 && len(refs) == 2, nil
	})
	if err != nil {
		t.Fatalf("the MachinePool never reached 2 ready replicas with node references: status %v\ncapi log:\n%s", got.Object["status"], capi.Logs(30))
	}
	if !pool.Status.Ready || pool.Status.Initialization == nil || !*pool.Status.Initialization.Provisioned {
		t.Errorf("pool status ready=%v initialization=%+v, want both true", pool.Status.Ready, pool.Status.Initialization)
	}

	// Change the cluster's exports: the pool is applied again, no gate.
	before, err := plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Get(ctx, "pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "work", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "api_port", Value: &runtime.RawExtension{Raw: []byte("7443")}})
	tc.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: tc.Spec.ControlPlaneEndpoint.Host, Port: tc.Spec.ControlPlaneEndpoint.Port}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Update(ctx, tc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var after *infrav1.TerraformMachinePool
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		after, err = plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Get(ctx, "pool", metav1.GetOptions{})
		return err == nil && after.Status.AppliedInputsHash != before.Status.AppliedInputsHash && string(after.Status.Outputs["api_port"].Raw) == "7443", nil
	})
	if err != nil {
		t.Fatalf("the pool was not applied again after the cluster's exports changed: outputs %v, conditions %+v", after.Status.Outputs, after.Status.Conditions)
	}
}
