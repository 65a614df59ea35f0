package workspace

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// Cluster API names, kept here: CAPTF does not import Cluster API.
const (
	CAPIGroup           = "cluster.x-k8s.io"
	ClusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	ControlPlaneLabel   = "cluster.x-k8s.io/control-plane"
	ManagedByAnnotation = "cluster.x-k8s.io/managed-by"
	PausedAnnotation    = "cluster.x-k8s.io/paused"
)

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

// MetadataChanged tells whether an update changed what a sync reads from
// metadata (a status-only write by the controller changes none of it).
func MetadataChanged(a, b metav1.Object) bool {
	return a.GetGeneration() != b.GetGeneration() ||
		!maps.Equal(a.GetAnnotations(), b.GetAnnotations()) || !maps.Equal(a.GetLabels(), b.GetLabels()) ||
		!slices.Equal(a.GetFinalizers(), b.GetFinalizers()) || (a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil) ||
		!slices.EqualFunc(a.GetOwnerReferences(), b.GetOwnerReferences(), func(x, y metav1.OwnerReference) bool { return x.UID == y.UID })
}

// OwnerOfKind is the owner of obj of a Cluster API kind, looked up in lister
// and checked by UID.
func OwnerOfKind(obj metav1.Object, kind string, lister cache.GenericNamespaceLister) *unstructured.Unstructured {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.Kind != kind || !strings.HasPrefix(ref.APIVersion, CAPIGroup+"/") {
			continue
		}
		o, err := lister.Get(ref.Name)
		if err != nil {
			continue
		}
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetUID() == ref.UID {
			return u
		}
	}
	return nil
}
