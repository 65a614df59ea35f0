package controller

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/captf/captf/pkg/metrics"
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
	clock       clock.PassiveClock
	broadcaster record.EventBroadcaster
	reconciles  *metrics.Reconciles
}

// eventCacheSize is how many events each cache of a loop's event
// correlator remembers.
const eventCacheSize = 512

// NewLoop makes the queue (named, so it has workqueue metrics) and the
// event recorder of controller name.
func NewLoop(ctx context.Context, name string, cc Context) *Loop {
	// The events' correlator (which counts an event repeated instead of
	// creating it again, and spam-filters per object) remembers 4,096
	// events in each of its three caches by default: 4.6 MB of the heap of
	// a manager of 2,000 objects with drift checks (its heap profile), more
	// at 10,000; an object's events are few and far apart.
	broadcaster := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventCacheSize}))
	return &Loop{
		Name:       name,
		reconciles: metrics.ReconcilesOf(name),
		Queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name}),
		Recorder:    broadcaster.NewRecorder(Scheme, corev1.EventSource{Component: "captf-manager"}),
		kube:        cc.Kube,
		clock:       cc.ClockOrReal(),
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
	start := l.clock.Now()
	err := l.Sync(ctx, key)
	seconds := l.clock.Since(start).Seconds()
	if err != nil {
		if apierrors.IsConflict(err) {
			// Someone wrote the object since the cache saw it: the next
			// sync reads their write. Nothing failed.
			klog.FromContext(ctx).V(4).Info("Update conflict, syncing again", "object", key)
			l.reconciles.Observe(seconds, metrics.SyncConflicted)
		} else {
			l.reconciles.Observe(seconds, metrics.SyncFailed)
			utilruntime.HandleErrorWithContext(ctx, err, "Sync failed", "controller", l.Name, "object", key)
		}
		l.Queue.AddRateLimited(key)
		return true
	}
	l.reconciles.Observe(seconds, metrics.SyncSucceeded)
	l.Queue.Forget(key)
	return true
}

// HasSynced tells whether every informer the workers wait for has synced.
func (l *Loop) HasSynced() bool {
	for _, synced := range l.Synced {
		if !synced() {
			return false
		}
	}
	return true
}
