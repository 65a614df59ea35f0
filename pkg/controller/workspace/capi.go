package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// Cluster API names, kept here: CAPTF does not import Cluster API.
const (
	CAPIGroup           = "cluster.x-k8s.io"
	ClusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	ControlPlaneLabel   = "cluster.x-k8s.io/control-plane"
	ManagedByAnnotation = "cluster.x-k8s.io/managed-by"
	// BlockMoveAnnotation holds clusterctl move off an object while a Job
	// of its may still change its state.
	BlockMoveAnnotation = "clusterctl.cluster.x-k8s.io/block-move"
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

// ClusterOf finds the Cluster of a machine or pool by its cluster-name label
// (Cluster API sets it; fallback names it before then), and its
// TerraformCluster when that is the Cluster's infrastructure.
func ClusterOf(obj metav1.Object, fallback string, clusters cache.GenericLister, tcs infralisters.TerraformClusterLister) (*unstructured.Unstructured, *infrav1.TerraformCluster) {
	name := obj.GetLabels()[ClusterNameLabel]
	if name == "" {
		name = fallback
	}
	if name == "" {
		return nil, nil
	}
	o, err := clusters.ByNamespace(obj.GetNamespace()).Get(name)
	if err != nil {
		return nil, nil
	}
	cluster, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	ref, _, _ := unstructured.NestedStringMap(cluster.Object, "spec", "infrastructureRef")
	if ref["kind"] != "TerraformCluster" || ref["apiGroup"] != infrav1.SchemeGroupVersion.Group {
		return cluster, nil
	}
	tc, err := tcs.TerraformClusters(obj.GetNamespace()).Get(ref["name"])
	if err != nil {
		return cluster, nil
	}
	return cluster, tc
}

// Exports are a TerraformCluster's non-sensitive outputs, as machines and
// pools receive them.
func Exports(tc *infrav1.TerraformCluster) map[string]json.RawMessage {
	exports := map[string]json.RawMessage{}
	if tc != nil {
		for k, v := range tc.Status.Outputs {
			exports[k] = v.Raw
		}
	}
	return exports
}

// ReasonBootstrapDataUnavailable: the bootstrap data Secret cannot be read.
const ReasonBootstrapDataUnavailable = "BootstrapDataUnavailable"

// BootstrapInputs reads a bootstrap data Secret (keys value and format, as
// Cluster API's bootstrap providers write it) into captf_bootstrap_data and
// captf_bootstrap_format.
func BootstrapInputs(ctx context.Context, kube kubernetes.Interface, namespace, secret string, inputs map[string]any) error {
	sec, err := kube.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return &util.InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading bootstrap data Secret %s: %v", secret, err)}
	}
	format := string(sec.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	inputs["captf_bootstrap_data"] = string(sec.Data["value"])
	inputs["captf_bootstrap_format"] = format
	return nil
}

// InfrastructureProvisioned tells whether the Cluster's infrastructure is.
func InfrastructureProvisioned(cluster *unstructured.Unstructured) bool {
	ok, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
	return ok
}
