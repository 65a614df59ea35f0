package workspace

import (
	"context"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
)

// Loop is a controller's named, rate-limited queue, its workers and its
// event broadcaster: what every CAPTF controller runs the same way.
type Loop struct {
	Name     string
	Queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	Recorder record.EventRecorder
	// Synced are the informers the workers wait for.
	Synced []cache.InformerSynced
	// Sync reconciles one object; an error retries it with backoff.
	Sync func(ctx context.Context, key cache.ObjectName) error

	kube        kubernetes.Interface
	broadcaster record.EventBroadcaster
}

// NewLoop makes the queue (named, so it has workqueue metrics) and the
// event recorder of controller name.
func NewLoop(ctx context.Context, name string, kube kubernetes.Interface) *Loop {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	return &Loop{
		Name: name,
		Queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name}),
		Recorder:    broadcaster.NewRecorder(util.Scheme, corev1.EventSource{Component: "captf-manager"}),
		kube:        kube,
		broadcaster: broadcaster,
	}
}

// Run waits for the informers, then runs workers until ctx ends.
func (l *Loop) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	l.broadcaster.StartStructuredLogging(3)
	l.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: l.kube.CoreV1().Events("")})
	defer l.broadcaster.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller")
	defer logger.Info("Shutting down controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, l.Synced...) {
		return
	}
	var wg sync.WaitGroup
	defer func() {
		l.Queue.ShutDown()
		wg.Wait()
	}()
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for l.processNextWorkItem(ctx) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
}

func (l *Loop) processNextWorkItem(ctx context.Context) bool {
	key, quit := l.Queue.Get()
	if quit {
		return false
	}
	defer l.Queue.Done(key)
	if err := l.Sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed", "controller", l.Name, "object", key)
		l.Queue.AddRateLimited(key)
		return true
	}
	l.Queue.Forget(key)
	return true
}

// JobEventHandler maps runner Job events to the object of kind that owns the
// Job: an added Job fulfils the create expectation, any change syncs it.
func JobEventHandler(logger klog.Logger, kind string, queue workqueue.TypedInterface[cache.ObjectName], expectations *util.Expectations) cache.ResourceEventHandlerFuncs {
	handle := func(obj any, added bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		owner := metav1.GetControllerOf(job)
		if owner == nil || owner.Kind != kind || owner.APIVersion != infrav1.SchemeGroupVersion.String() {
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
			if old.(*batchv1.Job).ResourceVersion != cur.(*batchv1.Job).ResourceVersion {
				handle(cur, false)
			}
		},
		DeleteFunc: func(obj any) { handle(obj, false) },
	}
}
