package workspace

import (
	"k8s.io/client-go/tools/cache"

	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/providerid"
)

// providerIDIndexes are the machine and pool caches, indexed by provider
// ID (providerid.Index): one instance is never claimed by two objects.
func providerIDIndexes(cc controller.Context) ([]cache.Indexer, error) {
	v1 := cc.CAPTFInformers.Infrastructure().V1alpha1()
	var indexers []cache.Indexer
	for _, inf := range []cache.SharedIndexInformer{v1.TerraformMachines().Informer(), v1.TerraformMachinePools().Informer()} {
		if _, ok := inf.GetIndexer().GetIndexers()[providerid.Index]; !ok {
			if err := inf.AddIndexers(cache.Indexers{providerid.Index: providerid.IndexFunc}); err != nil {
				return nil, err
			}
		}
		indexers = append(indexers, inf.GetIndexer())
	}
	return indexers, nil
}
