package terraformmachinepool

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
)

func (c *Controller) enqueue(obj any) {
	if key, err := cache.ObjectToName(obj); err == nil {
		c.queue.Add(key)
	}
}

// updateTerraformMachinePool skips the object's own status writes.
func (c *Controller) updateTerraformMachinePool(old, cur any) {
	o, n := old.(*infrav1.TerraformMachinePool), cur.(*infrav1.TerraformMachinePool)
	if o.ResourceVersion != n.ResourceVersion && !workspace.MetadataChanged(o, n) {
		return
	}
	c.enqueue(cur)
}

func (c *Controller) deleteTerraformMachinePool(obj any) {
	if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
		c.expectations.Delete(key)
		c.written.Forget(key)
		c.queue.Add(key)
	}
}

// handleMachinePool enqueues the TerraformMachinePool a MachinePool points
// at: its replicas or bootstrap data may have changed.
func (c *Controller) handleMachinePool(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	ref, found, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "spec", "infrastructureRef")
	if found && ref["kind"] == gvk.Kind && ref["apiGroup"] == gvk.Group {
		c.queue.Add(cache.ObjectName{Namespace: u.GetNamespace(), Name: ref["name"]})
	}
}

// handleCluster enqueues a Cluster's pools: its infrastructure may be ready
// now, or its pause changed.
func (c *Controller) handleCluster(obj any) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		c.enqueueClusterMachines(u.GetNamespace(), u.GetName())
	}
}

// handleTerraformCluster enqueues the cluster's pools when its outputs (the
// pools' exports) or job defaults change: never gated.
func (c *Controller) handleTerraformCluster(old, cur any) {
	o, n := old.(*infrav1.TerraformCluster), cur.(*infrav1.TerraformCluster)
	if equality.Semantic.DeepEqual(o.Status.Outputs, n.Status.Outputs) && o.Generation == n.Generation {
		return
	}
	if name := n.Labels[workspace.ClusterNameLabel]; name != "" {
		c.enqueueClusterMachines(n.Namespace, name)
	}
}

func (c *Controller) enqueueClusterMachines(namespace, cluster string) {
	pools, err := c.lister.TerraformMachinePools(namespace).List(labels.SelectorFromSet(labels.Set{workspace.ClusterNameLabel: cluster}))
	if err != nil {
		return
	}
	for _, p := range pools {
		c.queue.Add(cache.MetaObjectToName(p))
	}
}
