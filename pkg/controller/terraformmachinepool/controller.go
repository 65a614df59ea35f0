// Package terraformmachinepool reconciles TerraformMachinePools: Cluster
// API's infrastructure machine pools. It applies the module with the pool's
// replicas and bootstrap data, and reports the instances' provider IDs and
// the replica count Cluster API copies.
package terraformmachinepool

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	batchv1informers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infrainformers "github.com/captf/captf/pkg/generated/informers/externalversions/infrastructure/v1alpha1"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// ControllerName names the controller in logs, events and metrics.
const ControllerName = "terraformmachinepool"

var gvk = infrav1.SchemeGroupVersion.WithKind("TerraformMachinePool")

// Config is what the manager's flags set.
type Config struct {
	RunnerImage  string
	StateBackups int
}

// Informers are the shared informers the controller reads.
type Informers struct {
	TerraformMachinePools infrainformers.TerraformMachinePoolInformer
	TerraformClusters     infrainformers.TerraformClusterInformer
	Jobs                  batchv1informers.JobInformer
	// MachinePools and Clusters are Cluster API's, unstructured.
	MachinePools, Clusters           cache.SharedIndexInformer
	MachinePoolLister, ClusterLister cache.GenericLister
}

// Controller reconciles TerraformMachinePools.
type Controller struct {
	kube     kubernetes.Interface
	captf    versioned.Interface
	lister   infralisters.TerraformMachinePoolLister
	tcs      infralisters.TerraformClusterLister
	pools    cache.GenericLister
	clusters cache.GenericLister
	synced   []cache.InformerSynced

	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	broadcaster  record.EventBroadcaster
	expectations *util.Expectations
	written      *util.WrittenVersions
	engine       *workspace.Engine
}

// NewController wires the controller to its informers.
func NewController(ctx context.Context, kube kubernetes.Interface, captf versioned.Interface, inf Informers, access *util.RunnerAccess, config Config) (*Controller, error) {
	logger := klog.FromContext(ctx)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	recorder := broadcaster.NewRecorder(util.Scheme, corev1.EventSource{Component: "captf-manager"})
	c := &Controller{
		kube: kube, captf: captf,
		lister:   inf.TerraformMachinePools.Lister(),
		tcs:      inf.TerraformClusters.Lister(),
		pools:    inf.MachinePoolLister,
		clusters: inf.ClusterLister,
		synced: []cache.InformerSynced{inf.TerraformMachinePools.Informer().HasSynced, inf.TerraformClusters.Informer().HasSynced,
			inf.Jobs.Informer().HasSynced, inf.MachinePools.HasSynced, inf.Clusters.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName}),
		broadcaster:  broadcaster,
		expectations: util.NewExpectations(),
		written:      util.NewWrittenVersions(),
	}
	c.engine = &workspace.Engine{Kube: kube, JobIndex: inf.Jobs.Informer().GetIndexer(), Recorder: recorder, Expectations: c.expectations,
		Access: access, GVK: gvk, RunnerImage: config.RunnerImage, StateBackups: config.StateBackups, Now: time.Now}
	handlers := []struct {
		informer cache.SharedIndexInformer
		h        cache.ResourceEventHandler
	}{
		{inf.TerraformMachinePools.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: c.updateTerraformMachinePool, DeleteFunc: c.deleteTerraformMachinePool}},
		{inf.Jobs.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.handleJob(logger, obj, true) },
			UpdateFunc: func(_, cur any) { c.handleJob(logger, cur, false) },
			DeleteFunc: func(obj any) { c.handleJob(logger, obj, false) },
		}},
		{inf.MachinePools, cache.ResourceEventHandlerFuncs{AddFunc: c.handleMachinePool, UpdateFunc: func(_, cur any) { c.handleMachinePool(cur) }}},
		{inf.Clusters, cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, cur any) { c.handleCluster(cur) }}},
		{inf.TerraformClusters.Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: c.handleTerraformCluster}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.h); err != nil {
			return nil, err
		}
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
	if err := c.sync(ctx, key); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing TerraformMachinePool failed", "terraformMachinePool", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}
