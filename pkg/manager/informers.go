package manager

import (
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
	infrainformers "github.com/captf/captf/pkg/generated/informers/externalversions/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/generated/informers/externalversions/internalinterfaces"
	"github.com/captf/captf/pkg/intern"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

// noIndexes: nothing in CAPTF lists a cache by namespace (it reads by key,
// Jobs by their object's UID, a Cluster's machines by the cluster's
// index, workspace.ObjectsByCluster), so its informers keep no namespace
// index, the one client-go adds by default: a set of keys per namespace
// holding every object, 44 B an object (BenchmarkJobCache without it),
// more when each cluster has a namespace of its own. A new map for each
// informer: an indexer keeps the map it was made with, and AddIndexers
// writes into it, so one map shared by all gave every cache the index
// functions added to any (the pools' provider-ID index was the machines',
// which indexes no pool).
func noIndexes() cache.Indexers { return cache.Indexers{} }

// RegisterInformers makes the informers of CAPTF's objects, its Jobs and
// its runner ServiceAccounts, each without a namespace index, in their
// factories before a controller asks for one: a factory then hands out
// these. Every controller runs, so every one of them is asked for.
func RegisterInformers(captf externalversions.SharedInformerFactory, kube informers.SharedInformerFactory, namespace string,
	captfTweak, kubeTweak func(*metav1.ListOptions)) {
	type newFiltered func(versioned.Interface, string, time.Duration, cache.Indexers, internalinterfaces.TweakListOptionsFunc) cache.SharedIndexInformer
	for obj, newInformer := range map[runtime.Object]newFiltered{
		&infrav1.TerraformCluster{}:         infrainformers.NewFilteredTerraformClusterInformer,
		&infrav1.TerraformMachine{}:         infrainformers.NewFilteredTerraformMachineInformer,
		&infrav1.TerraformMachinePool{}:     infrainformers.NewFilteredTerraformMachinePoolInformer,
		&infrav1.TerraformMachineTemplate{}: infrainformers.NewFilteredTerraformMachineTemplateInformer,
	} {
		captf.InformerFor(obj, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
			return newInformer(c, namespace, resync, noIndexes(), captfTweak)
		})
	}
	// The catalog is every shard's: a --watch-filter does not hide an
	// entry from the objects that use it.
	captf.InformerFor(&infrav1.TerraformModule{}, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return infrainformers.NewFilteredTerraformModuleInformer(c, resync, noIndexes(), nil)
	})
	// So are the plan policies.
	captf.InformerFor(&infrav1.TerraformPlanPolicy{}, func(c versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return infrainformers.NewFilteredTerraformPlanPolicyInformer(c, resync, noIndexes(), nil)
	})
	kube.InformerFor(&batchv1.Job{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return batchinformers.NewFilteredJobInformer(c, namespace, resync, noIndexes(), kubeTweak)
	})
	kube.InformerFor(&corev1.ServiceAccount{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredServiceAccountInformer(c, namespace, resync, noIndexes(), kubeTweak)
	})
}

// informerSet starts and stops informers made here, not by a factory.
type informerSet struct {
	mu           sync.Mutex
	informers    []cache.SharedIndexInformer
	started      int // informers[:started] run
	shuttingDown bool
	wg           sync.WaitGroup
}

func (s *informerSet) add(inf cache.SharedIndexInformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.informers = append(s.informers, inf)
}

// Start runs the informers not yet started until stopCh closes.
func (s *informerSet) Start(stopCh <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown {
		return
	}
	for _, inf := range s.informers[s.started:] {
		s.wg.Go(func() { inf.Run(stopCh) })
	}
	s.started = len(s.informers)
}

// Shutdown waits for the informers to stop (their stopCh closed).
func (s *informerSet) Shutdown() {
	defer s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shuttingDown = true
}

// capiFactory makes the informers of Cluster API objects: each cached
// object trimmed to a capi.Object (capi.Kind.Trim) with shared strings,
// and no namespace index (noIndexes). client-go's dynamic factory has
// neither option.
type capiFactory struct {
	client    dynamic.Interface
	resync    time.Duration
	namespace string
	tweak     dynamicinformer.TweakListOptionsFunc
	shared    *intern.Pool

	informerSet
	byResource map[schema.GroupVersionResource]informers.GenericInformer
	resources  []schema.GroupVersionResource // of informerSet.informers, in order
}

var _ dynamicinformer.DynamicSharedInformerFactory = &capiFactory{}

func newCAPIFactory(client dynamic.Interface, resync time.Duration, namespace string, tweak dynamicinformer.TweakListOptionsFunc, shared *intern.Pool) *capiFactory {
	return &capiFactory{client: client, resync: resync, namespace: namespace, tweak: tweak, shared: shared,
		byResource: map[schema.GroupVersionResource]informers.GenericInformer{}}
}

func (f *capiFactory) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.byResource[gvr]; ok {
		return inf
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(f.client, gvr, f.namespace, f.resync, noIndexes(), f.tweak)
	if kind, ok := capi.KindServedAs(gvr); ok {
		if err := inf.Informer().SetTransform(cacheTransform(f.shared, kind.Trim)); err != nil {
			klog.Background().Error(err, "Informer already started", "resource", gvr) // a new informer is not
		}
		inf = capiInformer{inf, gvr}
	}
	f.byResource[gvr] = inf
	f.resources, f.informers = append(f.resources, gvr), append(f.informers, inf.Informer())
	return inf
}

func (f *capiFactory) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	f.mu.Lock()
	started := map[schema.GroupVersionResource]cache.SharedIndexInformer{}
	for i, gvr := range f.resources[:f.started] {
		started[gvr] = f.informers[i]
	}
	f.mu.Unlock()
	synced := map[schema.GroupVersionResource]bool{}
	for gvr, inf := range started {
		synced[gvr] = cache.WaitForCacheSync(stopCh, inf.HasSynced)
	}
	return synced
}

// capiInformer lists capi.Objects: the dynamic informer's own lister takes
// every cached object for an unstructured one, and would panic.
type capiInformer struct {
	informers.GenericInformer
	gvr schema.GroupVersionResource
}

func (i capiInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(i.Informer().GetIndexer(), i.gvr.GroupResource())
}

// CacheFactories makes cc's informer factories from its clients and dyn,
// as the manager caches (the unit tests' fixture makes its own with them):
// the objects of namespace ("" all), those of watchFilter's instance only,
// CAPTF's Jobs only, each trimmed to what the controllers read. It returns
// the pool of strings the caches share.
func CacheFactories(cc *controller.Context, dyn dynamic.Interface, namespace string, resync time.Duration, watchFilter string) *intern.Pool {
	// --watch-filter: the objects of another instance (a canary, a tenant's
	// own) are not even cached.
	filter := func(lo *metav1.ListOptions) {
		if watchFilter != "" {
			lo.LabelSelector = capi.WatchFilterLabel + "=" + watchFilter
		}
	}
	shared := newSharedStrings()
	cc.CAPTFInformers = externalversions.NewSharedInformerFactoryWithOptions(cc.CAPTF, resync,
		externalversions.WithNamespace(namespace), externalversions.WithTransform(cacheTransform(shared, nil)), externalversions.WithTweakListOptions(filter))
	// Only what CAPTF made: Jobs by label. Secrets are read on demand and
	// never cached, so memory does not grow with state size.
	managedByCAPTF := func(lo *metav1.ListOptions) { lo.LabelSelector = names.LabelManagedBy + "=" + names.ManagedByValue }
	cc.KubeInformers = informers.NewSharedInformerFactoryWithOptions(cc.Kube, resync, informers.WithNamespace(namespace),
		informers.WithTransform(cacheTransform(shared, runnerjob.Trim)), informers.WithTweakListOptions(managedByCAPTF))
	RegisterInformers(cc.CAPTFInformers, cc.KubeInformers, namespace, filter, managedByCAPTF)
	cc.CAPIInformers = newCAPIFactory(dyn, resync, namespaceOrAll(namespace), filter, shared)
	return shared
}

// CacheTransform is what the informers of CacheFactories do to each
// object they cache, for a test that puts objects into their stores: it
// trims Jobs and Cluster API objects, then every object as the manager.
func CacheTransform(shared *intern.Pool) func(any) (any, error) {
	t := cacheTransform(shared, func(obj any) any {
		switch o := obj.(type) {
		case *batchv1.Job:
			return runnerjob.Trim(o)
		case *unstructured.Unstructured:
			if k, ok := capi.KindOf(o.GetKind()); ok {
				return k.Trim(o)
			}
		}
		return obj
	})
	return func(obj any) (any, error) { return t(obj) }
}
