package capi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

// TestMoveNeverDestroys does what clusterctl move does to the source: pause
// the Cluster, mark objects delete-for-move, delete them and strip their
// finalizers. No destroy may run; the instances stay.
func TestMoveNeverDestroys(t *testing.T) {
	ctx := context.Background()
	root, _ := setup(t)
	ns := "move"
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	instances := t.TempDir()
	variables := []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "examples", name, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "src"},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: read("local-cloud")}, Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "src-m", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "src"}},
		Spec:       infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: read("local-machine")}, Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot", Labels: map[string]string{infrav1.LabelBootstrapData: "true"}},
		Data: map[string][]byte{"value": []byte("#cloud-config")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": map[string]any{"name": "src", "namespace": ns},
			"spec": map[string]any{"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": "src"}}}},
		{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
			"metadata": map[string]any{"name": "src-m", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "src"}},
			"spec": map[string]any{"clusterName": "src", "bootstrap": map[string]any{"dataSecretName": "boot"},
				"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": "src-m"}}}},
	} {
		gvr := clustersGVR
		if o.GetKind() == "Machine" {
			gvr = machinesGVR
		}
		if _, err := plane.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, "src-m", metav1.GetOptions{})
		return err == nil && m.Spec.ProviderID != "", nil
	})
	if err != nil {
		t.Fatal("the source cluster's machine was never provisioned")
	}
	if n := len(instanceFiles(instances, "src")); n != 2 {
		t.Fatalf("%d instances before the move, want the cluster's and the machine's", n)
	}

	// clusterctl move, source side.
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Patch(ctx, "src", "application/merge-patch+json",
		[]byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// clusterctl waits for this: every provider object reports the pause.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		tm, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Get(ctx, "src-m", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "src", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(tm.Status.Conditions, infrav1.ConditionPaused) && meta.IsStatusConditionTrue(tc.Status.Conditions, infrav1.ConditionPaused), nil
	})
	if err != nil {
		t.Fatal("the pause never reached the TerraformCluster and TerraformMachine (condition Paused)")
	}
	move := []byte(`{"metadata":{"annotations":{"clusterctl.cluster.x-k8s.io/delete-for-move":""}}}`)
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	for _, o := range []struct {
		kind, name string
		patch      func(name string, data []byte) error
		del        func(name string) error
	}{
		{"Machine", "src-m", dynPatch(ns, "machines"), dynDelete(ns, "machines")},
		{"TerraformMachine", "src-m", func(n string, d []byte) error {
			_, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Patch(ctx, n, "application/merge-patch+json", d, metav1.PatchOptions{})
			return err
		}, func(n string) error {
			return plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Delete(ctx, n, metav1.DeleteOptions{})
		}},
		{"TerraformCluster", "src", func(n string, d []byte) error {
			_, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Patch(ctx, n, "application/merge-patch+json", d, metav1.PatchOptions{})
			return err
		}, func(n string) error {
			return plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Delete(ctx, n, metav1.DeleteOptions{})
		}},
		{"Cluster", "src", dynPatch(ns, "clusters"), dynDelete(ns, "clusters")},
	} {
		for _, step := range []func() error{
			func() error { return o.patch(o.name, move) },
			func() error { return o.del(o.name) },
			func() error { return o.patch(o.name, strip) },
		} {
			if err := step(); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("%s %s: %v", o.kind, o.name, err)
			}
		}
	}
	if err := framework.Consistently(5*time.Second, func() error {
		jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelOperation + "=destroy"})
		if err != nil {
			return err
		}
		if len(jobs.Items) != 0 {
			return fmt.Errorf("%d destroy Jobs ran during a move", len(jobs.Items))
		}
		if n := len(instanceFiles(instances, "src")); n != 2 {
			return fmt.Errorf("%d instances after the move, want both kept", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// clusterctl move, target side (here the same namespace): the Cluster
	// comes back paused, then its machine with its provider ID, written by
	// the user running clusterctl. The webhook lets that one through; the
	// same write under a running Cluster is refused.
	target := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": "src", "namespace": ns}, "spec": map[string]any{"paused": true,
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": "src"}}}}
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Create(ctx, target, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := func(name, cluster string) error {
		_, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, &infrav1.TerraformMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": cluster}},
			Spec: infrav1.TerraformMachineSpec{ProviderID: "local:///src-m",
				WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: read("local-machine")}, Variables: variables}}}, metav1.CreateOptions{})
		return err
	}
	if err := moved("src-m", "src"); err != nil {
		t.Errorf("the moved machine with its provider ID was refused under a paused Cluster: %v", err)
	}
	// A running Cluster takes none, even from a user who may move (one that
	// does not exist yet may: a restore brings Clusters last).
	running := target.DeepCopy()
	running.SetName("other")
	if err := unstructured.SetNestedField(running.Object, false, "spec", "paused"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(running.Object, "other", "spec", "infrastructureRef", "name"); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Create(ctx, running, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := moved("forged", "other"); err == nil || !strings.Contains(err.Error(), "spec.providerID: Forbidden: only the CAPTF manager") {
		t.Errorf("a machine with a provider ID under a Cluster that is not paused: %v, want it refused", err)
	}
}

func dynPatch(ns, resource string) func(string, []byte) error {
	return func(name string, data []byte) error {
		_, err := plane.Dynamic.Resource(clustersGVR.GroupVersion().WithResource(resource)).Namespace(ns).Patch(context.Background(), name, "application/merge-patch+json", data, metav1.PatchOptions{})
		return err
	}
}

func dynDelete(ns, resource string) func(string) error {
	return func(name string) error {
		return plane.Dynamic.Resource(clustersGVR.GroupVersion().WithResource(resource)).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	}
}
