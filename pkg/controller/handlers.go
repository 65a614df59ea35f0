package controller

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetadataChanged tells whether an update changed what a sync reads from
// metadata (a status-only write by the controller changes none of it).
func MetadataChanged(a, b metav1.Object) bool {
	return a.GetGeneration() != b.GetGeneration() ||
		!maps.Equal(a.GetAnnotations(), b.GetAnnotations()) || !maps.Equal(a.GetLabels(), b.GetLabels()) ||
		!slices.Equal(a.GetFinalizers(), b.GetFinalizers()) || (a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil) ||
		!slices.EqualFunc(a.GetOwnerReferences(), b.GetOwnerReferences(), func(x, y metav1.OwnerReference) bool { return x.UID == y.UID })
}
