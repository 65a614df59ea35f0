package capi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// stealModule hands its bootstrap data on in a form redaction does not
// match: what a tenant writes to read a Secret through a Machine.
const stealModule = `
variable "captf_name" { type = string }
variable "captf_bootstrap_data" { type = string }
output "provider_id" { value = "local:///${var.captf_name}" }
output "addresses" { value = [{ type = "InternalIP", address = "10.0.0.9" }] }
output "loot" { value = base64encode(var.captf_bootstrap_data) }
`

// TestBootstrapSecretMustBeMadeForTheMachine (issue 30, item 1): CAPTF read
// whatever Secret a Machine's spec.bootstrap.dataSecretName named and gave
// its value to the module: a tenant who may create Machines pointed one at
// the cluster's admin kubeconfig and output it. Bootstrap data is read
// only from a Secret made for the Machine: controlled by it or by its
// bootstrap config, or labelled as bootstrap data by a writer of Secrets.
func TestBootstrapSecretMustBeMadeForTheMachine(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	ns := "bootstrap"
	workCluster(t, root, ns)
	// What a control-plane provider writes; the tenant may not read it.
	const kubeconfig = "canary-admin-kubeconfig-51c0"
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "work-kubeconfig",
		Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}}, Data: map[string][]byte{"value": []byte(kubeconfig)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newMachine := func(name, secret string) *unstructured.Unstructured {
		return controlPlaneMachine(t, ns, name, secret, stealModule)
	}
	waitMachine := func(name, what string, ok func(*infrav1.TerraformMachine) bool) *infrav1.TerraformMachine {
		return waitTerraformMachine(t, ns, name, what, capiMgr, ok)
	}
	readyReason := func(tm *infrav1.TerraformMachine) string {
		if c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady); c != nil {
			return c.Reason
		}
		return ""
	}

	// The tenant's Machine names the kubeconfig: refused, and no Job.
	newMachine("thief", "work-kubeconfig")
	tm := waitMachine("thief", "refused", func(tm *infrav1.TerraformMachine) bool {
		return readyReason(tm) == "BootstrapDataNotAllowed" || tm.Spec.ProviderID != ""
	})
	if got := readyReason(tm); got != "BootstrapDataNotAllowed" {
		c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady)
		t.Errorf("a Machine naming the cluster's kubeconfig: Ready %s (%s), want BootstrapDataNotAllowed; outputs %v", got, c.Message, tm.Status.Outputs)
	}
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=thief"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > 0 {
		t.Errorf("Jobs made for the thief: %d", len(jobs.Items))
	}
	for k, v := range tm.Status.Outputs {
		if strings.Contains(string(v.Raw), "Y2FuYXJ5") { // base64 of "canary"
			t.Errorf("status.outputs[%s] holds the kubeconfig: %s", k, v.Raw)
		}
	}

	// A Secret controlled by its Machine, as a bootstrap provider makes it, is read.
	own := newMachine("owned", "owned-bootstrap")
	yes := true
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "owned-bootstrap",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "owned", UID: own.GetUID(), Controller: &yes}}},
		Data: map[string][]byte{"value": []byte("#cloud-config\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The provider ID is written to the spec before the outputs reach the
	// status: wait for the status, which says Applied once they are there.
	tm = waitMachine("owned", "applied", func(tm *infrav1.TerraformMachine) bool {
		return tm.Spec.ProviderID != "" && readyReason(tm) == "Applied"
	})
	if got := string(tm.Status.Outputs["loot"].Raw); got != `"I2Nsb3VkLWNvbmZpZwo="` {
		t.Errorf("the module's view of its own bootstrap data: %s", got)
	}

	// A Secret controlled by a KubeadmConfig, as kubeadm's provider writes
	// it, is read for the Machine that controls the config (Cluster API's
	// Machine controller takes control of the config its Machine names);
	// a tenant's Machine that names another Machine's config and Secret
	// reads nothing.
	installKubeadmCRDs(t)
	config := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2", "kind": "KubeadmConfig",
		"metadata": map[string]any{"name": "configured", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work"}},
		"spec":     map[string]any{"format": "cloud-config"}}}
	config, err = plane.Dynamic.Resource(kubeadmConfigsGVR).Namespace(ns).Create(ctx, config, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "configured-bootstrap",
		Labels:          map[string]string{"cluster.x-k8s.io/cluster-name": "work"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "bootstrap.cluster.x-k8s.io/v1beta2", Kind: "KubeadmConfig", Name: "configured", UID: config.GetUID(), Controller: &yes}}},
		Data: map[string][]byte{"value": []byte("#cloud-config\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configuredMachine(t, ns, "configured", "configured", "configured-bootstrap")
	waitMachine("configured", "provisioned", func(tm *infrav1.TerraformMachine) bool { return tm.Spec.ProviderID != "" })
	configuredMachine(t, ns, "config-thief", "configured", "configured-bootstrap")
	tm = waitMachine("config-thief", "refused", func(tm *infrav1.TerraformMachine) bool {
		return readyReason(tm) == "BootstrapDataNotAllowed" || tm.Spec.ProviderID != ""
	})
	if got := readyReason(tm); got != "BootstrapDataNotAllowed" {
		t.Errorf("a Machine naming another Machine's KubeadmConfig and its Secret: Ready %s, provider ID %q; want BootstrapDataNotAllowed", got, tm.Spec.ProviderID)
	}
	jobs, err = plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=config-thief"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > 0 {
		t.Errorf("Jobs made for the config thief: %d", len(jobs.Items))
	}
}

var kubeadmConfigsGVR = schema.GroupVersionResource{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Resource: "kubeadmconfigs"}

// configuredMachine is controlPlaneMachine with a bootstrap configRef to
// KubeadmConfig config and its data Secret secret.
func configuredMachine(t *testing.T, ns, name, config, secret string) {
	t.Helper()
	m := controlPlaneMachineObject(t, ns, name, secret, stealModule)
	if err := unstructured.SetNestedStringMap(m.Object, map[string]string{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": config},
		"spec", "bootstrap", "configRef"); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).Create(context.Background(), m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// workCluster makes namespace ns with a Cluster "work" whose TerraformCluster
// runs the local-cloud example, changed by change.
func workCluster(t *testing.T, root, ns string, change ...func(*infrav1.TerraformCluster)) {
	t.Helper()
	ctx := context.Background()
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: string(module)},
			Variables: []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", t.TempDir())}}}}}}
	for _, c := range change {
		c(tc)
	}
	createCluster(t, tc)
}

// createCluster creates tc and the Cluster API Cluster of its name whose
// infrastructureRef names it.
func createCluster(t *testing.T, tc *infrav1.TerraformCluster) {
	t.Helper()
	ctx := context.Background()
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": tc.Name, "namespace": tc.Namespace},
		"spec":     map[string]any{"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": tc.Name}}}}
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(tc.Namespace).Create(ctx, cluster, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// controlPlaneMachine makes a control-plane Machine of Cluster "work" (it
// waits for no other) with bootstrap data Secret secret, and its
// TerraformMachine running module.
func controlPlaneMachine(t *testing.T, ns, name, secret, module string) *unstructured.Unstructured {
	t.Helper()
	created, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).Create(context.Background(), controlPlaneMachineObject(t, ns, name, secret, module), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// controlPlaneMachineObject creates the TerraformMachine of
// controlPlaneMachine and returns its Machine, not yet created.
func controlPlaneMachineObject(t *testing.T, ns, name, secret, module string) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: module}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, tm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work", "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": "work", "bootstrap": map[string]any{"dataSecretName": secret},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": name}}}}
	return m
}

// waitTerraformMachine waits up to 3 minutes for ok.
func waitTerraformMachine(t *testing.T, ns, name, what string, capiMgr *framework.CAPIManager, ok func(*infrav1.TerraformMachine) bool) *infrav1.TerraformMachine {
	t.Helper()
	var tm *infrav1.TerraformMachine
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		tm, err = plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && ok(tm), nil
	})
	if err != nil {
		var conds []metav1.Condition
		if tm != nil {
			conds = tm.Status.Conditions
		}
		t.Fatalf("TerraformMachine %s/%s never %s: %v\nconditions %+v\ncapi log:\n%s", ns, name, what, err, conds, capiMgr.Logs(20))
	}
	return tm
}

// bootstrapSecret makes a hand-made bootstrap data Secret, labelled as one.
func bootstrapSecret(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{infrav1.LabelBootstrapData: "true"}}, Data: map[string][]byte{"value": []byte("#cloud-config\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimModule outputs the provider ID it is given.
const claimModule = `
variable "captf_name" { type = string }
variable "captf_bootstrap_data" { type = string }
variable "id" {
  type    = string
  default = ""
}
output "provider_id" { value = var.id != "" ? var.id : "local:///${var.captf_name}" }
output "addresses" { value = [{ type = "InternalIP", address = "10.0.0.9" }] }
`

// TestProviderIDsAcrossNamespaces (issue 30, item 7): the provider-ID index
// was cluster-wide, so a tenant whose module output, first, an ID another
// namespace's machine would output (a predictable one, such as a sequential
// server number) blocked that machine with InvalidOutput, and the refusal
// named the tenant's namespace and object to the victim (and the victim's
// to the tenant). A provider ID is unique within a namespace: Cluster API
// ties it to a Node of the Machine's own Cluster.
func TestProviderIDsAcrossNamespaces(t *testing.T) {
	root, capiMgr := setup(t)
	for _, ns := range []string{"ids-tenant", "ids-victim"} {
		workCluster(t, root, ns)
		bootstrapSecret(t, ns, "boot")
	}
	// The tenant claims the ID the victim's machine will output.
	thief := strings.Replace(claimModule, `default = ""`, `default = "local:///victim-0"`, 1)
	controlPlaneMachine(t, "ids-tenant", "thief", "boot", thief)
	waitTerraformMachine(t, "ids-tenant", "thief", "holds the ID", capiMgr, func(tm *infrav1.TerraformMachine) bool {
		return tm.Spec.ProviderID == "local:///victim-0"
	})
	controlPlaneMachine(t, "ids-victim", "victim-0", "boot", claimModule)
	tm := waitTerraformMachine(t, "ids-victim", "victim-0", "settled", capiMgr, func(tm *infrav1.TerraformMachine) bool {
		c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady)
		return tm.Spec.ProviderID != "" || c != nil && c.Reason == "InvalidOutput"
	})
	if tm.Spec.ProviderID != "local:///victim-0" {
		t.Errorf("the victim's machine has provider ID %q, Ready %+v: another namespace's claim blocked it",
			tm.Spec.ProviderID, meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady))
	}
	// Within a namespace the rule holds: a second claim is refused, naming the holder.
	second := strings.Replace(claimModule, `default = ""`, `default = "local:///victim-0"`, 1)
	controlPlaneMachine(t, "ids-victim", "copycat", "boot", second)
	tm = waitTerraformMachine(t, "ids-victim", "copycat", "refused", capiMgr, func(tm *infrav1.TerraformMachine) bool {
		c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady)
		return c != nil && c.Reason == "InvalidOutput"
	})
	c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady)
	if !strings.Contains(c.Message, "TerraformMachine victim-0") || strings.Contains(c.Message, "ids-tenant") {
		t.Errorf("the refusal within a namespace says %q", c.Message)
	}
}

// TestBootstrapOwnerMustNameTheObject (issue 50, item 3): a writer creates a
// TerraformMachine whose owner reference names a control-plane Machine
// (its name and UID are anyone's to read). The Machine's spec names another
// TerraformMachine: the manager takes no owner from that reference, so the
// writer's module gets neither the Machine's bootstrap data (the workload
// cluster's CA keys) nor a Job; the object waits for a Machine to own it.
// The old manager took the reference as the owner and handed the data on.
func TestBootstrapOwnerMustNameTheObject(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	ns := "owner-ref"
	workCluster(t, root, ns)
	const keys = "#cloud-config\ncanary-ca-key-7d41\n"
	cp := controlPlaneMachine(t, ns, "cp", "cp-bootstrap", stealModule)
	yes := true
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cp-bootstrap",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "cp", UID: cp.GetUID(), Controller: &yes}}},
		Data: map[string][]byte{"value": []byte(keys)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The real one gets its data: the reference the thief copies is live.
	waitTerraformMachine(t, ns, "cp", "provisioned", capiMgr, func(tm *infrav1.TerraformMachine) bool { return tm.Spec.ProviderID != "" })

	thief := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "thief", Namespace: ns,
		Labels:          map[string]string{"cluster.x-k8s.io/cluster-name": "work"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "cp", UID: cp.GetUID(), Controller: &yes}}},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: stealModule}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, thief, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	readyReason := func(tm *infrav1.TerraformMachine) string {
		if c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady); c != nil {
			return c.Reason
		}
		return ""
	}
	// Waiting for its owner is said after 10 s; the old manager applied
	// within them.
	tm := waitTerraformMachine(t, ns, "thief", "waiting for its owner or provisioned", capiMgr, func(tm *infrav1.TerraformMachine) bool {
		return readyReason(tm) == "WaitingForMachineOwner" || tm.Spec.ProviderID != "" || len(tm.Status.Outputs) > 0
	})
	if got := readyReason(tm); got != "WaitingForMachineOwner" {
		t.Errorf("a TerraformMachine with a hand-written owner reference to Machine cp: Ready %s, provider ID %q, want WaitingForMachineOwner", got, tm.Spec.ProviderID)
	}
	if loot, ok := tm.Status.Outputs["loot"]; ok {
		var b64 string
		_ = json.Unmarshal(loot.Raw, &b64)
		data, _ := base64.StdEncoding.DecodeString(b64)
		t.Errorf("the thief's module read bootstrap data %q (the control plane's: %v)", data, strings.Contains(string(data), "canary-ca-key"))
	}
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=thief"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > 0 {
		t.Errorf("Jobs made for the thief: %d", len(jobs.Items))
	}
}
