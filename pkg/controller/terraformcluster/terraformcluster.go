// Package terraformcluster reconciles TerraformClusters: the infrastructure
// of a Cluster API Cluster. What every kind shares is the engine's; this
// package adds the approval gate and reads the control plane endpoint and
// failure domains Cluster API copies.
package terraformcluster

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/run"
)

// ReasonWaitingForOwner: Cluster API has not made the owner reference yet.
const ReasonWaitingForOwner = "WaitingForClusterOwner"

// Well-known module outputs.
const (
	OutputControlPlaneEndpoint = "control_plane_endpoint"
	OutputFailureDomains       = "failure_domains"
)

// Kind is what TerraformClusters add to the engine's controller.
var Kind = workspace.Kind[*infrav1.TerraformCluster]{
	GVK:       infrav1.SchemeGroupVersion.WithKind("TerraformCluster"),
	Finalizer: infrav1.TerraformClusterFinalizer,
	Owner:     capi.Cluster,
	OwnerMissing: workspace.Wait{Reason: ReasonWaitingForOwner,
		Message: "Waiting for a Cluster to own this TerraformCluster: Cluster API sets the owner reference once the Cluster's spec.infrastructureRef names it"},
	Client: func(c versioned.Interface, ns string) workspace.Client[*infrav1.TerraformCluster] {
		return c.InfrastructureV1alpha1().TerraformClusters(ns)
	},
	Status: func(tc *infrav1.TerraformCluster) any { return &tc.Status },
	Gate: func(tc *infrav1.TerraformCluster) *approval.Gate {
		g := approval.Of(tc.Spec.ApprovalPolicy, tc.Spec.Protect, tc.Annotations, &tc.Status.WorkspaceStatus)
		return &g
	},
	Outputs: readOutputs,
}

// readOutputs takes the control plane endpoint into the spec, once, and the
// failure domains into the status.
func readOutputs(tc *infrav1.TerraformCluster, outputs map[string]run.Output, _ func(...string) error) (bool, error) {
	endpoint, domains, err := readClusterOutputs(outputs)
	if err != nil {
		return false, err
	}
	tc.Status.FailureDomains = domains
	if tc.Spec.ControlPlaneEndpoint.IsZero() && endpoint != nil {
		tc.Spec.ControlPlaneEndpoint = *endpoint
		return true, nil
	}
	return false, nil
}

// readClusterOutputs reads control_plane_endpoint ("host:port", or an object
// with host and port) and failure_domains (a list in Cluster API's v1beta2
// shape, or a map from name to {controlPlane, attributes}).
func readClusterOutputs(outputs map[string]run.Output) (*infrav1.APIEndpoint, []infrav1.FailureDomain, error) {
	var endpoint *infrav1.APIEndpoint
	if o, ok := outputs[OutputControlPlaneEndpoint]; ok {
		var asString string
		var asObject struct {
			Host string `json:"host"`
			Port int32  `json:"port"`
		}
		switch {
		case json.Unmarshal(o.Value, &asString) == nil:
			host, port, err := net.SplitHostPort(asString)
			p, perr := strconv.ParseInt(port, 10, 32)
			if err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
				return nil, nil, fmt.Errorf("output %s = %q: want \"host:port\" or {host, port}", OutputControlPlaneEndpoint, asString)
			}
			endpoint = &infrav1.APIEndpoint{Host: host, Port: int32(p)}
		case json.Unmarshal(o.Value, &asObject) == nil && asObject.Host != "" && asObject.Port >= 1 && asObject.Port <= 65535:
			endpoint = &infrav1.APIEndpoint{Host: asObject.Host, Port: asObject.Port}
		default:
			return nil, nil, fmt.Errorf("output %s = %s: want \"host:port\" or {host, port} with a port from 1 to 65535", OutputControlPlaneEndpoint, o.Value)
		}
	}
	var domains []infrav1.FailureDomain
	if o, ok := outputs[OutputFailureDomains]; ok {
		if err := json.Unmarshal(o.Value, &domains); err != nil {
			var byName map[string]struct {
				ControlPlane *bool             `json:"controlPlane"`
				Attributes   map[string]string `json:"attributes"`
			}
			if err := json.Unmarshal(o.Value, &byName); err != nil {
				return nil, nil, fmt.Errorf("output %s: want a list of {name, controlPlane, attributes} or a map from name to {controlPlane, attributes}", OutputFailureDomains)
			}
			domains = nil
			for name, fd := range byName {
				domains = append(domains, infrav1.FailureDomain{Name: name, ControlPlane: fd.ControlPlane, Attributes: fd.Attributes})
			}
		}
		slices.SortFunc(domains, func(a, b infrav1.FailureDomain) int { return strings.Compare(a.Name, b.Name) })
		for _, fd := range domains {
			if fd.Name == "" {
				return nil, nil, fmt.Errorf("output %s: a failure domain has no name", OutputFailureDomains)
			}
		}
	}
	return endpoint, domains, nil
}
