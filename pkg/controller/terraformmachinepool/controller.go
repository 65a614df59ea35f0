// Package terraformmachinepool reconciles TerraformMachinePools: Cluster
// API's infrastructure machine pools. It applies the module with the pool's
// replicas and bootstrap data, and reports the instances' provider IDs and
// the replica count Cluster API copies.
package terraformmachinepool

import (
	"context"
	"time"

	batchv1informers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
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

// Config is what the manager tells the controller.
type Config = workspace.Config

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

	loop         *workspace.Loop
	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	expectations *util.Expectations
	written      *util.WrittenVersions
	engine       *workspace.Engine
}

// NewController wires the controller to its informers.
func NewController(ctx context.Context, kube kubernetes.Interface, captf versioned.Interface, inf Informers, access *util.RunnerAccess, config Config) (*Controller, error) {
	logger := klog.FromContext(ctx)
	loop := workspace.NewLoop(ctx, ControllerName, kube)
	c := &Controller{
		kube: kube, captf: captf,
		lister:       inf.TerraformMachinePools.Lister(),
		tcs:          inf.TerraformClusters.Lister(),
		pools:        inf.MachinePoolLister,
		clusters:     inf.ClusterLister,
		loop:         loop,
		queue:        loop.Queue,
		expectations: util.NewExpectations(),
		written:      util.NewWrittenVersions(),
	}
	loop.Synced = []cache.InformerSynced{inf.TerraformMachinePools.Informer().HasSynced, inf.TerraformClusters.Informer().HasSynced,
		inf.Jobs.Informer().HasSynced, inf.MachinePools.HasSynced, inf.Clusters.HasSynced}
	loop.Sync = c.sync
	c.engine = &workspace.Engine{Kube: kube, JobIndex: inf.Jobs.Informer().GetIndexer(), Recorder: loop.Recorder, Expectations: c.expectations,
		Access: access, GVK: gvk, RunnerImage: config.RunnerImage, StateBackups: config.StateBackups, DriftDefaultInterval: config.DriftDefaultInterval, MaxStateBytes: config.MaxStateBytes, Now: time.Now}
	if err := c.engine.WatchStateSecrets(config.StateSecrets, loop); err != nil {
		return nil, err
	}
	handlers := []struct {
		informer cache.SharedIndexInformer
		h        cache.ResourceEventHandler
	}{
		{inf.TerraformMachinePools.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: c.updateTerraformMachinePool, DeleteFunc: c.deleteTerraformMachinePool}},
		{inf.Jobs.Informer(), workspace.JobEventHandler(logger, gvk.Kind, c.queue, c.expectations)},
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
func (c *Controller) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }
