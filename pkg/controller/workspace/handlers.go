package workspace

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/runnerjob"
)

// JobEventHandler maps runner Job events to the object of kind that owns the
// Job: an added Job fulfils the create expectation, any change syncs it.
func JobEventHandler(logger klog.Logger, kind string, queue workqueue.TypedInterface[cache.ObjectName], expectations *controller.Expectations) cache.ResourceEventHandlerFuncs {
	handle := func(obj any, added bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		job, ok := obj.(*runnerjob.Cached)
		if !ok {
			return
		}
		owner := job.Controller
		if owner.Kind != kind || owner.APIVersion != infrav1.SchemeGroupVersion.String() {
			return
		}
		key := cache.ObjectName{Namespace: job.Namespace, Name: owner.Name}
		if added {
			expectations.JobObserved(key, job.Name)
		}
		logger.V(4).Info("Job changed", "job", klog.KObj(job), "object", key)
		queue.Add(key)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { handle(obj, true) },
		UpdateFunc: func(old, cur any) {
			if old.(*runnerjob.Cached).ResourceVersion != cur.(*runnerjob.Cached).ResourceVersion {
				handle(cur, false)
			}
		},
		DeleteFunc: func(obj any) { handle(obj, false) },
	}
}

// handlePlanPolicy enqueues the objects whose plan a plan policy denied:
// new rules judge them again. The others meet the rules at their next
// apply.
func (c *Controller[T]) handlePlanPolicy(any) {
	for _, obj := range c.objects.List() {
		o, ok := obj.(T)
		if !ok {
			continue
		}
		if cond := meta.FindStatusCondition(o.WorkspaceStatus().Conditions, infrav1.ConditionPlanDenied); cond != nil && cond.Status == metav1.ConditionTrue {
			c.enqueue(obj)
		}
	}
}
