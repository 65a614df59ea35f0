package terraformcluster

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Cluster API names, kept here: CAPTF does not import Cluster API.
const (
	clusterv1Group     = "cluster.x-k8s.io"
	clusterv1ManagedBy = "cluster.x-k8s.io/managed-by"
	clusterv1Paused    = "cluster.x-k8s.io/paused"
)

// isPaused tells whether reconciliation is paused, and why, in Cluster API's
// wording.
func isPaused(cluster *unstructured.Unstructured, tc *infrav1.TerraformCluster) (string, bool) {
	var why []string
	if cluster != nil {
		if paused, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused"); paused {
			why = append(why, "Cluster spec.paused is set to true")
		}
	}
	if _, ok := tc.Annotations[clusterv1Paused]; ok {
		why = append(why, "TerraformCluster has the cluster.x-k8s.io/paused annotation")
	}
	if len(why) == 0 {
		return "", false
	}
	msg := why[0]
	if len(why) == 2 {
		msg += ", " + why[1]
	}
	return msg, true
}
