// Package terraformmachine reconciles TerraformMachines: Cluster API's
// infrastructure machines. What every kind shares is the engine's; this
// package adds the machine's inputs and reads the provider ID, addresses and
// failure domain Cluster API copies.
package terraformmachine

import (
	"encoding/json"
	"fmt"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/run"
)

// ReasonWaitingForOwner: Cluster API has not made the owner reference yet.
const ReasonWaitingForOwner = "WaitingForMachineOwner"

// Module outputs a machine module gives.
const (
	OutputProviderID    = "provider_id"
	OutputAddresses     = "addresses"
	OutputFailureDomain = "failure_domain"
)

// Kind is what TerraformMachines add to the engine's controller.
var Kind = workspace.Kind[*infrav1.TerraformMachine]{
	GVK:          infrav1.SchemeGroupVersion.WithKind("TerraformMachine"),
	Finalizer:    infrav1.TerraformMachineFinalizer,
	Owner:        capi.Machine,
	OwnerMissing: workspace.Wait{Reason: ReasonWaitingForOwner, Message: "Waiting for a Machine to own this TerraformMachine: Cluster API sets the owner reference once the Machine's spec.infrastructureRef names it"},
	Client: func(c versioned.Interface, ns string) workspace.Client[*infrav1.TerraformMachine] {
		return c.InfrastructureV1alpha1().TerraformMachines(ns)
	},
	Status:           func(tm *infrav1.TerraformMachine) any { return &tm.Status },
	Inputs:           inputs,
	Outputs:          readOutputs,
	HoldsProviderIDs: true,
}

// inputs are the machine's inputs (docs/inputs.md) from its Machine.
func inputs(m *capi.Object, inputs map[string]any) {
	inputs["captf_machine_name"] = m.GetName()
	inputs["captf_control_plane"] = capi.IsControlPlane(m)
	inputs["captf_failure_domain"] = capi.MachineFailureDomain(m)
	inputs["captf_kubernetes_version"] = capi.MachineVersion(m)
}

// readOutputs takes the provider ID into the spec, once: it never changes;
// addresses and failure domain into the status.
func readOutputs(tm *infrav1.TerraformMachine, outputs map[string]run.Output, claim func(...string) error) (bool, error) {
	providerID, addresses, failureDomain, err := readMachineOutputs(outputs, tm.Spec.ProviderID)
	if err != nil {
		return false, err
	}
	if tm.Spec.ProviderID != "" && tm.Spec.ProviderID != providerID {
		return false, fmt.Errorf("output %s is %q, but spec.providerID is already %q and cannot change: the module replaced the instance; delete the Machine to get a new one", OutputProviderID, providerID, tm.Spec.ProviderID)
	}
	if tm.Spec.ProviderID == "" {
		if err := claim(providerID); err != nil {
			return false, err
		}
	}
	tm.Status.Addresses = addresses
	tm.Status.FailureDomain = failureDomain
	if tm.Spec.ProviderID == "" {
		tm.Spec.ProviderID = providerID
		return true, nil
	}
	return false, nil
}

// readMachineOutputs reads provider_id (required; checked unless it is the
// ID held), addresses (a list of {type, address}, or of plain addresses
// taken as InternalIP) and failure_domain.
func readMachineOutputs(outputs map[string]run.Output, held string) (string, []infrav1.MachineAddress, string, error) {
	var providerID string
	o, ok := outputs[OutputProviderID]
	if !ok {
		return "", nil, "", fmt.Errorf("the module has no %s output: a machine module must output its instance's provider ID (e.g. \"aws:///eu-west-1a/i-0123\")", OutputProviderID)
	}
	if err := json.Unmarshal(o.Value, &providerID); err != nil || providerID == "" {
		return "", nil, "", fmt.Errorf("output %s = %s: want a non-empty string", OutputProviderID, o.Value)
	}
	if why := providerid.InvalidNew(providerID, held); why != "" {
		return "", nil, "", fmt.Errorf("output %s = %q: %s", OutputProviderID, providerID, why)
	}
	var addresses []infrav1.MachineAddress
	if o, ok := outputs[OutputAddresses]; ok {
		if err := json.Unmarshal(o.Value, &addresses); err != nil {
			var plain []string
			if err := json.Unmarshal(o.Value, &plain); err != nil {
				return "", nil, "", fmt.Errorf("output %s: want a list of {type, address} or of addresses", OutputAddresses)
			}
			addresses = nil
			for _, a := range plain {
				addresses = append(addresses, infrav1.MachineAddress{Type: "InternalIP", Address: a})
			}
		}
		for _, a := range addresses {
			switch a.Type {
			case "Hostname", "ExternalIP", "InternalIP", "ExternalDNS", "InternalDNS":
			default:
				return "", nil, "", fmt.Errorf("output %s: address type %q is not one of Hostname, ExternalIP, InternalIP, ExternalDNS, InternalDNS", OutputAddresses, a.Type)
			}
		}
	}
	var failureDomain string
	if o, ok := outputs[OutputFailureDomain]; ok {
		if err := json.Unmarshal(o.Value, &failureDomain); err != nil {
			return "", nil, "", fmt.Errorf("output %s = %s: want a string", OutputFailureDomain, o.Value)
		}
	}
	return providerID, addresses, failureDomain, nil
}
