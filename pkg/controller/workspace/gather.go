package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/runnerjob"
)

// newSync finds what obj's sync reads besides obj: its owner, its Cluster,
// the Cluster's TerraformCluster, and its Jobs. cached is obj as the cache
// holds it, never written to.
func (c *Controller[T]) newSync(cached, obj T) *Sync {
	owner := c.kind.Owner.OwnerOf(obj, c.kind.GVK.Group, c.kind.GVK.Kind, c.owners)
	cluster, tc := owner, (*infrav1.TerraformCluster)(nil)
	if c.belongsToCluster {
		var fallback string
		if owner != nil {
			fallback = c.kind.Owner.ClusterName(owner)
		}
		cluster, tc = clusterOf(obj, fallback, c.clusters, c.tcs)
	}
	var defaults *infrav1.JobPolicy
	if tc != nil && tc.Spec.Defaults != nil {
		defaults = tc.Spec.Defaults.Jobs
	}
	s := c.engine.NewSync(obj, defaults)
	s.Owner, s.Cluster, s.TerraformCluster = owner, cluster, tc
	base := cached // what the API server holds, as far as this sync knows
	s.Update = func(ctx context.Context) error {
		err := c.update(ctx, base, obj)
		if err == nil {
			base = obj.DeepCopyObject().(T)
		}
		s.Unwritten = s.Unwritten && err != nil
		return err
	}
	if c.kind.Gate != nil {
		s.Gate = c.kind.Gate(obj)
	}
	return s
}

// NewSync starts a sync of obj; clusterDefaults is the cluster's
// spec.defaults.jobs for machines and pools, nil for clusters.
func (e *engine) NewSync(obj Object, clusterDefaults *infrav1.JobPolicy) *Sync {
	r := &Sync{Obj: obj, Key: cache.MetaObjectToName(obj), Names: e.Names(obj), Policy: runnerjob.EffectivePolicy(obj.Workspace().Jobs, clusterDefaults),
		ReapplyAfter: e.remediationTime(obj)}
	r.Jobs = runnerjob.OfObject(e.JobIndex, obj)
	return r
}

// clusterOf finds the Cluster of a machine or pool by its cluster-name label
// (Cluster API sets it; fallback names it before then), and its
// TerraformCluster when that is the Cluster's infrastructure.
func clusterOf(obj metav1.Object, fallback string, clusters cache.GenericLister, tcs infralisters.TerraformClusterLister) (*capi.Object, *infrav1.TerraformCluster) {
	name := obj.GetLabels()[capi.ClusterNameLabel]
	if name == "" {
		name = fallback
	}
	if name == "" {
		return nil, nil
	}
	o, err := clusters.ByNamespace(obj.GetNamespace()).Get(name)
	if err != nil {
		return nil, nil
	}
	cluster := capi.ObjectOf(o)
	if cluster == nil || cluster.Kind != capi.Cluster.Kind {
		return nil, nil
	}
	ref, ok := capi.Cluster.InfrastructureRef(cluster, infrav1.SchemeGroupVersion.Group, "TerraformCluster")
	if !ok {
		return cluster, nil
	}
	tc, err := tcs.TerraformClusters(ref.Namespace).Get(ref.Name)
	if err != nil {
		return cluster, nil
	}
	return cluster, tc
}

// gatherStart reads what decides whether a Job of op may start
// (decideStart), in the checks' order: a check that stops the Job ends
// the reading, so that a held Job costs no read, and a failed read hides
// no hold. Its live read: the runner's ServiceAccount, when it is not
// CAPTF's own (access.go).
func (e *engine) gatherStart(ctx context.Context, r *Sync, op infrav1.Operation, policy *planpolicy.Input) (startFacts, error) {
	st := r.Obj.WorkspaceStatus()
	f := startFacts{LastRestore: st.LastRestore}
	if c := meta.FindStatusCondition(st.Conditions, infrav1.ConditionStateRescued); c != nil && c.Status == metav1.ConditionTrue {
		f.Rescued = c
	}
	if errs := e.RunnerPods.Check(&r.Policy.JobPolicy, field.NewPath("spec", "jobs")); len(errs) > 0 {
		f.PodRules = errs.ToAggregate().Error()
	}
	if decideStart(f).Stop != startGo { // decided by what the object says
		return f, nil
	}
	plans := op == infrav1.OperationDrift
	if g := r.Gate; g != nil && op == infrav1.OperationApply {
		plans = runnerjob.OnlyPlans(op, g.Policy, g.ApprovedPlan, g.ApprovedDestructivePlan, policy)
	}
	if err := e.Access.CheckServiceAccount(ctx, r.Obj.GetNamespace(), runnerjob.ServiceAccountFor(r.Policy.JobPolicy, plans)); err != nil {
		if !errors.As(err, &f.Account) {
			return f, err
		}
		return f, nil
	}
	var err error
	f.State, err = e.gatherState(ctx, r)
	return f, err
}

// gatherState reads what the state check decides on (decideState). Its
// live read: the state's head again when the cache says an applied object
// has none, as the cache may lag.
func (e *engine) gatherState(ctx context.Context, r *Sync) (stateFacts, error) {
	obj, n := r.Obj, r.Names
	f := stateFacts{Kind: e.GVK.Kind, Label: n.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), State: n.State()}
	c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, infrav1.ConditionStateMissing)
	f.MissingReported = c != nil && c.Status != metav1.ConditionFalse
	var err error
	if f.Applied, err = e.mayHaveInfrastructure(ctx, r); err != nil {
		return f, err
	}
	if f.Head, err = e.secretMeta(ctx, f.Namespace, f.State, false); err != nil {
		return f, err
	}
	if f.Applied && (f.Head == nil || !f.Head.HasState) && e.StateSecrets != nil {
		f.Head, err = e.secretMeta(ctx, f.Namespace, f.State, true)
	}
	return f, err
}

// secretMeta reads a state or durable-inputs Secret's metadata: from the
// cache when there is one, else from the API server. nil when not found.
func (e *engine) secretMeta(ctx context.Context, namespace, name string, live bool) (*StateSecretMeta, error) {
	if e.StateSecrets != nil && !live {
		o, exists, err := e.StateSecrets.GetByKey(namespace + "/" + name)
		if err != nil || !exists {
			return nil, err
		}
		m, ok := o.(*StateSecretMeta)
		if !ok {
			return nil, fmt.Errorf("the state Secrets' cache holds a %T for %s/%s", o, namespace, name)
		}
		return m, nil
	}
	sec, err := e.Kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return StateSecretMetaFrom(sec), nil
}

// mayHaveInfrastructure tells whether obj's infrastructure may exist: its
// status, its provider IDs or its durable inputs say an apply succeeded.
// The status alone is not enough: clusterctl move and restores from
// backups do not carry it; a restore may bring the object without its
// Secrets, and only its provider IDs then tell that instances exist.
func (e *engine) mayHaveInfrastructure(ctx context.Context, r *Sync) (bool, error) {
	obj := r.Obj
	st := obj.WorkspaceStatus()
	if st.AppliedInputsHash != "" || (st.Initialization != nil && st.Initialization.Provisioned != nil && *st.Initialization.Provisioned) || providerid.HoldsInstances(obj) {
		return true, nil
	}
	durable, err := e.secretMeta(ctx, obj.GetNamespace(), r.Names.DurableInputs(), false)
	return durable != nil, err
}

// driftPolicy is the object's drift policy with the defaults filled in.
func (e *engine) driftPolicy(obj Object) (enabled bool, interval time.Duration, remediate bool) {
	d := obj.Workspace().Drift
	interval = e.DriftDefaultInterval
	if d == nil {
		return interval > 0, interval, false
	}
	if d.Interval != nil {
		interval = d.Interval.Duration
	}
	enabled = (d.Enabled == nil || *d.Enabled) && interval > 0
	return enabled, interval, d.Remediation == infrav1.DriftRemediationApply
}

// remediationTime is when drift was found that the object's policy
// remediates by an apply: Apply applies again if it applied before then.
func (e *engine) remediationTime(obj Object) time.Time {
	st := obj.WorkspaceStatus()
	c := meta.FindStatusCondition(st.Conditions, infrav1.ConditionDrifted)
	if _, _, remediate := e.driftPolicy(obj); !remediate || c == nil || c.Status != metav1.ConditionTrue || st.LastDriftCheckTime == nil {
		return time.Time{}
	}
	return st.LastDriftCheckTime.Time
}

// gatherPlanPolicy reads the plan policy rules that select r's object:
// what its apply Jobs judge their plans by (nil: none). Its live read: the
// namespace's labels, when a policy selects namespaces by them.
func (e *engine) gatherPlanPolicy(ctx context.Context, r *Sync) (*planpolicy.Input, error) {
	if e.PlanPolicies == nil {
		return nil, nil
	}
	policies, err := e.PlanPolicies.List(labels.Everything())
	if err != nil || len(policies) == 0 {
		return nil, err
	}
	obj := r.Obj
	nsLabels := func() (map[string]string, error) {
		ns, err := e.Kube.CoreV1().Namespaces().Get(ctx, obj.GetNamespace(), metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s for its plan policies: %w", obj.GetNamespace(), err)
		}
		return ns.Labels, nil
	}
	o := planpolicy.Object{Kind: e.GVK.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Labels: obj.GetLabels()}
	if ref := obj.Workspace().Module.CatalogRef; ref != nil {
		o.CatalogEntry, o.CatalogVersion = ref.Name, ref.Version
	}
	rules, err := planpolicy.Select(policies, nsLabels, o.CatalogEntry)
	if err != nil || len(rules) == 0 {
		return nil, err
	}
	return &planpolicy.Input{Rules: rules, Object: o}, nil
}
