package workspace

import (
	"fmt"

	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller"
)

// byProviderID indexes TerraformMachines and TerraformMachinePools by the
// provider IDs they hold, within their namespace (providerIDKey).
const byProviderID = "captf.io/provider-id"

// providerIDKey is an index key: a provider ID is unique within a
// namespace. Cluster API ties a provider ID to a Node of the Machine's own
// Cluster, which is in the Machine's namespace, so an ID claimed in one
// namespace takes nothing from another; a cluster-wide index let a tenant
// claim, first, IDs that another namespace's machines would output
// (sequential server numbers), blocking them, and told the tenant who held
// an ID.
func providerIDKey(namespace, id string) string { return namespace + "/" + id }

// providerIDIndexes are the machine and pool caches, indexed by provider
// ID: one instance is never claimed by two objects.
func providerIDIndexes(cc controller.Context) ([]cache.Indexer, error) {
	v1 := cc.CAPTFInformers.Infrastructure().V1alpha1()
	informers := []cache.SharedIndexInformer{v1.TerraformMachines().Informer(), v1.TerraformMachinePools().Informer()}
	funcs := []cache.IndexFunc{
		func(obj any) ([]string, error) {
			if tm, ok := obj.(*infrav1.TerraformMachine); ok && tm.Spec.ProviderID != "" {
				return []string{providerIDKey(tm.Namespace, tm.Spec.ProviderID)}, nil
			}
			return nil, nil
		},
		func(obj any) ([]string, error) {
			if tmp, ok := obj.(*infrav1.TerraformMachinePool); ok {
				keys := make([]string, 0, len(tmp.Spec.ProviderIDList))
				for _, id := range tmp.Spec.ProviderIDList {
					keys = append(keys, providerIDKey(tmp.Namespace, id))
				}
				return keys, nil
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

// claimedElsewhere returns an error naming the object of obj's namespace
// that already holds one of ids, or a provider ID that ids name twice.
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
			holders, err := idx.ByIndex(byProviderID, providerIDKey(obj.GetNamespace(), id))
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
					return fmt.Errorf("provider ID %q is already held by %s %s in this namespace: a module may not claim another object's instance",
						id, kind, o.GetName())
				}
			}
		}
	}
	return nil
}
