package capi

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestTrim: what CAPTF reads of a Cluster, Machine or MachinePool reads the
// same after Trim; their metadata stays, the rest (conditions,
// managedFields) goes.
func TestTrim(t *testing.T) {
	conditions := []any{map[string]any{"type": "Available", "status": "True", "message": "a long message"}}
	meta := func(name string) map[string]any {
		return map[string]any{"name": name, "namespace": "ns", "uid": "u-" + name,
			"labels": map[string]any{ClusterNameLabel: "c", ControlPlaneLabel: ""}, "annotations": map[string]any{PausedAnnotation: ""},
			"managedFields": []any{map[string]any{"manager": "capi"}}}
	}
	ref := map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformMachine", "name": "m"}
	objs := map[string]*unstructured.Unstructured{
		"cluster": {Object: map[string]any{"apiVersion": Group + "/" + Version, "kind": "Cluster", "metadata": meta("c"),
			"spec":   map[string]any{"paused": true, "infrastructureRef": ref, "controlPlaneEndpoint": map[string]any{"host": "h"}},
			"status": map[string]any{"initialization": map[string]any{"infrastructureProvisioned": true, "controlPlaneInitialized": true}, "conditions": conditions}}},
		"machine": {Object: map[string]any{"apiVersion": Group + "/" + Version, "kind": "Machine", "metadata": meta("m"),
			"spec": map[string]any{"clusterName": "c", "version": "v1.34.0", "failureDomain": "a", "infrastructureRef": ref,
				"bootstrap":       map[string]any{"dataSecretName": "boot", "configRef": map[string]any{"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "x"}},
				"minReadySeconds": int64(5)},
			"status": map[string]any{"conditions": conditions, "nodeRef": map[string]any{"name": "n"}}}},
		"pool": {Object: map[string]any{"apiVersion": Group + "/" + Version, "kind": "MachinePool", "metadata": meta("p"),
			"spec": map[string]any{"clusterName": "c", "replicas": int64(3), "failureDomains": []any{"a", "b"},
				"template": map[string]any{"spec": map[string]any{"version": "v1.34.0", "infrastructureRef": ref,
					"bootstrap": map[string]any{"dataSecretName": "boot"}}}},
			"status": map[string]any{"conditions": conditions}}},
	}
	read := func(u *unstructured.Unstructured) []any {
		k := map[string]Kind{"Cluster": Cluster, "Machine": Machine, "MachinePool": MachinePool}[u.GetKind()]
		ref, ok := k.InfrastructureRef(u, "infrastructure.cluster.x-k8s.io", "TerraformMachine")
		why, paused := Paused(u, u, u.GetKind())
		cfgGroup, cfgKind, cfgName, cfgOK := k.BootstrapConfig(u)
		return []any{ref, ok, k.BootstrapData(u), cfgGroup, cfgKind, cfgName, cfgOK, k.ClusterName(u), why, paused, InfrastructureProvisioned(u), ControlPlaneInitialized(u),
			IsControlPlane(u), MachineVersion(u), MachineFailureDomain(u), PoolReplicas(u), PoolVersion(u), PoolFailureDomains(u),
			u.GetName(), u.GetNamespace(), u.GetUID(), u.GetLabels(), u.GetAnnotations()}
	}
	for name, u := range objs {
		t.Run(name, func(t *testing.T) {
			want := read(u.DeepCopy())
			got, err := Trim(u.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			trimmed := got.(*unstructured.Unstructured)
			if r := read(trimmed); !reflect.DeepEqual(r, want) {
				t.Errorf("reads after Trim:\n%v\nwant\n%v", r, want)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(trimmed.Object, "status", "conditions"); found {
				t.Error("conditions kept")
			}
			if len(trimmed.GetManagedFields()) > 0 {
				t.Error("managedFields kept")
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(trimmed.Object, "spec", "minReadySeconds"); found {
				t.Error("an unread field kept")
			}
		})
	}
}

// TestCachedChanged: after Trim, an update that only moved what CAPTF does
// not read (a Cluster's conditions, its resourceVersion) is no change; one
// of a field it reads, a label, an annotation or the deletion is.
func TestCachedChanged(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "resourceVersion": "1"},
			"spec":     map[string]any{"paused": false},
			"status": map[string]any{"initialization": map[string]any{"infrastructureProvisioned": true},
				"conditions": []any{map[string]any{"type": "Available", "status": "False"}}},
		}}
	}
	tests := map[string]struct {
		mutate func(u *unstructured.Unstructured)
		want   bool
	}{
		"conditions and resourceVersion only": {mutate: func(u *unstructured.Unstructured) {
			u.SetResourceVersion("2")
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Available", "status": "True"}}, "status", "conditions")
		}},
		"paused": {mutate: func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, true, "spec", "paused") }, want: true},
		"control plane initialized": {mutate: func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, true, "status", "initialization", "controlPlaneInitialized")
		}, want: true},
		"paused annotation": {mutate: func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"cluster.x-k8s.io/paused": ""}) }, want: true},
		"label":             {mutate: func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "b"}) }, want: true},
		"deleted": {mutate: func(u *unstructured.Unstructured) {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old, _ := Trim(base())
			cur := base()
			tc.mutate(cur)
			trimmed, _ := Trim(cur)
			if got := CachedChanged(old.(*unstructured.Unstructured), trimmed.(*unstructured.Unstructured)); got != tc.want {
				t.Errorf("CachedChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
