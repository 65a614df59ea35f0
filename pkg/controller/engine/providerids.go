package engine

import (
	"fmt"

	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller"
)

// byProviderID indexes TerraformMachines and TerraformMachinePools by the
// provider IDs they hold.
const byProviderID = "captf.io/provider-id"

// providerIDIndexes are the machine and pool caches, indexed by provider
// ID: one instance is never claimed by two objects.
func providerIDIndexes(cc controller.Context) ([]cache.Indexer, error) {
	v1 := cc.CAPTFInformers.Infrastructure().V1alpha1()
	informers := []cache.SharedIndexInformer{v1.TerraformMachines().Informer(), v1.TerraformMachinePools().Informer()}
	funcs := []cache.IndexFunc{
		func(obj any) ([]string, error) {
			if tm, ok := obj.(*infrav1.TerraformMachine); ok && tm.Spec.ProviderID != "" {
				return []string{tm.Spec.ProviderID}, nil
			}
			return nil, nil
		},
		func(obj any) ([]string, error) {
			if tmp, ok := obj.(*infrav1.TerraformMachinePool); ok {
				return tmp.Spec.ProviderIDList, nil
			}
			return nil, nil
		},
	}
	var indexers []cache.Indexer
	for i, inf := range informers {
		if _, ok := inf.GetIndexer().GetIndexers()[byProviderID]; !ok {
			if err := inf.AddIndexers(cache.Indexers{byProviderID: funcs[i]}); err != nil {
				return nil, err
			}
		}
		indexers = append(indexers, inf.GetIndexer())
	}
	return indexers, nil
}

// claimedElsewhere returns an error naming the object that already holds
// one of ids, or a provider ID that ids name twice.
func claimedElsewhere(indexers []cache.Indexer, obj Object, ids []string) error {
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if seen[id] {
			return fmt.Errorf("provider ID %q is output twice: each instance has its own", id)
		}
		seen[id] = true
		for _, idx := range indexers {
			holders, err := idx.ByIndex(byProviderID, id)
			if err != nil {
				return err
			}
			for _, h := range holders {
				o := h.(Object)
				if o.GetUID() != obj.GetUID() {
					kind := "TerraformMachine"
					if _, ok := o.(*infrav1.TerraformMachinePool); ok {
						kind = "TerraformMachinePool"
					}
					return fmt.Errorf("provider ID %q is already held by %s %s/%s: a module may not claim another object's instance",
						id, kind, o.GetNamespace(), o.GetName())
				}
			}
		}
	}
	return nil
}
