package terraformmachinepool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	ReasonWaitingForOwner                      = "WaitingForMachinePoolOwner"
	ReasonWaitingForClusterInfrastructureReady = "WaitingForClusterInfrastructureReady"
	ReasonWaitingForBootstrapData              = "WaitingForBootstrapData"
)

// OutputProviderIDs is the output with the provider IDs of the instances.
const OutputProviderIDs = "provider_ids"

type syncCtx struct {
	pool    *infrav1.TerraformMachinePool
	key     cache.ObjectName
	owner   *unstructured.Unstructured // the MachinePool
	cluster *unstructured.Unstructured
	tc      *infrav1.TerraformCluster
	run     *workspace.Run
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx).WithValues("terraformMachinePool", key)
	ctx = klog.NewContext(ctx, logger)
	cached, err := c.lister.TerraformMachinePools(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := cached.Annotations[workspace.ManagedByAnnotation]; ok {
		return nil
	}
	if !c.written.Seen(key, cached.ResourceVersion) {
		c.queue.AddAfter(key, 250*time.Millisecond)
		return nil
	}
	if !c.expectations.Satisfied(key) {
		return nil
	}
	s := &syncCtx{pool: cached.DeepCopy(), key: key}
	original := cached.Status.DeepCopy()
	s.owner = workspace.OwnerOfKind(cached, "MachinePool", c.pools.ByNamespace(cached.Namespace))
	var fallback string
	if s.owner != nil {
		fallback, _, _ = unstructured.NestedString(s.owner.Object, "spec", "clusterName")
	}
	s.cluster, s.tc = workspace.ClusterOf(cached, fallback, c.clusters, c.tcs)
	var defaults *infrav1.JobPolicy
	if s.tc != nil && s.tc.Spec.Defaults != nil {
		defaults = s.tc.Spec.Defaults.Jobs
	}
	s.run = c.engine.NewRun(s.pool, defaults)

	err = c.reconcile(ctx, s)
	if serr := c.writeStatus(ctx, s.pool, original); serr != nil && !apierrors.IsNotFound(serr) {
		err = errors.Join(err, serr)
	}
	if err == nil && s.run.Requeue > 0 {
		c.queue.AddAfter(key, s.run.Requeue)
	}
	return err
}

func (c *Controller) reconcile(ctx context.Context, s *syncCtx) error {
	l := workspace.Lifecycle{
		Finalizer: infrav1.TerraformMachinePoolFinalizer,
		Cluster:   s.cluster,
		Update:    func(ctx context.Context) error { return c.update(ctx, s) },
		Render:    func() (*util.Inputs, error) { return c.render(ctx, s) },
	}
	if s.owner == nil {
		l.OwnerMissing = &workspace.Wait{Reason: ReasonWaitingForOwner, Message: "Waiting for a MachinePool to own this TerraformMachinePool: Cluster API sets the owner reference"}
	}
	live, err := c.engine.Reconcile(ctx, s.run, l)
	if err != nil || !live {
		return err
	}
	return c.reconcileNormal(ctx, s)
}

func (c *Controller) reconcileNormal(ctx context.Context, s *syncCtx) error {
	pool := s.pool
	if s.cluster == nil || !workspace.InfrastructureProvisioned(s.cluster) {
		c.engine.SetReady(s.run, metav1.ConditionFalse, ReasonWaitingForClusterInfrastructureReady, "Waiting for the Cluster's infrastructure to be provisioned")
		return nil
	}
	if name, _, _ := unstructured.NestedString(s.owner.Object, "spec", "template", "spec", "bootstrap", "dataSecretName"); name == "" {
		c.engine.SetReady(s.run, metav1.ConditionFalse, ReasonWaitingForBootstrapData, "Waiting for the bootstrap provider to set MachinePool spec.template.spec.bootstrap.dataSecretName")
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
	ids, err := readProviderIDs(res.Outputs)
	if err != nil {
		c.engine.InvalidOutput(s.run, err)
		return nil
	}
	if !slices.Equal(pool.Spec.ProviderIDList, ids) {
		pool.Spec.ProviderIDList = ids
		if err := c.update(ctx, s); err != nil {
			return err
		}
	}
	pool.Status.Replicas = int32(len(ids))
	c.engine.Applied(s.run, in.Hash, job, res)
	return nil
}

// render makes the pool's inputs: CAPTF's (docs/inputs.md), the replicas,
// the bootstrap data and the cluster's exports, with the user's variables.
func (c *Controller) render(ctx context.Context, s *syncCtx) (*util.Inputs, error) {
	pool := s.pool
	inputs := map[string]any{
		"captf_cluster_name":    pool.Labels[workspace.ClusterNameLabel],
		"captf_namespace":       pool.Namespace,
		"captf_name":            pool.Name,
		"captf_kind":            gvk.Kind,
		"captf_cluster_exports": workspace.Exports(s.tc),
	}
	if s.cluster != nil {
		inputs["captf_cluster_name"] = s.cluster.GetName()
	}
	if mp := s.owner; mp != nil {
		replicas, found, _ := unstructured.NestedInt64(mp.Object, "spec", "replicas")
		if !found {
			replicas = 1 // Cluster API's default
		}
		version, _, _ := unstructured.NestedString(mp.Object, "spec", "template", "spec", "version")
		domains, _, _ := unstructured.NestedStringSlice(mp.Object, "spec", "failureDomains")
		inputs["captf_machine_pool_name"] = mp.GetName()
		inputs["captf_replicas"] = replicas
		inputs["captf_kubernetes_version"] = version
		inputs["captf_failure_domains"] = append([]string{}, domains...)
		if name, _, _ := unstructured.NestedString(mp.Object, "spec", "template", "spec", "bootstrap", "dataSecretName"); name != "" {
			if err := workspace.BootstrapInputs(ctx, c.kube, pool.Namespace, name, inputs); err != nil {
				return nil, err
			}
		}
	}
	return util.Render(ctx, c.kube, pool.Namespace, pool.Spec.WorkspaceSpec, inputs)
}

func (c *Controller) update(ctx context.Context, s *syncCtx) error {
	status := s.pool.Status
	updated, err := c.captf.InfrastructureV1alpha1().TerraformMachinePools(s.pool.Namespace).Update(ctx, s.pool, metav1.UpdateOptions{FieldManager: ControllerName})
	if apierrors.IsNotFound(err) && s.pool.DeletionTimestamp != nil {
		return nil
	}
	if err != nil {
		return err
	}
	c.written.Wrote(s.key, updated.ResourceVersion)
	*s.pool = *updated
	s.pool.Status = status
	return nil
}

func (c *Controller) writeStatus(ctx context.Context, pool *infrav1.TerraformMachinePool, original *infrav1.TerraformMachinePoolStatus) error {
	if pool.DeletionTimestamp != nil && !workspace.HoldsFinalizer(pool, infrav1.TerraformMachinePoolFinalizer) {
		return nil
	}
	pool.Status.ObservedGeneration = pool.Generation
	if equality.Semantic.DeepEqual(&pool.Status, original) {
		return nil
	}
	updated, err := c.captf.InfrastructureV1alpha1().TerraformMachinePools(pool.Namespace).UpdateStatus(ctx, pool, metav1.UpdateOptions{FieldManager: ControllerName})
	if err != nil {
		return err
	}
	c.written.Wrote(cache.MetaObjectToName(pool), updated.ResourceVersion)
	return nil
}

// readProviderIDs reads provider_ids: a list of non-empty strings.
func readProviderIDs(outputs map[string]runner.Output) ([]string, error) {
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
	}
	return ids, nil
}
