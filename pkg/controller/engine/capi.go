package engine

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// clusterOf finds the Cluster of a machine or pool by its cluster-name label
// (Cluster API sets it; fallback names it before then), and its
// TerraformCluster when that is the Cluster's infrastructure.
func clusterOf(obj metav1.Object, fallback string, clusters cache.GenericLister, tcs infralisters.TerraformClusterLister) (*unstructured.Unstructured, *infrav1.TerraformCluster) {
	name := obj.GetLabels()[capi.ClusterNameLabel]
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
	ref, ok := capi.Cluster.InfrastructureRef(cluster, infrav1.SchemeGroupVersion.Group, "TerraformCluster")
	if !ok {
		return cluster, nil
	}
	tc, err := tcs.TerraformClusters(ref.Namespace).Get(ref.Name)
	if err != nil {
		return cluster, nil
	}
	return cluster, tc
}

// exports are a TerraformCluster's non-sensitive outputs, as machines and
// pools receive them.
func exports(tc *infrav1.TerraformCluster) map[string]json.RawMessage {
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

// bootstrapInputs reads a bootstrap data Secret (keys value and format, as
// Cluster API's bootstrap providers write it) into captf_bootstrap_data and
// captf_bootstrap_format.
func bootstrapInputs(ctx context.Context, kube kubernetes.Interface, namespace, secret string, inputs map[string]any) error {
	sec, err := kube.CoreV1().Secrets(namespace).Get(ctx, secret, metav1.GetOptions{})
	if err != nil {
		return &InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading bootstrap data Secret %s: %v", secret, err)}
	}
	format := string(sec.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	inputs["captf_bootstrap_data"] = string(sec.Data["value"])
	inputs["captf_bootstrap_format"] = format
	return nil
}
