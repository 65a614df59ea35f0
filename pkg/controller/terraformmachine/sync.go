package terraformmachine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/runner"
)

// Ready reasons: Cluster API's own where it has them.
const (
	ReasonWaitingForOwner                      = "WaitingForMachineOwner"
	ReasonWaitingForClusterInfrastructureReady = "WaitingForClusterInfrastructureReady"
	ReasonWaitingForControlPlaneInitialized    = "WaitingForControlPlaneInitialized"
	ReasonWaitingForBootstrapData              = "WaitingForBootstrapData"
)

// Module outputs a machine module gives.
const (
	OutputProviderID    = "provider_id"
	OutputAddresses     = "addresses"
	OutputFailureDomain = "failure_domain"
)

type syncCtx struct {
	tm      *infrav1.TerraformMachine
	key     cache.ObjectName
	machine *unstructured.Unstructured
	cluster *unstructured.Unstructured
	tc      *infrav1.TerraformCluster // the cluster's infrastructure, when it is a TerraformCluster
	run     *workspace.Run
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx).WithValues("terraformMachine", key)
	ctx = klog.NewContext(ctx, logger)
	cached, err := c.lister.TerraformMachines(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := cached.Annotations[workspace.ManagedByAnnotation]; ok {
		return nil // externally managed: hands off
	}
	if !c.written.Seen(key, cached.ResourceVersion) {
		c.queue.AddAfter(key, 250*time.Millisecond)
		return nil
	}
	if !c.expectations.Satisfied(key) {
		return nil
	}
	s := &syncCtx{tm: cached.DeepCopy(), key: key}
	original := cached.Status.DeepCopy()
	s.machine = c.ownerMachine(cached)
	var fallback string
	if s.machine != nil {
		fallback, _, _ = unstructured.NestedString(s.machine.Object, "spec", "clusterName")
	}
	s.cluster, s.tc = workspace.ClusterOf(cached, fallback, c.clusters, c.tcs)
	var defaults *infrav1.JobPolicy
	if s.tc != nil && s.tc.Spec.Defaults != nil {
		defaults = s.tc.Spec.Defaults.Jobs
	}
	s.run = c.engine.NewRun(s.tm, defaults)

	err = c.reconcile(ctx, s)
	if serr := c.writeStatus(ctx, s.tm, original); serr != nil && !apierrors.IsNotFound(serr) {
		err = errors.Join(err, serr)
	}
	if err == nil && s.run.Requeue > 0 {
		c.queue.AddAfter(key, s.run.Requeue)
	}
	return err
}

func (c *Controller) reconcile(ctx context.Context, s *syncCtx) error {
	l := workspace.Lifecycle{
		Finalizer: infrav1.TerraformMachineFinalizer,
		Cluster:   s.cluster,
		Update:    func(ctx context.Context) error { return c.update(ctx, s) },
		Render:    func() (*util.Inputs, error) { return c.render(ctx, s) },
	}
	if s.machine == nil {
		l.OwnerMissing = &workspace.Wait{Reason: ReasonWaitingForOwner, Message: "Waiting for a Machine to own this TerraformMachine: Cluster API sets the owner reference"}
	}
	live, err := c.engine.Reconcile(ctx, s.run, l)
	if err != nil || !live {
		return err
	}
	return c.reconcileNormal(ctx, s)
}

func (c *Controller) reconcileNormal(ctx context.Context, s *syncCtx) error {
	tm := s.tm
	if reason, msg := c.waiting(s); reason != "" {
		c.engine.SetReady(s.run, metav1.ConditionFalse, reason, msg)
		return nil
	}
	in, err := c.render(ctx, s)
	if err != nil {
		var ie *util.InputError
		if errors.As(err, &ie) {
			c.engine.InputError(s.run, ie)
			return nil
		}
		return err
	}
	res, job, err := c.engine.Apply(ctx, s.run, in)
	if err != nil || res == nil {
		return err
	}
	providerID, addresses, failureDomain, err := readMachineOutputs(res.Outputs)
	if err != nil {
		c.engine.InvalidOutput(s.run, err)
		return nil
	}
	if tm.Spec.ProviderID != "" && tm.Spec.ProviderID != providerID {
		c.engine.InvalidOutput(s.run, fmt.Errorf("output %s is %q, but spec.providerID is already %q and cannot change: the module replaced the instance; delete the Machine to get a new one", OutputProviderID, providerID, tm.Spec.ProviderID))
		return nil
	}
	if tm.Spec.ProviderID == "" {
		tm.Spec.ProviderID = providerID
		if err := c.update(ctx, s); err != nil {
			return err
		}
	}
	tm.Status.Addresses = addresses
	tm.Status.FailureDomain = failureDomain
	c.engine.Applied(s.run, in.Hash, job, res)
	return nil
}

// waiting says what a machine waits for before its first apply, with Cluster
// API's reasons; a deletion never waits.
func (c *Controller) waiting(s *syncCtx) (string, string) {
	if s.cluster == nil {
		return ReasonWaitingForClusterInfrastructureReady, fmt.Sprintf("Waiting for Cluster %q (label %s)", s.tm.Labels[workspace.ClusterNameLabel], workspace.ClusterNameLabel)
	}
	if !workspace.InfrastructureProvisioned(s.cluster) {
		return ReasonWaitingForClusterInfrastructureReady, fmt.Sprintf("Waiting for Cluster %s's infrastructure to be provisioned", s.cluster.GetName())
	}
	if name, _, _ := unstructured.NestedString(s.machine.Object, "spec", "bootstrap", "dataSecretName"); name == "" {
		_, isControlPlane := s.machine.GetLabels()[workspace.ControlPlaneLabel]
		initialized, _, _ := unstructured.NestedBool(s.cluster.Object, "status", "initialization", "controlPlaneInitialized")
		if !isControlPlane && !initialized {
			return ReasonWaitingForControlPlaneInitialized, "Waiting for the control plane to be initialized"
		}
		return ReasonWaitingForBootstrapData, "Waiting for the bootstrap provider to set Machine spec.bootstrap.dataSecretName"
	}
	return "", ""
}

// render makes the machine's inputs: CAPTF's (docs/inputs.md), the bootstrap
// data, and the cluster's exports, with the user's variables.
func (c *Controller) render(ctx context.Context, s *syncCtx) (*util.Inputs, error) {
	tm, m := s.tm, s.machine
	inputs := map[string]any{
		"captf_cluster_name": tm.Labels[workspace.ClusterNameLabel],
		"captf_namespace":    tm.Namespace,
		"captf_name":         tm.Name,
		"captf_kind":         gvk.Kind,
	}
	if s.cluster != nil {
		inputs["captf_cluster_name"] = s.cluster.GetName()
	}
	inputs["captf_cluster_exports"] = workspace.Exports(s.tc)
	if m != nil {
		_, isControlPlane := m.GetLabels()[workspace.ControlPlaneLabel]
		fd, _, _ := unstructured.NestedString(m.Object, "spec", "failureDomain")
		version, _, _ := unstructured.NestedString(m.Object, "spec", "version")
		inputs["captf_machine_name"] = m.GetName()
		inputs["captf_control_plane"] = isControlPlane
		inputs["captf_failure_domain"] = fd
		inputs["captf_kubernetes_version"] = version
		if name, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "dataSecretName"); name != "" {
			if err := workspace.BootstrapInputs(ctx, c.kube, tm.Namespace, name, inputs); err != nil {
				return nil, err
			}
		}
	}
	return util.Render(ctx, c.kube, tm.Namespace, tm.Spec.WorkspaceSpec, inputs)
}

// update writes the spec or metadata and keeps the status being built.
func (c *Controller) update(ctx context.Context, s *syncCtx) error {
	status := s.tm.Status
	updated, err := c.captf.InfrastructureV1alpha1().TerraformMachines(s.tm.Namespace).Update(ctx, s.tm, metav1.UpdateOptions{FieldManager: ControllerName})
	if apierrors.IsNotFound(err) && s.tm.DeletionTimestamp != nil {
		return nil
	}
	if err != nil {
		return err
	}
	c.written.Wrote(s.key, updated.ResourceVersion)
	*s.tm = *updated
	s.tm.Status = status
	return nil
}

func (c *Controller) writeStatus(ctx context.Context, tm *infrav1.TerraformMachine, original *infrav1.TerraformMachineStatus) error {
	if tm.DeletionTimestamp != nil && !workspace.HoldsFinalizer(tm, infrav1.TerraformMachineFinalizer) {
		return nil
	}
	tm.Status.ObservedGeneration = tm.Generation
	if equality.Semantic.DeepEqual(&tm.Status, original) {
		return nil
	}
	updated, err := c.captf.InfrastructureV1alpha1().TerraformMachines(tm.Namespace).UpdateStatus(ctx, tm, metav1.UpdateOptions{FieldManager: ControllerName})
	if err != nil {
		return err
	}
	c.written.Wrote(cache.MetaObjectToName(tm), updated.ResourceVersion)
	return nil
}

// ownerMachine is the Machine that owns tm.
func (c *Controller) ownerMachine(tm *infrav1.TerraformMachine) *unstructured.Unstructured {
	return workspace.OwnerOfKind(tm, "Machine", c.machines.ByNamespace(tm.Namespace))
}

// readMachineOutputs reads provider_id (required), addresses (a list of
// {type, address}, or of plain addresses taken as InternalIP) and
// failure_domain.
func readMachineOutputs(outputs map[string]runner.Output) (string, []infrav1.MachineAddress, string, error) {
	var providerID string
	o, ok := outputs[OutputProviderID]
	if !ok {
		return "", nil, "", fmt.Errorf("the module has no %s output: a machine module must output its instance's provider ID (e.g. \"aws:///eu-west-1a/i-0123\")", OutputProviderID)
	}
	if err := json.Unmarshal(o.Value, &providerID); err != nil || providerID == "" {
		return "", nil, "", fmt.Errorf("output %s = %s: want a non-empty string", OutputProviderID, o.Value)
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
