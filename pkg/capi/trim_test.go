package capi

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// TestTrim: what CAPTF reads of a Cluster, Machine or MachinePool, each
// from where its kind keeps it, is in the Object Trim makes of it; their
// metadata stays, managedFields go.
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
	read := func(o *Object) []any {
		k, _ := KindOf(o.Kind)
		ref, ok := k.InfrastructureRef(o, "infrastructure.cluster.x-k8s.io", "TerraformMachine")
		why, paused := Paused(o, o, o.Kind)
		cfgGroup, cfgKind, cfgName, cfgOK := k.BootstrapConfig(o)
		return []any{ref, ok, k.BootstrapData(o), cfgGroup, cfgKind, cfgName, cfgOK, k.ClusterName(o), why, paused, InfrastructureProvisioned(o), ControlPlaneInitialized(o),
			IsControlPlane(o), MachineVersion(o), MachineFailureDomain(o), PoolReplicas(o), PoolVersion(o), PoolFailureDomains(o),
			o.GetName(), o.GetNamespace(), o.GetUID(), o.GetLabels(), o.GetAnnotations()}
	}
	// Of the labels only the control plane's is read; of the annotations
	// none (the pause CAPTF heeds is its own objects').
	labels, annotations := map[string]string{ControlPlaneLabel: ""}, map[string]string(nil)
	wantRef := cache.ObjectName{Namespace: "ns", Name: "m"}
	// What each kind's fields read as, where that kind keeps them.
	want := map[string][]any{
		"cluster": {wantRef, true, "", "", "", "", false, "c", "Cluster spec.paused is set to true", true, true, true, true, "", "", int64(1), "", []string{}, "c", "ns", types.UID("u-c"), labels, annotations},
		"machine": {wantRef, true, "boot", "bootstrap.cluster.x-k8s.io", "KubeadmConfig", "x", true, "c", "", false, false, false,
			true, "v1.34.0", "a", int64(1), "v1.34.0", []string{}, "m", "ns", types.UID("u-m"), labels, annotations},
		"pool": {wantRef, true, "boot", "", "", "", false, "c", "", false, false, false,
			true, "v1.34.0", "", int64(3), "v1.34.0", []string{"a", "b"}, "p", "ns", types.UID("u-p"), labels, annotations},
	}
	for name, u := range objs {
		t.Run(name, func(t *testing.T) {
			k, _ := KindOf(u.GetKind())
			got, ok := k.Trim(u.DeepCopy()).(*Object)
			if !ok {
				t.Fatalf("Trim made a %T", k.Trim(u.DeepCopy()))
			}
			if r := read(got); !reflect.DeepEqual(r, want[name]) {
				t.Errorf("reads after Trim:\n%#v\nwant\n%#v", r, want[name])
			}
			if len(got.GetManagedFields()) > 0 {
				t.Error("managedFields kept")
			}
			// A copy shares nothing: the controllers may change theirs.
			cp := got.DeepCopyObject().(*Object)
			if cp.Labels != nil {
				cp.Labels["x"] = "y"
			}
			cp.Spec.InfrastructureRef.Name = "other"
			if r := read(got); !reflect.DeepEqual(r, want[name]) {
				t.Errorf("a change of a copy changed the cached object: %v", r)
			}
		})
	}
	if got := ObjectOf(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}); got != nil {
		t.Errorf("ObjectOf took a ConfigMap for a Cluster API object: %#v", got)
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
		// The pause CAPTF heeds is on its own objects, not their owners.
		"paused annotation":   {mutate: func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"cluster.x-k8s.io/paused": ""}) }},
		"another label":       {mutate: func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "b"}) }},
		"control-plane label": {mutate: func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{ControlPlaneLabel: ""}) }, want: true},
		"deleted": {mutate: func(u *unstructured.Unstructured) {
			now := metav1.Now()
			u.SetDeletionTimestamp(&now)
		}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			old := Cluster.Trim(base()).(*Object)
			cur := base()
			tc.mutate(cur)
			if got := CachedChanged(old, Cluster.Trim(cur).(*Object)); got != tc.want {
				t.Errorf("CachedChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
