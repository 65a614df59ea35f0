// Package terraformcluster reconciles TerraformClusters: it applies their
// module through runner Jobs, reports what Cluster API reads, and destroys
// the infrastructure when the object goes.
package terraformcluster

import (
	"context"
	"time"

	batchv1informers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infrainformers "github.com/captf/captf/pkg/generated/informers/externalversions/infrastructure/v1alpha1"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// ControllerName names the controller in logs, events and metrics.
const ControllerName = "terraformcluster"

// Config is what the manager tells the controller.
type Config = workspace.Config

// Controller reconciles TerraformClusters.
type Controller struct {
	kube     kubernetes.Interface
	captf    versioned.Interface
	lister   infralisters.TerraformClusterLister
	clusters cache.GenericLister

	loop         *workspace.Loop
	queue        workqueue.TypedRateLimitingInterface[cache.ObjectName]
	expectations *util.Expectations
	written      *util.WrittenVersions
	engine       *workspace.Engine
	now          func() time.Time
}

// NewController wires the controller to its informers. clusters is an
// informer of Cluster API Clusters (unstructured).
func NewController(ctx context.Context, kube kubernetes.Interface, captf versioned.Interface,
	tcInformer infrainformers.TerraformClusterInformer, jobInformer batchv1informers.JobInformer,
	clusters cache.SharedIndexInformer, clusterLister cache.GenericLister, access *util.RunnerAccess, config Config) (*Controller, error) {
	logger := klog.FromContext(ctx)
	loop := workspace.NewLoop(ctx, ControllerName, kube)
	c := &Controller{
		kube: kube, captf: captf,
		lister:       tcInformer.Lister(),
		clusters:     clusterLister,
		loop:         loop,
		queue:        loop.Queue,
		expectations: util.NewExpectations(),
		written:      util.NewWrittenVersions(),
		now:          time.Now,
	}
	loop.Synced = []cache.InformerSynced{tcInformer.Informer().HasSynced, jobInformer.Informer().HasSynced, clusters.HasSynced}
	loop.Sync = c.sync
	c.engine = &workspace.Engine{Kube: kube, JobIndex: jobInformer.Informer().GetIndexer(), Recorder: loop.Recorder,
		Expectations: c.expectations, Access: access, GVK: gvk, RunnerImage: config.RunnerImage, StateBackups: config.StateBackups, DriftDefaultInterval: config.DriftDefaultInterval, MaxStateBytes: config.MaxStateBytes, Now: c.now}
	if err := c.engine.WatchStateSecrets(config.StateSecrets, loop); err != nil {
		return nil, err
	}
	if _, err := tcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addTerraformCluster,
		UpdateFunc: c.updateTerraformCluster,
		DeleteFunc: c.deleteTerraformCluster,
	}); err != nil {
		return nil, err
	}
	if _, err := jobInformer.Informer().AddEventHandler(workspace.JobEventHandler(logger, gvk.Kind, c.queue, c.expectations)); err != nil {
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
func (c *Controller) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }
