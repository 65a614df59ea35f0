package terraformcluster

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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

// handleJob maps a runner Job to its TerraformCluster.
func (c *Controller) handleJob(logger klog.Logger, obj any, added bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	owner := metav1.GetControllerOf(job)
	if owner == nil || owner.Kind != "TerraformCluster" || owner.APIVersion != infrav1.SchemeGroupVersion.String() {
		return
	}
	key := cache.ObjectName{Namespace: job.Namespace, Name: owner.Name}
	if added {
		c.expectations.JobObserved(key, job.Name)
	}
	logger.V(4).Info("Job changed", "job", klog.KObj(job), "terraformCluster", key)
	c.queue.Add(key)
}

func (c *Controller) updateJob(logger klog.Logger, old, cur any) {
	if old.(*batchv1.Job).ResourceVersion == cur.(*batchv1.Job).ResourceVersion {
		return
	}
	c.handleJob(logger, cur, false)
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
