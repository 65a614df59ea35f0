// Package terraformmodule is the module catalog's controller: it resolves
// each version of a TerraformModule once, in a resolve Job of the runner
// image in the manager's namespace, and records what the Job found (the
// commit, the code's digest, the variables and outputs) in the entry's
// status. A version resolved is never resolved again: its digest is what
// runs of objects that use it run.
package terraformmodule

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/runnerpod"
)

// ControllerName names the controller in logs, events and metrics.
const ControllerName = "terraformmodule"

// GVK is the kind of a catalog entry.
var GVK = infrav1.SchemeGroupVersion.WithKind("TerraformModule")

// Config is what the manager gives the controller.
type Config struct {
	// Namespace is the manager's: resolve Jobs, their inputs and the
	// entries' credentials and ConfigMaps are there.
	Namespace           string
	RunnerImage         string
	ProviderMirrorImage string
	RunnerAPI           workspace.RunnerAPI
	RunnerPods          runnerpod.Rules
	Results             *runnerjob.Results
	// EnsureAccount makes sure the runner's ServiceAccount is in a
	// namespace.
	EnsureAccount func(ctx context.Context, namespace string) error
	// Jobs creates and deletes the resolve Jobs.
	Jobs runnerjob.Control
	// WatchFilter is the manager's --watch-filter: a sharded manager
	// resolves the entries labelled for it alone (every shard's objects
	// use every entry: the informer of entries is not filtered).
	WatchFilter string
}

// Controller resolves catalog versions.
type Controller struct {
	Config
	captf   versioned.Interface
	kube    kubeSecrets
	modules infralisters.TerraformModuleLister
	jobs    cache.Indexer
	// users are the informers of the kinds that name catalog modules.
	users []cache.SharedIndexInformer
	clock clock.PassiveClock
	loop  *controller.Loop
}

// NewController wires the controller to the catalog's and the Jobs'
// informers.
func NewController(ctx context.Context, cc controller.Context, config Config) (*Controller, error) {
	modules := cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformModules()
	jobs := cc.KubeInformers.Batch().V1().Jobs().Informer()
	if _, ok := jobs.GetIndexer().GetIndexers()[runnerjob.ByObjectUID]; !ok {
		if err := jobs.AddIndexers(runnerjob.Indexers); err != nil {
			return nil, err
		}
	}
	c := &Controller{Config: config, captf: cc.CAPTF, kube: apiSecrets{cc.Kube}, modules: modules.Lister(), jobs: jobs.GetIndexer(),
		clock: cc.ClockOrReal(), loop: controller.NewLoop(ctx, ControllerName, cc)}
	c.loop.Synced = []cache.InformerSynced{modules.Informer().HasSynced, jobs.HasSynced}
	c.loop.Sync = c.sync
	enqueue := func(obj any) {
		if key, err := cache.ObjectToName(obj); err == nil {
			c.loop.Queue.Add(key)
		}
	}
	if _, err := modules.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, err
	}
	v1 := cc.CAPTFInformers.Infrastructure().V1alpha1()
	c.users = []cache.SharedIndexInformer{v1.TerraformClusters().Informer(), v1.TerraformMachines().Informer(), v1.TerraformMachinePools().Informer()}
	for _, inf := range c.users {
		c.loop.Synced = append(c.loop.Synced, inf.HasSynced)
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { c.enqueueEntryOf(obj) },
			UpdateFunc: func(old, cur any) {
				// Only a change of the module named changes a count: the
				// status writes of a fleet do not each cost a count.
				if a, b := catalogRefOf(old), catalogRefOf(cur); !equality.Semantic.DeepEqual(a, b) {
					c.enqueueEntryOf(old)
					c.enqueueEntryOf(cur)
				}
			},
			DeleteFunc: func(obj any) { c.enqueueEntryOf(obj) },
		}); err != nil {
			return nil, err
		}
	}
	// A resolve Job that ends wakes its entry.
	onJob := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		var ref schema.GroupVersionKind
		var name string
		switch job := obj.(type) {
		case *runnerjob.Cached:
			ref, name = schema.FromAPIVersionAndKind(job.Controller.APIVersion, job.Controller.Kind), job.Controller.Name
		case *batchv1.Job:
			return // the cache holds Cached Jobs only
		default:
			return
		}
		if ref == GVK {
			c.loop.Queue.Add(cache.ObjectName{Name: name})
		}
	}
	if _, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onJob, UpdateFunc: func(_, cur any) { onJob(cur) }, DeleteFunc: onJob,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// resolves says whether this manager resolves entry m: one shard does.
func (c *Controller) resolves(m *infrav1.TerraformModule) bool {
	return c.WatchFilter == "" || m.Labels[capi.WatchFilterLabel] == c.WatchFilter
}

// enqueueEntryOf enqueues the catalog entry obj names, if any: its count
// of users changes.
func (c *Controller) enqueueEntryOf(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if ref := catalogRefOf(obj); ref != nil {
		c.loop.Queue.Add(cache.ObjectName{Name: ref.Name})
	}
}

// catalogRefOf is the catalog module obj (a Terraform* object) names.
func catalogRefOf(obj any) *infrav1.CatalogRef {
	if w, ok := obj.(interface{ Workspace() *infrav1.WorkspaceSpec }); ok && w.Workspace() != nil {
		return w.Workspace().Module.CatalogRef
	}
	return nil
}

// usersOf counts the objects that name each version of entry.
func (c *Controller) usersOf(entry string) map[string]int32 {
	counts := map[string]int32{}
	c.eachCachedUser(entry, func(_ any, ref *infrav1.CatalogRef) { counts[ref.Version]++ })
	return counts
}

// eachCachedUser calls f for each object of the caches that names entry.
func (c *Controller) eachCachedUser(entry string, f func(obj any, ref *infrav1.CatalogRef)) {
	for _, inf := range c.users {
		for _, obj := range inf.GetStore().List() {
			if ref := catalogRefOf(obj); ref != nil && ref.Name == entry {
				f(obj, ref)
			}
		}
	}
}

// Run starts workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }

// HasSynced tells whether the informers have synced.
func (c *Controller) HasSynced() bool { return c.loop.HasSynced() }
