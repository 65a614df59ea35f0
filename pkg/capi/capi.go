// Package capi holds the parts of Cluster API's contract CAPTF reads and
// writes: names of labels and annotations, the resources of the Cluster API
// kinds that own CAPTF's objects, and how to read them. CAPTF does not import
// Cluster API: its objects come unstructured, and are read into an Object.
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
func (k Kind) InfrastructureRef(o *Object, group, kind string) (cache.ObjectName, bool) {
	ref := o.Spec.InfrastructureRef
	if ref == nil || ref.Kind != kind || ref.APIGroup != group || ref.Name == "" {
		return cache.ObjectName{}, false
	}
	return cache.ObjectName{Namespace: o.Namespace, Name: ref.Name}, true
}

// BootstrapData is the name of o's bootstrap data Secret, "" until the
// bootstrap provider sets it.
func (k Kind) BootstrapData(o *Object) string { return o.Spec.DataSecretName }

// BootstrapConfig is the group, kind and name of o's bootstrap config, if
// its spec names one.
func (k Kind) BootstrapConfig(o *Object) (group, kind, name string, ok bool) {
	ref := o.Spec.BootstrapConfigRef
	if ref == nil || ref.Kind == "" || ref.Name == "" {
		return "", "", "", false
	}
	return ref.APIGroup, ref.Kind, ref.Name, true
}

// ClusterName is the name of o's Cluster as o's spec gives it.
func (k Kind) ClusterName(o *Object) string {
	if k.ClusterNamePath == nil {
		return o.Name
	}
	return o.Spec.ClusterName
}

// OwnerOf is the owner of obj (of objKind in group objGroup) of this kind,
// looked up in lister and checked by UID and by its infrastructureRef,
// which must name obj: an owner reference is anyone's to write, and the
// owner's bootstrap data (a control plane's keys), Cluster and defaults go
// only to the object Cluster API made for it.
func (k Kind) OwnerOf(obj metav1.Object, objGroup, objKind string, lister cache.GenericLister) *Object {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != k.Kind || !strings.HasPrefix(ref.APIVersion, Group+"/") {
			continue
		}
		o, err := lister.ByNamespace(obj.GetNamespace()).Get(ref.Name)
		if err != nil {
			continue
		}
		owner := ObjectOf(o)
		if owner == nil || owner.Kind != k.Kind || owner.UID != ref.UID {
			continue
		}
		if named, ok := k.InfrastructureRef(owner, objGroup, objKind); ok && named.Name == obj.GetName() {
			return owner
		}
	}
	return nil
}

// Paused tells whether reconciliation of obj (of kind) is paused, and why,
// in Cluster API's wording.
func Paused(cluster *Object, obj metav1.Object, kind string) (string, bool) {
	var why []string
	if cluster != nil && cluster.Spec.Paused {
		why = append(why, "Cluster spec.paused is set to true")
	}
	if _, ok := obj.GetAnnotations()[PausedAnnotation]; ok {
		why = append(why, fmt.Sprintf("%s has the %s annotation", kind, PausedAnnotation))
	}
	return strings.Join(why, ", "), len(why) > 0
}

// InfrastructureProvisioned tells whether the Cluster's infrastructure is.
func InfrastructureProvisioned(cluster *Object) bool { return cluster.Status.InfrastructureProvisioned }

// ControlPlaneInitialized tells whether the Cluster's control plane is.
func ControlPlaneInitialized(cluster *Object) bool { return cluster.Status.ControlPlaneInitialized }

// Trim is the transform of the informer of k's objects: an unstructured
// Cluster, Machine or MachinePool becomes the Object CAPTF reads of it,
// nothing of the rest (a Cluster's or Machine's conditions and metadata
// are most of it, and a fleet has thousands).
func (k Kind) Trim(obj any) any {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return k.read(u)
	}
	return obj
}

// CachedChanged tells whether an update of a trimmed object changed what
// CAPTF reads of it: its spec and status fields, the control-plane label or
// its deletion. Cluster API updates a Cluster's and a Machine's status many
// times while machines come up; what Trim leaves of those updates is a new
// resourceVersion, and syncing every machine of a cluster for each would
// cost a read of every machine's inputs.
func CachedChanged(old, cur *Object) bool {
	return !equality.Semantic.DeepEqual(old.Spec, cur.Spec) || old.Status != cur.Status ||
		!equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
		!equality.Semantic.DeepEqual(old.DeletionTimestamp, cur.DeletionTimestamp)
}

// MachineVersion is a Machine's Kubernetes version.
func MachineVersion(m *Object) string { return m.Spec.Version }

// MachineFailureDomain is the failure domain a Machine is placed in.
func MachineFailureDomain(m *Object) string { return m.Spec.FailureDomain }

// PoolReplicas is a MachinePool's replicas, 1 (Cluster API's default)
// when unset.
func PoolReplicas(mp *Object) int64 {
	if mp.Spec.Replicas == nil {
		return 1
	}
	return *mp.Spec.Replicas
}

// PoolVersion is a MachinePool's Kubernetes version.
func PoolVersion(mp *Object) string { return mp.Spec.Version }

// PoolFailureDomains are the failure domains a MachinePool spreads over.
func PoolFailureDomains(mp *Object) []string {
	return append([]string{}, mp.Spec.FailureDomains...)
}

// IsControlPlane tells whether o (a Machine) is a control-plane machine.
func IsControlPlane(o metav1.Object) bool {
	_, ok := o.GetLabels()[ControlPlaneLabel]
	return ok
}
