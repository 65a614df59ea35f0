package workspace

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// TestBootstrapDataMadeFor (issue 30, item 1): a Machine's author may not
// make CAPTF read any Secret of the namespace as bootstrap data.
func TestBootstrapDataMadeFor(t *testing.T) {
	machine := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "m1", "namespace": "ns", "uid": "m1-uid"},
		"spec": map[string]any{"clusterName": "work", "bootstrap": map[string]any{"dataSecretName": "boot",
			"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "m1-config"}}}}}
	pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
		"metadata": map[string]any{"name": "p1", "namespace": "ns", "uid": "p1-uid"},
		"spec": map[string]any{"clusterName": "work", "template": map[string]any{"spec": map[string]any{"bootstrap": map[string]any{"dataSecretName": "boot",
			"configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "p1-config"}}}}}}}
	controlled := func(apiVersion, kind, name, uid string) []metav1.OwnerReference {
		yes := true
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}}
	}
	owned := func(apiVersion, kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid)}}
	}
	// The bootstrap configs: each controlled by its Machine (pool), as
	// Cluster API's controllers leave them; "c9" by another Machine.
	configs := map[string]metav1.Object{
		"m1-config": &metav1.ObjectMeta{Name: "m1-config", UID: "c1", OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "Machine", "m1", "m1-uid")},
		"p1-config": &metav1.ObjectMeta{Name: "p1-config", UID: "c2", OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "MachinePool", "p1", "p1-uid")},
		"m2-config": &metav1.ObjectMeta{Name: "m2-config", UID: "c9", OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "Machine", "m2", "m2-uid")},
	}
	var configReads []string
	readConfig := func(_ context.Context, namespace, group, kind, name string) (metav1.Object, error) {
		configReads = append(configReads, namespace+"/"+group+"/"+kind+"/"+name)
		if cfg, ok := configs[name]; ok && group == "bootstrap.cluster.x-k8s.io" && kind == "KubeadmConfig" {
			return cfg, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: group, Resource: "kubeadmconfigs"}, name)
	}
	// A tenant's Machine names another Machine's config and its data.
	thief := machine.DeepCopy()
	if err := unstructured.SetNestedField(thief.Object, "m2-config", "spec", "bootstrap", "configRef", "name"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		kind   capi.Kind
		owner  *unstructured.Unstructured
		meta   metav1.ObjectMeta
		wantOK bool
	}{
		{"controlled by the bootstrap config, as kubeadm's provider writes it", capi.Machine, machine,
			metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m1-config", "c1"), Labels: map[string]string{capi.ClusterNameLabel: "work"}}, true},
		{"controlled by the Machine", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "Machine", "m1", "m1-uid")}, true},
		{"labelled as bootstrap data by its writer", capi.Machine, machine, metav1.ObjectMeta{Labels: map[string]string{infrav1.LabelBootstrapData: "true"}}, true},
		{"a pool's own config", capi.MachinePool, pool, metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "p1-config", "c2")}, true},
		{"a plain Secret: the cluster's kubeconfig", capi.Machine, machine, metav1.ObjectMeta{Labels: map[string]string{capi.ClusterNameLabel: "work"}}, false},
		{"another machine's config", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m2-config", "c3")}, false},
		{"the config's name in another group", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: controlled("evil.example.com/v1", "KubeadmConfig", "m1-config", "c4")}, false},
		{"the config of another cluster's machine of that name", capi.Machine, machine,
			metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m1-config", "c5"), Labels: map[string]string{capi.ClusterNameLabel: "other"}}, false},
		{"a Machine of that name that is not this one", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "Machine", "m1", "old-uid")}, false},
		{"owned by the Machine, not controlled", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: owned("cluster.x-k8s.io/v1beta2", "Machine", "m1", "m1-uid")}, false},
		{"controlled by the Cluster (its kubeconfig)", capi.Machine, machine, metav1.ObjectMeta{OwnerReferences: controlled("cluster.x-k8s.io/v1beta2", "Cluster", "work", "w")}, false},
		{"a label value other than true", capi.Machine, machine, metav1.ObjectMeta{Labels: map[string]string{infrav1.LabelBootstrapData: "yes"}}, false},
		{"another Machine's config, named in this Machine's configRef", capi.Machine, thief,
			metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m2-config", "c9"), Labels: map[string]string{capi.ClusterNameLabel: "work"}}, false},
		{"a config of that name that is not the one that wrote the Secret", capi.Machine, machine,
			metav1.ObjectMeta{OwnerReferences: controlled("bootstrap.cluster.x-k8s.io/v1beta2", "KubeadmConfig", "m1-config", "old-c1")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			configReads = nil
			tc.meta.Name, tc.meta.Namespace = "boot", "ns"
			sec := &corev1.Secret{ObjectMeta: tc.meta, Data: map[string][]byte{"value": []byte("canary-admin-kubeconfig")}}
			inputs := map[string]any{}
			err := bootstrapInputs(context.Background(), fake.NewClientset(sec), readConfig, tc.kind, capi.ObjectOf(tc.owner), inputs)
			if tc.wantOK {
				if err != nil || inputs["captf_bootstrap_data"] != "canary-admin-kubeconfig" {
					t.Errorf("refused: %v (inputs %v)", err, inputs)
				}
				// A config's Secret is read only once the config is checked.
				if ref := metav1.GetControllerOf(&tc.meta); ref != nil && ref.Kind == "KubeadmConfig" && len(configReads) != 1 {
					t.Errorf("config reads %v, want the one configRef names", configReads)
				}
				return
			}
			ie, ok := err.(*InputError)
			if !ok || ie.Reason != ReasonBootstrapDataNotAllowed {
				t.Fatalf("err = %v, want %s", err, ReasonBootstrapDataNotAllowed)
			}
			if _, read := inputs["captf_bootstrap_data"]; read {
				t.Error("the data was read all the same")
			}
		})
	}
}

// TestBootstrapInputsAreSensitive: the bootstrap data and its format are
// kept out of logs and outputs.
func TestBootstrapInputsAreSensitive(t *testing.T) {
	in, err := Render(context.Background(), fake.NewClientset(), nil, "ns", infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "x"}},
		map[string]any{"captf_bootstrap_data": "#cloud-config", "captf_bootstrap_format": "cloud-config", "captf_name": "m"})
	if err != nil {
		t.Fatal(err)
	}
	if got := in.Sensitive; len(got) != 2 || got[0] != "captf_bootstrap_data" || got[1] != "captf_bootstrap_format" {
		t.Errorf("sensitive %v, want the bootstrap data and its format", got)
	}
}
