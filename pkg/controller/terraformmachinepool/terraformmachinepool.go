// Package terraformmachinepool reconciles TerraformMachinePools: Cluster
// API's infrastructure machine pools. What every kind shares is the engine's;
// this package adds the pool's inputs and reads the instances' provider IDs
// and the replica count Cluster API copies.
package terraformmachinepool

import (
	"encoding/json"
	"fmt"
	"slices"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/run"
)

// ReasonWaitingForOwner: Cluster API has not made the owner reference yet.
const ReasonWaitingForOwner = "WaitingForMachinePoolOwner"

// OutputProviderIDs is the output with the provider IDs of the instances.
const OutputProviderIDs = "provider_ids"

// Kind is what TerraformMachinePools add to the engine's controller.
var Kind = workspace.Kind[*infrav1.TerraformMachinePool]{
	GVK:          infrav1.SchemeGroupVersion.WithKind("TerraformMachinePool"),
	Finalizer:    infrav1.TerraformMachinePoolFinalizer,
	Owner:        capi.MachinePool,
	OwnerMissing: workspace.Wait{Reason: ReasonWaitingForOwner, Message: "Waiting for a MachinePool to own this TerraformMachinePool: Cluster API sets the owner reference once the MachinePool's spec.template.spec.infrastructureRef names it"},
	Client: func(c versioned.Interface, ns string) workspace.Client[*infrav1.TerraformMachinePool] {
		return c.InfrastructureV1alpha1().TerraformMachinePools(ns)
	},
	Status:           func(p *infrav1.TerraformMachinePool) any { return &p.Status },
	Inputs:           inputs,
	Outputs:          readOutputs,
	HoldsProviderIDs: true,
}

// inputs are the pool's inputs (docs/inputs.md) from its MachinePool.
func inputs(mp *capi.Object, inputs map[string]any) {
	inputs["captf_machine_pool_name"] = mp.GetName()
	inputs["captf_replicas"] = capi.PoolReplicas(mp)
	inputs["captf_kubernetes_version"] = capi.PoolVersion(mp)
	inputs["captf_failure_domains"] = capi.PoolFailureDomains(mp)
}

// readOutputs takes the provider IDs into the spec and their count into the
// status.
func readOutputs(pool *infrav1.TerraformMachinePool, outputs map[string]run.Output, claim func(...string) error) (bool, error) {
	ids, err := readProviderIDs(outputs, pool.Spec.ProviderIDList)
	if err != nil {
		return false, err
	}
	if slices.Equal(pool.Spec.ProviderIDList, ids) {
		pool.Status.Replicas = int32(len(ids))
		return false, nil
	}
	if err := claim(ids...); err != nil {
		return false, err
	}
	pool.Status.Replicas = int32(len(ids))
	pool.Spec.ProviderIDList = ids
	return true, nil
}

// readProviderIDs reads provider_ids: a list of provider IDs (checked but
// those held).
func readProviderIDs(outputs map[string]run.Output, held []string) ([]string, error) {
	o, ok := outputs[OutputProviderIDs]
	if !ok {
		return nil, fmt.Errorf("the module has no %s output: a pool module must output the provider IDs of its instances", OutputProviderIDs)
	}
	var ids []string
	if err := json.Unmarshal(o.Value, &ids); err != nil {
		return nil, fmt.Errorf("output %s = %s: want a list of strings", OutputProviderIDs, o.Value)
	}
	for _, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("output %s has an empty provider ID", OutputProviderIDs)
		}
		if why := providerid.InvalidNew(id, held...); why != "" {
			return nil, fmt.Errorf("output %s has %q: %s", OutputProviderIDs, id, why)
		}
	}
	return ids, nil
}
