// Package terraformcluster reconciles TerraformClusters: it applies their
// module through runner Jobs, reports what Cluster API reads, and destroys
// the infrastructure when the object goes.
package terraformcluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	batchv1informers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infrainformers "github.com/captf/captf/pkg/generated/informers/externalversions/infrastructure/v1alpha1"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// ControllerName names the controller in logs, events and metrics.
const ControllerName = "terraformcluster"

// Config is what the manager's flags set.
type Config struct {
	RunnerImage  string
	StateBackups int
	SyncPeriod   time.Duration
}

// Controller reconciles TerraformClusters.
type Controller struct {
	kube     kubernetes.Interface
	captf    versioned.Interface
	lister   infralisters.TerraformClusterLister
	clusters cache.GenericLister
	synced   []cache.InformerSynced

	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder     record.EventRecorder
	broadcaster  record.EventBroadcaster
	expectations *util.Expectations
	written      *util.WrittenVersions
	engine       *workspace.Engine
	now          func() time.Time

	// syncHandler is sync, replaced in tests.
	syncHandler func(ctx context.Context, key cache.ObjectName) error
}

// NewController wires the controller to its informers. clusters is an
// informer of Cluster API Clusters (unstructured).
func NewController(ctx context.Context, kube kubernetes.Interface, captf versioned.Interface,
	tcInformer infrainformers.TerraformClusterInformer, jobInformer batchv1informers.JobInformer,
	clusters cache.SharedIndexInformer, clusterLister cache.GenericLister, access *util.RunnerAccess, config Config) (*Controller, error) {
	logger := klog.FromContext(ctx)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	c := &Controller{
		kube: kube, captf: captf,
		lister:   tcInformer.Lister(),
		clusters: clusterLister,
		synced:   []cache.InformerSynced{tcInformer.Informer().HasSynced, jobInformer.Informer().HasSynced, clusters.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName}),
		broadcaster:  broadcaster,
		recorder:     broadcaster.NewRecorder(util.Scheme, corev1.EventSource{Component: "captf-manager"}),
		expectations: util.NewExpectations(),
		written:      util.NewWrittenVersions(),
		now:          time.Now,
	}
	c.engine = &workspace.Engine{Kube: kube, JobIndex: jobInformer.Informer().GetIndexer(), Recorder: c.recorder,
		Expectations: c.expectations, Access: access, GVK: gvk, RunnerImage: config.RunnerImage, StateBackups: config.StateBackups, Now: c.now}
	c.syncHandler = c.sync
	if _, err := tcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addTerraformCluster,
		UpdateFunc: c.updateTerraformCluster,
		DeleteFunc: c.deleteTerraformCluster,
	}); err != nil {
		return nil, err
	}
	if _, err := jobInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.handleJob(logger, obj, true) },
		UpdateFunc: func(old, cur any) { c.updateJob(logger, old, cur) },
		DeleteFunc: func(obj any) { c.handleJob(logger, obj, false) },
	}); err != nil {
		return nil, err
	}
	if _, err := clusters.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.handleCluster,
		UpdateFunc: func(_, cur any) { c.handleCluster(cur) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrashWithContext(ctx)
	c.broadcaster.StartStructuredLogging(3)
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kube.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller")
	defer logger.Info("Shutting down controller")
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return
	}
	var wg sync.WaitGroup
	defer func() {
		c.queue.ShutDown()
		wg.Wait()
	}()
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
}

func (c *Controller) worker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.syncHandler(ctx, key)
	if err == nil {
		c.queue.Forget(key)
		return true
	}
	utilruntime.HandleErrorWithContext(ctx, err, "Syncing TerraformCluster failed", "terraformCluster", key)
	c.queue.AddRateLimited(key)
	return true
}

func (c *Controller) String() string { return fmt.Sprintf("%s controller", ControllerName) }
