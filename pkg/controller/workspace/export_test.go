package workspace

import (
	"context"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/runnerjob"
)

// What the kind-agnostic fixture (controller_test.go) reaches inside a
// Controller through.

// EngineOfTest is the controller's kind-independent part, for the fixture.
type EngineOfTest = engine

func (c *Controller[T]) SyncForTest(ctx context.Context, key cache.ObjectName) error {
	return c.sync(ctx, key)
}
func (c *Controller[T]) EngineForTest() *engine                        { return c.engine }
func (c *Controller[T]) ExpectationsForTest() *controller.Expectations { return c.expectations }
func (c *Controller[T]) WrittenForTest() *controller.WrittenVersions   { return c.written }
func (c *Controller[T]) UpdateObjectForTest(old, cur any)              { c.updateObject(old, cur) }
func (c *Controller[T]) DeleteObjectForTest(obj any)                   { c.deleteObject(obj) }
func (c *Controller[T]) QueueForTest() workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	return c.loop.Queue
}

// UseForTest replaces the Job API and the event sink with fakes.
func (c *Controller[T]) UseForTest(jobs runnerjob.Control, recorder record.EventRecorder) {
	c.engine.JobControl, c.engine.Recorder = jobs, recorder
}

func (c *Controller[T]) HandleClusterForTest(obj any) { c.handleCluster(obj) }
