package capi

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/names"
)

// TestClusterDefaultsAreTheClusterAuthorsGrant (issue 30, item 5, as
// docs/security.md decides it): a TerraformCluster's spec.defaults.jobs
// env and envFrom are its author's grant to every machine of the cluster,
// whoever creates the machine. A tenant who may not read the cloud
// credentials creates a machine of the cluster: its Job gets them from the
// defaults; the same reference on the tenant's own TerraformMachine is
// refused.
func TestClusterDefaultsAreTheClusterAuthorsGrant(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	const ns = "defaults"
	// The cluster's author (the admin here) grants the credentials.
	creds := []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud-creds"}}}}
	workCluster(t, root, ns, func(tc *infrav1.TerraformCluster) {
		tc.Spec.Defaults = &infrav1.ClusterDefaults{Jobs: &infrav1.JobPolicy{EnvFrom: creds}}
	})
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-creds"},
		Data: map[string][]byte{"TOKEN": []byte("cloud token")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstrapSecret(t, ns, "boot")

	captf, dyn := tenantClients(t, ns)
	tm := func(name string, jobs *infrav1.JobPolicy) *infrav1.TerraformMachine {
		return &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
			Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: claimModule}, Jobs: jobs}}}
	}
	// Its own reference to the credentials: refused.
	_, err := captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, tm("own-ref", &infrav1.JobPolicy{EnvFrom: creds}), metav1.CreateOptions{})
	if want := `may not get Secret "cloud-creds"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the tenant's TerraformMachine naming the credentials: %v, want refused with %q", err, want)
	}
	// A machine of the cluster: admitted, and its Job inherits them.
	if _, err := captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, tm("inherits", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "inherits", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work", "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": "work", "bootstrap": map[string]any{"dataSecretName": "boot"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": "inherits"}}}}
	if _, err := dyn.Resource(machinesGVR).Namespace(ns).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTerraformMachine(t, ns, "inherits", "provisioned", capiMgr, func(tm *infrav1.TerraformMachine) bool { return tm.Spec.ProviderID != "" })
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelObjectName + "=inherits"})
	if err != nil || len(jobs.Items) == 0 {
		t.Fatalf("the machine's Jobs: %v, %v", jobs, err)
	}
	if env := jobs.Items[0].Spec.Template.Spec.Containers[0].EnvFrom; !slices.ContainsFunc(env, func(e corev1.EnvFromSource) bool {
		return e.SecretRef != nil && e.SecretRef.Name == "cloud-creds"
	}) {
		t.Errorf("the machine's Job %s has envFrom %+v, want the cluster's defaults (cloud-creds)", jobs.Items[0].Name, env)
	}
}

// tenantClients are the clients of framework.Tenant's tenant of ns.
func tenantClients(t *testing.T, ns string) (versioned.Interface, dynamic.Interface) {
	t.Helper()
	cfg, err := plane.Tenant(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	return versioned.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
}
