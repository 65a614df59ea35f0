// Package terraformmachine reconciles TerraformMachines: Cluster API's
// infrastructure machines. It waits for what Cluster API says a machine
// waits for, applies the module with the bootstrap data, and reports the
// provider ID, addresses and failure domain Cluster API copies.
package terraformmachine

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
const ControllerName = "terraformmachine"

var gvk = infrav1.SchemeGroupVersion.WithKind("TerraformMachine")

// Config is what the manager tells the controller.
type Config = workspace.Config

// Informers are the shared informers the controller reads.
type Informers struct {
	TerraformMachines infrainformers.TerraformMachineInformer
	TerraformClusters infrainformers.TerraformClusterInformer
	Jobs              batchv1informers.JobInformer
	// Machines and Clusters are Cluster API's, unstructured.
	Machines, Clusters           cache.SharedIndexInformer
	MachineLister, ClusterLister cache.GenericLister
}

// Controller reconciles TerraformMachines.
type Controller struct {
	kube     kubernetes.Interface
	captf    versioned.Interface
	lister   infralisters.TerraformMachineLister
	tcs      infralisters.TerraformClusterLister
	machines cache.GenericLister
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
		lister:       inf.TerraformMachines.Lister(),
		tcs:          inf.TerraformClusters.Lister(),
		machines:     inf.MachineLister,
		clusters:     inf.ClusterLister,
		loop:         loop,
		queue:        loop.Queue,
		expectations: util.NewExpectations(),
		written:      util.NewWrittenVersions(),
	}
	loop.Synced = []cache.InformerSynced{inf.TerraformMachines.Informer().HasSynced, inf.TerraformClusters.Informer().HasSynced,
		inf.Jobs.Informer().HasSynced, inf.Machines.HasSynced, inf.Clusters.HasSynced}
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
		{inf.TerraformMachines.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: c.updateTerraformMachine, DeleteFunc: c.deleteTerraformMachine}},
		{inf.Jobs.Informer(), workspace.JobEventHandler(logger, gvk.Kind, c.queue, c.expectations)},
		{inf.Machines, cache.ResourceEventHandlerFuncs{AddFunc: c.handleMachine, UpdateFunc: func(_, cur any) { c.handleMachine(cur) }}},
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
