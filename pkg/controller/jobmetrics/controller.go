// Package jobmetrics counts what runner Jobs did, once per Job, when the
// leader sees one finish: failures and their reasons, durations, queue
// times, and what the runner reported (lock waits, force unlocks, backups,
// unusable states). Gauges are not kept here: they are computed from the
// caches at each scrape (workspace.Collector).
package jobmetrics

import (
	"context"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/runnerjob"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "jobmetrics"

// Controller observes finished runner Jobs.
type Controller struct {
	results resultReader
	jobs    cache.Indexer // of runnerjob.Cached
	loop    *controller.Loop
	// finished keeps each Job seen finishing until it is counted: a clean
	// drift check's Job may be deleted before (workspace cleanupHistory).
	finished sync.Map // cache.ObjectName → *runnerjob.Cached
}

// NewController watches the runner Jobs the manager's factory caches, and
// reads their results with results.
func NewController(ctx context.Context, cc controller.Context, results *runnerjob.Results) (*Controller, error) {
	jobs := cc.KubeInformers.Batch().V1().Jobs()
	loop := controller.NewLoop(ctx, ControllerName, cc)
	if results == nil {
		results = &runnerjob.Results{Kube: cc.Kube}
	}
	c := &Controller{results: results, jobs: jobs.Informer().GetIndexer(), loop: loop}
	loop.Sync = c.sync
	loop.Synced = []cache.InformerSynced{jobs.Informer().HasSynced}
	if _, err := jobs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: c.updateJob}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }

// HasSynced tells whether the Job informer has synced.
func (c *Controller) HasSynced() bool { return c.loop.HasSynced() }

// updateJob enqueues a runner Job that just finished. Only the transition
// counts: Jobs that finished before this manager started, seen as adds,
// were counted by the one before (or are lost with its counters).
func (c *Controller) updateJob(old, cur any) {
	o, ok1 := old.(*runnerjob.Cached)
	j, ok2 := cur.(*runnerjob.Cached)
	if !ok1 || !ok2 || j.Operation == "" {
		return
	}
	if was, _ := runnerjob.Finished(o); was {
		return
	}
	if now, _ := runnerjob.Finished(j); now {
		key := j.Key()
		c.finished.Store(key, j)
		c.loop.Queue.Add(key)
	}
}
