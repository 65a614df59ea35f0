// Package capi holds the parts of Cluster API's contract CAPTF reads and
// writes: names of labels and annotations, the resources of the Cluster API
// kinds that own CAPTF's objects, and how to read them. CAPTF does not import
// Cluster API: its objects are unstructured here.
package capi

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Cluster API's names.
const (
	Group   = "cluster.x-k8s.io"
	Version = "v1beta2"
	// BootstrapGroup is the API group of Cluster API's bootstrap configs.
	BootstrapGroup      = "bootstrap.cluster.x-k8s.io"
	ClusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	ControlPlaneLabel   = "cluster.x-k8s.io/control-plane"
	ManagedByAnnotation = "cluster.x-k8s.io/managed-by"
	PausedAnnotation    = "cluster.x-k8s.io/paused"
	// BlockMoveAnnotation holds clusterctl move off an object while a Job
	// of its may still change its state.
	BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"
	// MoveLabel marks what clusterctl move copies besides the provider's
	// own kinds.
	MoveLabel = "clusterctl.cluster.x-k8s.io/move"
	// DryRunAnnotation marks the objects the topology controller writes in
	// dry-run to compute its patches.
	DryRunAnnotation = "topology.cluster.x-k8s.io/dry-run"
	// WatchFilterLabel: a provider started with --watch-filter=<value>
	// reconciles only the objects labelled with that value.
	WatchFilterLabel = "cluster.x-k8s.io/watch-filter"
	// ClonedFromNameAnnotation and ClonedFromGroupKindAnnotation name the
	// template an object was cloned from (by the MachineSet controller,
	// KubeadmControlPlane or the topology controller), in the object's
	// namespace; the group kind reads "Kind.group".
	ClonedFromNameAnnotation      = "cluster.x-k8s.io/cloned-from-name"
	ClonedFromGroupKindAnnotation = "cluster.x-k8s.io/cloned-from-groupkind"
)

// Kind is a Cluster API kind that owns an infrastructure object, and where
// its spec keeps what CAPTF reads.
type Kind struct {
	Kind     string
	Resource schema.GroupVersionResource
	// InfrastructureRefPath is the path of the reference to the
	// infrastructure object.
	InfrastructureRefPath []string
	// BootstrapDataSecretPath is the path of the bootstrap data Secret's
	// name; nil for a Cluster.
	BootstrapDataSecretPath []string
	// BootstrapConfigRefPath is the path of the reference to the bootstrap
	// config (KubeadmConfig and the like) whose provider writes the
	// bootstrap data Secret; nil for a Cluster.
	BootstrapConfigRefPath []string
	// ClusterNamePath is the path of the name of the owner's Cluster; nil
	// for a Cluster.
	ClusterNamePath []string
}

// The kinds that own CAPTF's objects.
var (
	Cluster = Kind{Kind: "Cluster", Resource: resource("clusters"), InfrastructureRefPath: []string{"spec", "infrastructureRef"}}
	Machine = Kind{Kind: "Machine", Resource: resource("machines"), InfrastructureRefPath: []string{"spec", "infrastructureRef"},
		BootstrapDataSecretPath: []string{"spec", "bootstrap", "dataSecretName"}, BootstrapConfigRefPath: []string{"spec", "bootstrap", "configRef"},
		ClusterNamePath: []string{"spec", "clusterName"}}
	MachinePool = Kind{Kind: "MachinePool", Resource: resource("machinepools"), InfrastructureRefPath: []string{"spec", "template", "spec", "infrastructureRef"},
		BootstrapDataSecretPath: []string{"spec", "template", "spec", "bootstrap", "dataSecretName"}, BootstrapConfigRefPath: []string{"spec", "template", "spec", "bootstrap", "configRef"},
		ClusterNamePath: []string{"spec", "clusterName"}}
)

func resource(name string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: Version, Resource: name}
}

// InfrastructureRef is the object of kind in group that o's
// infrastructureRef names, if it names one.
func (k Kind) InfrastructureRef(o *unstructured.Unstructured, group, kind string) (cache.ObjectName, bool) {
	ref, _, _ := unstructured.NestedStringMap(o.Object, k.InfrastructureRefPath...)
	if ref["kind"] != kind || ref["apiGroup"] != group || ref["name"] == "" {
		return cache.ObjectName{}, false
	}
	return cache.ObjectName{Namespace: o.GetNamespace(), Name: ref["name"]}, true
}

// BootstrapData is the name of o's bootstrap data Secret, "" until the
// bootstrap provider sets it.
func (k Kind) BootstrapData(o *unstructured.Unstructured) string {
	if k.BootstrapDataSecretPath == nil {
		return ""
	}
	name, _, _ := unstructured.NestedString(o.Object, k.BootstrapDataSecretPath...)
	return name
}

// BootstrapConfig is the group, kind and name of o's bootstrap config, if
// its spec names one.
func (k Kind) BootstrapConfig(o *unstructured.Unstructured) (group, kind, name string, ok bool) {
	if k.BootstrapConfigRefPath == nil {
		return "", "", "", false
	}
	ref, _, _ := unstructured.NestedStringMap(o.Object, k.BootstrapConfigRefPath...)
	if ref["kind"] == "" || ref["name"] == "" {
		return "", "", "", false
	}
	return ref["apiGroup"], ref["kind"], ref["name"], true
}

// ClusterName is the name of o's Cluster as o's spec gives it.
func (k Kind) ClusterName(o *unstructured.Unstructured) string {
	if k.ClusterNamePath == nil {
		return o.GetName()
	}
	name, _, _ := unstructured.NestedString(o.Object, k.ClusterNamePath...)
	return name
}

// OwnerOf is the owner of obj of this kind, looked up in lister and checked
// by UID.
func (k Kind) OwnerOf(obj metav1.Object, lister cache.GenericLister) *unstructured.Unstructured {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != k.Kind || !strings.HasPrefix(ref.APIVersion, Group+"/") {
			continue
		}
		o, err := lister.ByNamespace(obj.GetNamespace()).Get(ref.Name)
		if err != nil {
			continue
		}
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetUID() == ref.UID {
			return u
		}
	}
	return nil
}

// Paused tells whether reconciliation of obj (of kind) is paused, and why,
// in Cluster API's wording.
func Paused(cluster *unstructured.Unstructured, obj metav1.Object, kind string) (string, bool) {
	var why []string
	if cluster != nil {
		if paused, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused"); paused {
			why = append(why, "Cluster spec.paused is set to true")
		}
	}
	if _, ok := obj.GetAnnotations()[PausedAnnotation]; ok {
		why = append(why, fmt.Sprintf("%s has the %s annotation", kind, PausedAnnotation))
	}
	return strings.Join(why, ", "), len(why) > 0
}

// InfrastructureProvisioned tells whether the Cluster's infrastructure is.
func InfrastructureProvisioned(cluster *unstructured.Unstructured) bool {
	ok, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
	return ok
}

// ControlPlaneInitialized tells whether the Cluster's control plane is.
func ControlPlaneInitialized(cluster *unstructured.Unstructured) bool {
	ok, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "controlPlaneInitialized")
	return ok
}

// cachedFields are the fields of Cluster API objects CAPTF reads, besides
// their metadata: Trim keeps only these in the caches. A new read of
// another field must be added here, or it reads nothing.
var cachedFields = [][]string{
	{"spec", "paused"},
	{"spec", "infrastructureRef"},
	{"spec", "clusterName"},
	{"spec", "bootstrap", "dataSecretName"},
	{"spec", "bootstrap", "configRef"},
	{"spec", "version"},
	{"spec", "failureDomain"},
	{"spec", "replicas"},
	{"spec", "failureDomains"},
	{"spec", "template", "spec", "infrastructureRef"},
	{"spec", "template", "spec", "bootstrap", "dataSecretName"},
	{"spec", "template", "spec", "bootstrap", "configRef"},
	{"spec", "template", "spec", "version"},
	{"status", "initialization", "infrastructureProvisioned"},
	{"status", "initialization", "controlPlaneInitialized"},
}

// Trim is the informers' transform of Cluster API objects: their metadata
// without managedFields and the cachedFields, nothing of the rest (a
// Cluster's or Machine's conditions are most of it, and a fleet has
// thousands).
func Trim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	trimmed := map[string]any{"apiVersion": u.Object["apiVersion"], "kind": u.Object["kind"], "metadata": u.Object["metadata"]}
	for _, path := range cachedFields {
		if v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...); found && err == nil {
			setNoCopy(trimmed, v, path)
		}
	}
	u.Object = trimmed
	return u, nil
}

// CachedChanged tells whether an update of a trimmed object changed what
// CAPTF reads of it: the cachedFields, labels, annotations (pause) or its
// deletion. Cluster API updates a Cluster's and a Machine's status many
// times while machines come up; what Trim leaves of those updates is a new
// resourceVersion, and syncing every machine of a cluster for each would
// cost a read of every machine's inputs.
func CachedChanged(old, cur *unstructured.Unstructured) bool {
	for _, key := range []string{"spec", "status"} {
		if !equality.Semantic.DeepEqual(old.Object[key], cur.Object[key]) {
			return true
		}
	}
	return !equality.Semantic.DeepEqual(old.GetLabels(), cur.GetLabels()) ||
		!equality.Semantic.DeepEqual(old.GetAnnotations(), cur.GetAnnotations()) ||
		!equality.Semantic.DeepEqual(old.GetDeletionTimestamp(), cur.GetDeletionTimestamp())
}

// setNoCopy sets path in m to v, moved, not copied: the informer's object
// it comes from is dropped.
func setNoCopy(m map[string]any, v any, path []string) {
	for _, key := range path[:len(path)-1] {
		next, ok := m[key].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[key] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// MachineVersion is a Machine's Kubernetes version.
func MachineVersion(m *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(m.Object, "spec", "version")
	return v
}

// MachineFailureDomain is the failure domain a Machine is placed in.
func MachineFailureDomain(m *unstructured.Unstructured) string {
	fd, _, _ := unstructured.NestedString(m.Object, "spec", "failureDomain")
	return fd
}

// PoolReplicas is a MachinePool's replicas, 1 (Cluster API's default)
// when unset.
func PoolReplicas(mp *unstructured.Unstructured) int64 {
	replicas, found, _ := unstructured.NestedInt64(mp.Object, "spec", "replicas")
	if !found {
		return 1
	}
	return replicas
}

// PoolVersion is a MachinePool's Kubernetes version.
func PoolVersion(mp *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(mp.Object, "spec", "template", "spec", "version")
	return v
}

// PoolFailureDomains are the failure domains a MachinePool spreads over.
func PoolFailureDomains(mp *unstructured.Unstructured) []string {
	domains, _, _ := unstructured.NestedStringSlice(mp.Object, "spec", "failureDomains")
	return append([]string{}, domains...)
}

// IsControlPlane tells whether o (a Machine) is a control-plane machine.
func IsControlPlane(o metav1.Object) bool {
	_, ok := o.GetLabels()[ControlPlaneLabel]
	return ok
}
