package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// Ready reasons of machines and pools: Cluster API's own.
const (
	ReasonWaitingForClusterInfrastructureReady = "WaitingForClusterInfrastructureReady"
	ReasonWaitingForControlPlaneInitialized    = "WaitingForControlPlaneInitialized"
	ReasonWaitingForBootstrapData              = "WaitingForBootstrapData"
)

// Kind is what one kind of object adds to the controller every kind shares:
// its Cluster API owner, its finalizer, its inputs and its outputs.
type Kind[T Object] struct {
	GVK       schema.GroupVersionKind
	Finalizer string
	// Owner is the Cluster API kind that owns the objects. Objects owned by
	// a Machine or MachinePool belong to a Cluster: they wait for its
	// infrastructure and get its job defaults and outputs.
	Owner capi.Kind
	// OwnerMissing is the Ready reason and message while Cluster API has
	// not set the owner reference.
	OwnerMissing Wait
	// Client writes the objects of a namespace.
	Client func(c versioned.Interface, namespace string) Client[T]
	// Status is a pointer to the object's whole status: a sync writes it
	// only when it changed.
	Status func(T) any
	// Gate, if set, holds plans for the approvals the object asks for.
	Gate func(T) *approval.Gate
	// Inputs adds the kind's captf_* inputs read from the owner.
	Inputs func(owner *capi.Object, inputs map[string]any)
	// Outputs reads the kind's module outputs into the object's spec and
	// status, and tells whether the spec changed. Before it sets provider
	// IDs (machines and pools) it claims them: claim fails when another
	// object holds one, and then nothing is set.
	Outputs func(obj T, outputs map[string]run.Output, claim func(ids ...string) error) (specChanged bool, err error)
	// HoldsProviderIDs: the kind's objects hold instances by provider ID
	// (machines and pools), and no two objects may hold one.
	HoldsProviderIDs bool
}

// Client writes objects of one kind: the generated typed clients are ones.
type Client[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Controller reconciles the objects of one Kind: the cache checks, the
// lifecycle (owner, finalizer, pause, deletion), the apply and the status
// every kind shares, around what the Kind adds.
type Controller[T Object] struct {
	kind         Kind[T]
	captf        versioned.Interface
	objects      cache.Indexer
	providerIDs  []cache.Indexer // machines and pools by provider ID; nil for clusters
	owners       cache.GenericLister
	clusters     cache.GenericLister
	tcs          infralisters.TerraformClusterLister
	loop         *controller.Loop
	expectations *controller.Expectations
	written      *controller.WrittenVersions
	rendered     *renderedInputs
	engine       *engine
	// fieldManager names the writes of the objects (Kind.Name).
	fieldManager string
	// belongsToCluster: the objects are a Cluster's machines or pools,
	// rather than its infrastructure.
	belongsToCluster bool
}

// Name names the controller of the kind in logs, events, metrics and field
// managers: its kind in lower case.
func (k Kind[T]) Name() string { return strings.ToLower(k.GVK.Kind) }

// NewController wires a controller of kind to the informers it reads,
// asking cc's factories for them.
func NewController[T Object](ctx context.Context, cc controller.Context, config Config, kind Kind[T]) (*Controller[T], error) {
	logger := klog.FromContext(ctx)
	objects, err := cc.CAPTFInformers.ForResource(kind.GVK.GroupVersion().WithResource(kind.Name() + "s"))
	if err != nil {
		return nil, err
	}
	informer := objects.Informer()
	jobs := cc.KubeInformers.Batch().V1().Jobs().Informer()
	if _, ok := jobs.GetIndexer().GetIndexers()[runnerjob.ByObjectUID]; !ok {
		if err := jobs.AddIndexers(runnerjob.Indexers); err != nil {
			return nil, err
		}
	}
	if kind.Owner.ClusterNamePath != nil {
		if _, ok := informer.GetIndexer().GetIndexers()[ObjectsByCluster]; !ok {
			if err := informer.AddIndexers(cache.Indexers{ObjectsByCluster: byCluster}); err != nil {
				return nil, err
			}
		}
	}
	var providerIDs []cache.Indexer
	if kind.HoldsProviderIDs {
		if providerIDs, err = providerIDIndexes(cc); err != nil {
			return nil, err
		}
	}
	policies := cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformPlanPolicies()
	owners := cc.CAPIInformers.ForResource(kind.Owner.Resource)
	clusters := cc.CAPIInformers.ForResource(capi.Cluster.Resource)
	tcs := cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformClusters()
	loop := controller.NewLoop(ctx, kind.Name(), cc)
	clk := cc.ClockOrReal()
	c := &Controller[T]{
		kind: kind, captf: cc.CAPTF,
		objects: informer.GetIndexer(), owners: owners.Lister(), clusters: clusters.Lister(), tcs: tcs.Lister(),
		loop: loop, expectations: controller.NewExpectations(clk), written: controller.NewWrittenVersions(), rendered: newRenderedInputs(),
		providerIDs: providerIDs, fieldManager: kind.Name(), belongsToCluster: kind.Owner.ClusterNamePath != nil,
	}
	loop.Sync = c.sync
	loop.Synced = []cache.InformerSynced{informer.HasSynced, jobs.HasSynced, owners.Informer().HasSynced}
	fm := fieldManager(kind.GVK)
	c.engine = &engine{Kube: cc.Kube, JobControl: &runnerjob.APIControl{Client: cc.Kube, FieldManager: fm}, FieldManager: fm, JobIndex: jobs.GetIndexer(),
		Recorder: loop.Recorder, Expectations: c.expectations, Access: config.Access, RunnerAPI: config.RunnerAPI, RunnerPods: config.RunnerPods, GVK: kind.GVK, RunnerImage: config.RunnerImage, ProviderMirrorImage: config.ProviderMirrorImage,
		StateBackups: config.StateBackups, DriftDefaultInterval: config.DriftDefaultInterval, MaxStateBytes: config.MaxStateBytes, Clock: clk,
		Slots: config.Slots, BootstrapConfigs: config.BootstrapConfigs, Results: config.Results, Records: config.Records, RunInputs: config.RunInputs, Catalog: config.Catalog,
		PlanPolicies: policies.Lister()}
	if c.engine.Results == nil {
		c.engine.Results = &runnerjob.Results{Kube: cc.Kube}
	}
	if config.Slots != nil {
		config.Slots.OnFree(kind.GVK.Kind, func(o cache.ObjectName) { loop.Queue.Add(o) })
	}
	if err := c.engine.WatchStateSecrets(config.StateSecrets, loop); err != nil {
		return nil, err
	}
	if config.Metrics != nil {
		config.Metrics.add(c.engine, informer.GetIndexer())
	}
	if c.belongsToCluster {
		loop.Synced = append(loop.Synced, clusters.Informer().HasSynced, tcs.Informer().HasSynced)
	}
	if config.Catalog != nil {
		loop.Synced = append(loop.Synced, cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformModules().Informer().HasSynced)
	}
	loop.Synced = append(loop.Synced, policies.Informer().HasSynced)
	// Only kinds of a cluster watch Clusters and TerraformClusters: asking
	// for an informer starts it.
	clusterInformers := func() (cache.SharedIndexInformer, cache.SharedIndexInformer) {
		return clusters.Informer(), tcs.Informer()
	}
	if err := c.addHandlers(logger, informer, jobs, owners.Informer(), clusterInformers); err != nil {
		return nil, err
	}
	_, err = policies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.handlePlanPolicy, DeleteFunc: c.handlePlanPolicy,
		UpdateFunc: func(_, cur any) { c.handlePlanPolicy(cur) },
	})
	return c, err
}

// addHandlers has the informers' events enqueue the objects they concern:
// the object's own, its Jobs', its Cluster API owner's and, for kinds of a
// cluster, its Cluster's and TerraformCluster's.
func (c *Controller[T]) addHandlers(logger klog.Logger, objects, jobs, owners cache.SharedIndexInformer, clusterInformers func() (clusters, tcs cache.SharedIndexInformer)) error {
	handlers := []informerHandler{
		{objects, cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: c.updateObject, DeleteFunc: c.deleteObject}},
		{jobs, JobEventHandler(logger, c.kind.GVK.Kind, c.loop.Queue, c.expectations)},
		{owners, cache.ResourceEventHandlerFuncs{AddFunc: c.handleOwner, UpdateFunc: func(old, cur any) {
			if cachedChanged(old, cur) {
				c.handleOwner(cur)
			}
		}}},
	}
	if c.belongsToCluster {
		clusters, tcs := clusterInformers()
		handlers = append(handlers,
			informerHandler{clusters, cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
				if cachedChanged(old, cur) {
					c.handleCluster(cur)
				}
			}}},
			informerHandler{tcs, cache.ResourceEventHandlerFuncs{UpdateFunc: c.handleTerraformCluster}})
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.h); err != nil {
			return err
		}
	}
	return nil
}

type informerHandler struct {
	informer cache.SharedIndexInformer
	h        cache.ResourceEventHandler
}

// Run starts workers and blocks until ctx ends.
func (c *Controller[T]) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }

// HasSynced tells whether every informer the controller reads has synced.
func (c *Controller[T]) HasSynced() bool { return c.loop.HasSynced() }

func (c *Controller[T]) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx).WithValues("object", key)
	ctx = klog.NewContext(ctx, logger)
	start := c.engine.Clock.Now()
	defer func() { logger.V(4).Info("Finished syncing", "duration", c.engine.Clock.Since(start)) }()

	o, exists, err := c.objects.GetByKey(key.String())
	if err != nil {
		return err
	}
	if !exists {
		c.forget(key)
		return nil
	}
	cached := o.(T)
	if _, ok := cached.GetAnnotations()[capi.ManagedByAnnotation]; ok {
		return nil // externally managed: hands off
	}
	if c.written.Behind(key, cached.GetResourceVersion()) {
		// The cache has not caught up with our last write: deciding on it
		// would write again what is already written.
		c.loop.Queue.AddAfter(key, 250*time.Millisecond)
		return nil
	}
	if !c.expectations.Satisfied(key) {
		logger.V(4).Info("Waiting for the informer to see the Jobs created")
		return nil
	}
	obj := cached.DeepCopyObject().(T)
	s := c.newSync(cached, obj)
	err = c.reconcile(ctx, s, obj)
	if err == nil && s.Unwritten {
		err = s.Update(ctx)
	}
	if !s.NoStatus {
		if serr := c.writeStatus(ctx, obj, cached); serr != nil && !apierrors.IsNotFound(serr) {
			err = errors.Join(err, serr)
		}
	}
	if err == nil && s.Requeue > 0 {
		c.loop.Queue.AddAfter(key, s.Requeue)
	}
	return err
}

func (c *Controller[T]) reconcile(ctx context.Context, s *Sync, obj T) error {
	l := Lifecycle{Finalizer: c.kind.Finalizer, Render: func() (*Inputs, error) { return c.render(ctx, s) }}
	if s.Owner == nil {
		l.OwnerMissing = &c.kind.OwnerMissing
	}
	if ok, err := c.engine.InheritProtection(ctx, s); err != nil || !ok {
		return err
	}
	live, err := c.engine.Reconcile(ctx, s, l)
	if err != nil || !live {
		return err
	}
	if reason, msg := c.waiting(s); reason != "" {
		c.engine.SetReady(s, metav1.ConditionFalse, reason, msg)
		return nil
	}
	// While a Job runs (a drift check aside: Apply stops it for changed
	// inputs) nothing needs the inputs, and syncs that come with its
	// progress (its pod, Cluster API's status patches) read no Secret or
	// ConfigMap.
	if active := runnerjob.Active(s.Jobs); active != nil && active.Operation != infrav1.OperationDrift {
		return c.engine.reportRunning(ctx, s, active)
	}
	in, err := c.currentInputs(ctx, s)
	if err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			c.engine.InputError(s, ie)
			return nil
		}
		return err
	}
	res, job, err := c.engine.Apply(ctx, s, in)
	if err != nil || res == nil {
		return err
	}
	if err := checkOutputsSize(res.Outputs); err != nil {
		c.engine.InvalidOutput(s, err)
		return nil
	}
	claim := func(ids ...string) error { return providerid.HeldElsewhere(c.providerIDs, obj, ids) }
	specChanged, err := c.kind.Outputs(obj, res.Outputs, claim)
	if err != nil {
		c.engine.InvalidOutput(s, err)
		return nil
	}
	if approval.DropUsed(obj.GetAnnotations(), res.PlanHash(), res.ModuleDigest()) {
		specChanged = true // metadata, written in the same update
	}
	if specChanged {
		if err := s.Update(ctx); err != nil {
			return err
		}
	}
	c.engine.RecordApplied(s, in.Hash, job, res)
	return nil
}

// waiting says what a machine or pool waits for before its first apply,
// with Cluster API's reasons; a deletion never waits.
func (c *Controller[T]) waiting(s *Sync) (string, string) {
	if !c.belongsToCluster {
		return "", ""
	}
	if s.Cluster == nil {
		return ReasonWaitingForClusterInfrastructureReady, fmt.Sprintf("Waiting for Cluster %q (label %s)", s.Obj.GetLabels()[capi.ClusterNameLabel], capi.ClusterNameLabel)
	}
	if !capi.InfrastructureProvisioned(s.Cluster) {
		return ReasonWaitingForClusterInfrastructureReady, fmt.Sprintf("Waiting for Cluster %s's infrastructure to be provisioned", s.Cluster.GetName())
	}
	if c.kind.Owner.BootstrapData(s.Owner) == "" {
		if !capi.IsControlPlane(s.Owner) && !capi.ControlPlaneInitialized(s.Cluster) {
			return ReasonWaitingForControlPlaneInitialized, "Waiting for the control plane to be initialized"
		}
		return ReasonWaitingForBootstrapData, fmt.Sprintf("Waiting for the bootstrap provider to set %s %s",
			c.kind.Owner.Kind, strings.Join(c.kind.Owner.BootstrapDataSecretPath, "."))
	}
	return "", ""
}

// writeStatus writes obj's status when the sync changed it.
func (c *Controller[T]) writeStatus(ctx context.Context, obj, cached T) error {
	if obj.GetDeletionTimestamp() != nil && !HoldsFinalizer(obj, c.kind.Finalizer) {
		return nil // gone once the finalizer went
	}
	st := obj.WorkspaceStatus()
	st.ObservedGeneration = obj.GetGeneration()
	// A new generation here is this sync's own write of the spec (a
	// provider ID; the update was of the cached spec): the conditions set
	// at the generation before saw it, and say so, or the next sync would
	// write them again.
	if before := cached.GetGeneration(); obj.GetGeneration() != before {
		for i := range st.Conditions {
			if st.Conditions[i].ObservedGeneration == before {
				st.Conditions[i].ObservedGeneration = obj.GetGeneration()
			}
		}
	}
	if equality.Semantic.DeepEqual(c.kind.Status(obj), c.kind.Status(cached)) {
		return nil
	}
	updated, err := c.kind.Client(c.captf, obj.GetNamespace()).UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.fieldManager})
	if err != nil {
		return err
	}
	c.written.Wrote(cache.MetaObjectToName(obj), updated.GetResourceVersion())
	return nil
}

// forget drops what the controller remembers of a deleted object.
func (c *Controller[T]) forget(key cache.ObjectName) {
	c.expectations.Delete(key)
	c.written.Forget(key)
	c.rendered.forget(key)
}

func (c *Controller[T]) enqueue(obj any) {
	if key, err := cache.ObjectToName(obj); err == nil {
		c.loop.Queue.Add(key)
	}
}

// updateObject skips the object's own status writes: only spec (generation)
// and metadata changes mean new work. A resync (same resourceVersion, every
// --sync-period) syncs and forgets the inputs' last render: inputs read from
// Secrets and ConfigMaps may have changed.
func (c *Controller[T]) updateObject(old, cur any) {
	o, n := old.(T), cur.(T)
	if o.GetResourceVersion() != n.GetResourceVersion() && !controller.MetadataChanged(o, n) {
		return
	}
	if o.GetResourceVersion() == n.GetResourceVersion() {
		c.rendered.forget(cache.MetaObjectToName(n))
	}
	c.enqueue(cur)
}

func (c *Controller[T]) deleteObject(obj any) {
	if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
		c.forget(key)
		c.loop.Queue.Add(key)
	}
}

// handleOwner enqueues the object an owner's infrastructureRef names: it
// may have waited for its owner, the owner's bootstrap data, replicas or
// version changed, or its pause did.
func (c *Controller[T]) handleOwner(obj any) {
	if o := capi.ObjectOf(obj); o != nil {
		if key, ok := c.kind.Owner.InfrastructureRef(o, c.kind.GVK.Group, c.kind.GVK.Kind); ok {
			c.loop.Queue.Add(key)
		}
	}
}

// handleCluster enqueues a Cluster's machines or pools: its infrastructure
// or control plane may be ready now, or its pause changed.
func (c *Controller[T]) handleCluster(obj any) {
	if o := capi.ObjectOf(obj); o != nil {
		c.enqueueClusterMembers(o.Namespace, o.Name)
	}
}

// handleTerraformCluster enqueues the cluster's machines or pools when its
// outputs (their exports) or job defaults change.
func (c *Controller[T]) handleTerraformCluster(old, cur any) {
	o, n := old.(*infrav1.TerraformCluster), cur.(*infrav1.TerraformCluster)
	if equality.Semantic.DeepEqual(o.Status.Outputs, n.Status.Outputs) && o.Generation == n.Generation {
		return
	}
	if name := n.Labels[capi.ClusterNameLabel]; name != "" {
		c.enqueueClusterMembers(n.Namespace, name)
	}
}

func (c *Controller[T]) enqueueClusterMembers(namespace, cluster string) {
	members, err := c.objects.ByIndex(ObjectsByCluster, namespace+"/"+cluster)
	if err != nil {
		utilruntime.HandleError(fmt.Errorf("listing the %ss of Cluster %s/%s: %w", c.kind.GVK.Kind, namespace, cluster, err))
		return
	}
	for _, o := range members {
		c.enqueue(o)
	}
}

// ObjectsByCluster indexes the machines and pools of a kind by their
// Cluster ("namespace/name", from the cluster-name label): a Cluster's
// change enqueues its members without a scan of every cached object (the
// manager's caches keep no namespace index).
const ObjectsByCluster = "captf.io/by-cluster"

func byCluster(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if name := m.GetLabels()[capi.ClusterNameLabel]; name != "" {
		return []string{m.GetNamespace() + "/" + name}, nil
	}
	return nil, nil
}

// cachedChanged: an update of a Cluster API object changed what CAPTF
// reads of it (a tombstone or another type always counts).
func cachedChanged(old, cur any) bool {
	o, n := capi.ObjectOf(old), capi.ObjectOf(cur)
	return o == nil || n == nil || capi.CachedChanged(o, n)
}

func fieldManager(gvk schema.GroupVersionKind) string { return "captf-" + names.ShortKind(gvk.Kind) }

// MaxStatusOutputBytes bounds the outputs an object's status holds (the
// non-sensitive ones): the manager caches every object, and one module's
// outputs must not fill its memory.
const MaxStatusOutputBytes = 64 << 10

// checkOutputsSize refuses outputs the status cannot hold.
func checkOutputsSize(outputs map[string]run.Output) error {
	n := 0
	for name, o := range outputs {
		if !o.Sensitive {
			n += len(name) + len(o.Value)
		}
	}
	if n > MaxStatusOutputBytes {
		return fmt.Errorf("the module's non-sensitive outputs take %d bytes, more than the %d an object's status holds: mark large outputs sensitive (they stay out of the status) or make them smaller", n, MaxStatusOutputBytes)
	}
	return nil
}
