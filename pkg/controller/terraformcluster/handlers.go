package terraformcluster

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
)

func (c *Controller) addTerraformCluster(obj any) { c.enqueue(obj) }

// updateTerraformCluster skips the object's own status writes: only spec
// (generation) and metadata changes mean new work.
func (c *Controller) updateTerraformCluster(old, cur any) {
	o, n := old.(*infrav1.TerraformCluster), cur.(*infrav1.TerraformCluster)
	// A resync (same resourceVersion, every --sync-period) syncs: inputs
	// read from Secrets and ConfigMaps may have changed.
	if o.ResourceVersion != n.ResourceVersion && !workspace.MetadataChanged(o, n) {
		return
	}
	c.enqueue(cur)
}

func (c *Controller) deleteTerraformCluster(obj any) {
	if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
		c.expectations.Delete(key)
		c.queue.Add(key)
	}
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.ObjectToName(obj); err == nil {
		c.queue.Add(key)
	}
}

// handleCluster enqueues the TerraformCluster a Cluster points at: it may
// have been waiting for its owner, or the Cluster's pause changed.
func (c *Controller) handleCluster(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	ref, found, _ := unstructured.NestedStringMap(u.Object, "spec", "infrastructureRef")
	if !found || ref["kind"] != "TerraformCluster" || ref["apiGroup"] != infrav1.SchemeGroupVersion.Group {
		return
	}
	c.queue.Add(cache.ObjectName{Namespace: u.GetNamespace(), Name: ref["name"]})
}
