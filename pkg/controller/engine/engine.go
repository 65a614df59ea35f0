// Package engine is what every controller that runs Terraform shares:
// rendering inputs into runner Jobs, one at a time, with deterministic names
// and expectations; reading results; retries with backoff; destroy with the
// durable inputs; abandon; and the conditions that report all of it.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerpod"
	"github.com/captf/captf/pkg/statestore"
)

// Ready reasons every kind uses, besides Cluster API's.
const (
	ReasonApplying      = "Applying"
	ReasonApplied       = "Applied"
	ReasonApplyFailed   = "ApplyFailed"
	ReasonDestroying    = "Destroying"
	ReasonDestroyFailed = "DestroyFailed"
	ReasonInvalidOutput = "InvalidOutput"
	ReasonNotPaused     = "NotPaused"
	ReasonPaused        = "Paused"
	// ReasonNamespaceTerminating: no Job can be created in the namespace.
	ReasonNamespaceTerminating = "NamespaceTerminating"
	ReasonAbandoning           = "Abandoning"
)

// Event reasons, besides the Ready reasons above.
const (
	ReasonPlanApproved  = "PlanApproved"
	ReasonAbandoned     = "Abandoned"
	ReasonDestroyed     = "Destroyed"
	ReasonRefreshFailed = "RefreshFailed"
)

// Object is a Terraform* object the engine runs Terraform for.
type Object interface {
	metav1.Object
	runtime.Object
	Workspace() *infrav1.WorkspaceSpec
	WorkspaceStatus() *infrav1.WorkspaceStatus
}

// Config is what the manager tells every controller that runs Terraform.
type Config struct {
	Access               *RunnerAccess
	RunnerAPI            RunnerAPI
	RunnerPods           runnerpod.Rules
	RunnerImage          string
	StateBackups         int
	DriftDefaultInterval time.Duration
	// MaxStateBytes bounds every state and backup read (manager and runner).
	MaxStateBytes int64
	// StateSecrets is the metadata of state and durable-inputs Secrets
	// (StateSecretsSelector): the checks before every Job read it, and its
	// events bring a missing state to light at once. Nil: read on demand.
	StateSecrets informers.GenericInformer
	// Metrics, if set, reports every controller's objects at each scrape.
	Metrics *Collector
	// Slots, if set, caps the Jobs that run at once.
	Slots *JobSlots
	// BootstrapConfigs reads the bootstrap configs Machines name; nil:
	// bootstrap data is read only from Secrets its Machine controls or
	// that are labelled as bootstrap data.
	BootstrapConfigs BootstrapConfigReader
	// Clock is the controllers' time; nil is the real one.
	Clock clock.PassiveClock
}

// Engine runs Terraform for the objects of one kind.
type Engine struct {
	Kube          kubernetes.Interface
	Jobs          JobControl
	JobIndex      cache.Indexer
	Recorder      record.EventRecorder
	Expectations  *controller.Expectations
	Access        *RunnerAccess
	RunnerAPI     RunnerAPI
	RunnerPods    runnerpod.Rules
	GVK           schema.GroupVersionKind
	RunnerImage   string
	StateBackups  int
	MaxStateBytes int64
	// StateSecrets lists the metadata of state and durable-inputs Secrets;
	// nil reads them on demand.
	StateSecrets cache.GenericLister
	// DriftDefaultInterval is the drift check interval of objects that
	// set none.
	DriftDefaultInterval time.Duration
	// Clock is the time of every decision (backoff, drift, grace).
	Clock clock.PassiveClock
	// Slots caps the Jobs that run at once; nil: no cap.
	Slots *JobSlots
	// BootstrapConfigs reads bootstrap configs (Config.BootstrapConfigs).
	BootstrapConfigs BootstrapConfigReader
}

// Sync is what one sync of one object knows and decides.
type Sync struct {
	Obj    Object // a copy: safe to change
	Key    cache.ObjectName
	Policy Policy
	Jobs   []*CachedJob // of this object, newest first
	// Gate holds a TerraformCluster's approval policy and approvals; nil
	// for machines and pools, which are never gated.
	Gate *approval.Gate
	// ReapplyAfter asks for an apply of inputs already applied when the
	// last apply Job was created before it: drift to remediate.
	ReapplyAfter time.Time
	// Requeue asks for a sync after this long.
	Requeue time.Duration
	// Update writes the object's metadata and spec, and keeps the status
	// being built.
	Update func(context.Context) error
	// Owner is the object's Cluster API owner (a Cluster, Machine or
	// MachinePool), nil until Cluster API sets it.
	Owner *unstructured.Unstructured
	// Cluster is the Cluster the object belongs to, and TerraformCluster
	// that Cluster's infrastructure when it is one.
	Cluster          *unstructured.Unstructured
	TerraformCluster *infrav1.TerraformCluster
}

// requeueWithin asks for a sync after wait at the latest.
func (r *Sync) requeueWithin(wait time.Duration) {
	if r.Requeue == 0 || wait < r.Requeue {
		r.Requeue = wait
	}
}

// NewSync starts a sync of obj; clusterDefaults is the cluster's
// spec.defaults.jobs for machines and pools, nil for clusters.
func (e *Engine) NewSync(obj Object, clusterDefaults *infrav1.JobPolicy) *Sync {
	r := &Sync{Obj: obj, Key: cache.MetaObjectToName(obj), Policy: EffectivePolicy(obj.Workspace().Jobs, clusterDefaults),
		ReapplyAfter: e.remediationTime(obj)}
	r.Jobs = objectJobs(e.JobIndex, obj)
	return r
}

// Names names the object's Secrets, Lease and Jobs.
func (e *Engine) Names(obj metav1.Object) names.Object {
	return names.ObjectOf(e.GVK.Kind, obj.GetName())
}

// Apply drives the apply of in. It returns the result and Job of an apply of
// in that succeeded and is not in the status yet, for the caller to read the
// kind's outputs and then call Applied. Otherwise it returns nil: a Job
// runs, was started, failed (retried after a backoff) or in is applied.
func (e *Engine) Apply(ctx context.Context, r *Sync, in *Inputs) (*run.Result, *CachedJob, error) {
	if active := activeJob(r.Jobs); active != nil {
		return nil, nil, e.whileRunning(ctx, r, active, in.Hash)
	}
	if err := e.cleanupHistory(ctx, r); err != nil {
		klog.FromContext(ctx).Error(err, "Cleaning up old Jobs")
	}
	st := r.Obj.WorkspaceStatus()
	latest := latestJob(r.Jobs, infrav1.OperationApply, in.Hash)
	// The state changed under the last apply (a restore, or drift to
	// remediate): plan and apply again.
	changed := e.stateChangedAfter(r)
	if latest != nil && latest.CreationTimestamp.Time.Before(changed) {
		if _, succeeded := JobFinished(latest); succeeded {
			return nil, nil, e.start(ctx, r, infrav1.OperationApply, in.Hash, latest.Attempt+1, in.SecretData())
		}
	}
	// Other inputs were applied after the last Job of these (the spec went
	// back to earlier inputs): that Job's plan and outputs are of another
	// infrastructure than today's.
	if latest != nil && st.AppliedInputsHash != in.Hash && st.LastAppliedTime != nil && !FinishTime(latest).After(st.LastAppliedTime.Time) {
		return nil, nil, e.start(ctx, r, infrav1.OperationApply, in.Hash, latest.Attempt+1, in.SecretData())
	}
	if st.AppliedInputsHash == in.Hash {
		// A refresh of the applied inputs: the caller reads its outputs.
		if res, job, err := e.refreshResult(ctx, r); err != nil || res != nil {
			return res, job, err
		}
	}
	if latest == nil {
		if st.AppliedInputsHash != in.Hash || (st.LastAppliedTime != nil && st.LastAppliedTime.Time.Before(changed)) {
			return nil, nil, e.start(ctx, r, infrav1.OperationApply, in.Hash, 0, in.SecretData())
		}
		// Applied, and its Jobs are gone from history (or the status came
		// back with a restore).
		e.upToDate(r)
		return nil, nil, e.CheckDrift(ctx, r, in.Hash)
	}
	if _, succeeded := JobFinished(latest); !succeeded {
		return nil, nil, e.applyFailed(ctx, r, latest, in)
	}
	// A re-apply of applied inputs is new when it finished after the
	// applied time the status holds.
	if st.AppliedInputsHash == in.Hash && st.LastAppliedTime != nil && !FinishTime(latest).After(st.LastAppliedTime.Time) {
		e.RecordJob(r, latest, run.OutcomeSucceeded)
		e.upToDate(r)
		return nil, nil, e.CheckDrift(ctx, r, in.Hash)
	}
	return e.applySucceeded(ctx, r, latest, in)
}

// Running reports a Job of the object that runs, unless it is a drift
// check (which Apply stops for changed inputs): while it runs nothing needs
// the inputs, and syncs that come with its progress (its pod, Cluster API's
// status patches) read no Secret or ConfigMap.
func (e *Engine) Running(ctx context.Context, r *Sync) (bool, error) {
	active := activeJob(r.Jobs)
	if active == nil || active.Operation == infrav1.OperationDrift {
		return false, nil
	}
	return true, e.whileRunning(ctx, r, active, "")
}

// whileRunning reports the running Job; a drift check never holds up an
// apply of other inputs: it is stopped.
func (e *Engine) whileRunning(ctx context.Context, r *Sync, active *CachedJob, hash string) error {
	op := active.Operation
	if op == infrav1.OperationDrift && r.Obj.WorkspaceStatus().AppliedInputsHash != hash {
		if err := e.Jobs.Delete(ctx, active, metav1.DeletePropagationBackground); err != nil {
			return err
		}
		klog.FromContext(ctx).V(2).Info("Stopped a drift check for an apply", "job", klog.KObj(active))
		return nil
	}
	e.RecordJob(r, active, "Running")
	if refused, err := e.podRefused(ctx, r, active); err != nil || refused {
		return err
	}
	if op == infrav1.OperationApply {
		e.setApplying(r, fmt.Sprintf("Job %s is applying the module", active.Name))
	}
	return nil
}

// stateChangedAfter is when the state last changed under the applied
// inputs: the last restore, or drift to remediate.
func (e *Engine) stateChangedAfter(r *Sync) time.Time {
	after := r.ReapplyAfter
	if lr := r.Obj.WorkspaceStatus().LastRestore; lr != nil && lr.Time.After(after) {
		after = lr.Time.Time
	}
	return after
}

// applySucceeded reads the result of a successful apply Job: a plan held
// for approval, a plan approved since (planned again), or outputs for the
// caller.
func (e *Engine) applySucceeded(ctx context.Context, r *Sync, job *CachedJob, in *Inputs) (*run.Result, *CachedJob, error) {
	res, err := e.readResult(ctx, r, job)
	if errors.Is(err, errNoResult) {
		// Nothing says what it applied or planned: plan again (an
		// applied module plans no change).
		klog.FromContext(ctx).Info("An apply Job's result is gone; planning again", "job", klog.KObj(job))
		return nil, nil, e.start(ctx, r, infrav1.OperationApply, in.Hash, job.Attempt+1, in.SecretData())
	}
	if err != nil {
		return nil, nil, err
	}
	if res.Outcome != run.OutcomeBlocked || res.Plan == nil {
		e.noPlanWaiting(r)
		return res, job, nil
	}
	e.RecordJob(r, job, run.OutcomeBlocked)
	if g := r.Gate; g != nil && g.Needed(res.Plan) == "" {
		// Approved: plan again, and apply only if the plan is still the
		// approved one.
		e.Recorder.Eventf(r.Obj, corev1.EventTypeNormal, ReasonPlanApproved, "Plan %s is approved: planning again to apply exactly it", res.Plan.Hash)
		return nil, nil, e.start(ctx, r, infrav1.OperationApply, in.Hash, job.Attempt+1, in.SecretData())
	}
	e.reportBlocked(r, job, res.Plan)
	return nil, nil, nil
}

// applyFailed reports a failed apply Job and retries it after a backoff,
// unless its runner rescued a state that must be looked at first.
func (e *Engine) applyFailed(ctx context.Context, r *Sync, job *CachedJob, in *Inputs) error {
	attempt, retry := e.failed(ctx, r, job, ReasonApplyFailed, "terraform failed")
	if !retry {
		return nil
	}
	return e.start(ctx, r, infrav1.OperationApply, in.Hash, attempt, in.SecretData())
}

// failed reports a failed Job: Ready False with the runner's reason (else
// reason) and a warning when that is news. It returns the attempt that
// retries the Job, and whether that is due now; never while the runner's
// rescued state waits for a person.
func (e *Engine) failed(ctx context.Context, r *Sync, job *CachedJob, reason, what string) (int, bool) {
	e.RecordJob(r, job, run.OutcomeFailed)
	res, _ := e.readResult(ctx, r, job) // a Job killed early has none: its status tells
	if e.holdForRescue(r, job, res) {
		return 0, false
	}
	msg := JobFailureMessage(job)
	if res != nil && res.Error != "" {
		msg = fmt.Sprintf("%s in %s (Job %s): %s", what, res.Stage, job.Name, res.Error)
		reason = cmp.Or(res.Reason, reason)
	}
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, reason, reason, msg)
	attempt := job.Attempt + 1
	if wait := Backoff(attempt) - e.Clock.Now().Sub(FinishTime(job)); wait > 0 {
		r.Requeue = wait
		return attempt, false
	}
	return attempt, true
}

// Applied records a successful apply (or refresh) in the status.
func (e *Engine) Applied(r *Sync, hash string, job *CachedJob, res *run.Result) {
	st := r.Obj.WorkspaceStatus()
	st.Outputs = publicOutputs(res.Outputs)
	if res.Operation == infrav1.OperationRefresh {
		t := metav1.NewTime(FinishTime(job))
		st.LastRefreshTime = &t
		e.RecordJob(r, job, run.OutcomeSucceeded)
		return
	}
	st.AppliedInputsHash = hash
	if res.Plan != nil {
		st.AppliedPlanHash = res.Plan.Hash
		st.LastPlan = &infrav1.PlanStatus{Hash: res.Plan.Hash, Operation: infrav1.OperationApply, Summary: res.Plan.Summary, Time: metav1.NewTime(FinishTime(job))}
	}
	msg := appliedMessage(st)
	applied := metav1.NewTime(FinishTime(job))
	st.LastAppliedTime = &applied
	provisioned := true
	st.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
	st.Ready = true
	e.RecordJob(r, job, run.OutcomeSucceeded)
	e.clearDrifted(r.Obj)
	e.SetReady(r, metav1.ConditionTrue, ReasonApplied, msg)
	e.Recorder.Event(r.Obj, corev1.EventTypeNormal, ReasonApplied, msg)
}

// upToDate reports an object whose inputs are applied and need no Job: Ready
// again after whatever wait came before (an owner, a pause, a restore).
func (e *Engine) upToDate(r *Sync) {
	e.noPlanWaiting(r)
	if c := meta.FindStatusCondition(r.Obj.WorkspaceStatus().Conditions, infrav1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonApplied {
		return
	}
	e.SetReady(r, metav1.ConditionTrue, ReasonApplied, appliedMessage(r.Obj.WorkspaceStatus()))
}

// appliedMessage is Ready's message of an applied object.
func appliedMessage(st *infrav1.WorkspaceStatus) string {
	if st.LastPlan == nil {
		return "The module is applied"
	}
	return fmt.Sprintf("The module is applied (plan %s: %s)", st.LastPlan.Hash, planCounts(st.LastPlan.Summary))
}

// InvalidOutput reports an output the kind cannot read.
func (e *Engine) InvalidOutput(r *Sync, err error) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, ReasonInvalidOutput, ReasonInvalidOutput, err.Error())
}

// Destroy drives the destroy of the object's infrastructure, with the inputs
// of its last successful apply (or, when a first apply failed half-way, with
// what render gives). It returns true once nothing is left to destroy and
// the object's state is released, or the object is abandoned: the caller
// then removes its finalizer.
func (e *Engine) Destroy(ctx context.Context, r *Sync, render func() (*Inputs, error)) (bool, error) {
	obj := r.Obj
	if obj.GetAnnotations()[infrav1.AnnotationAbandonInfrastructure] == "true" {
		// A Job still running would write state after the abandon: stop
		// it, and wait until its pod is gone.
		if running := unfinishedJob(r.Jobs); running != nil {
			if running.DeletionTimestamp == nil {
				if err := e.Jobs.Delete(ctx, running, metav1.DeletePropagationForeground); err != nil {
					return false, err
				}
			}
			e.SetReady(r, metav1.ConditionFalse, ReasonAbandoning, fmt.Sprintf("Stopping Job %s before abandoning: the state it writes is kept", running.Name))
			return false, nil
		}
		if err := e.abandon(ctx, obj); err != nil {
			return false, err
		}
		e.Recorder.Eventf(obj, corev1.EventTypeNormal, ReasonAbandoned, "Deleted without destroy (%s): state and backups are kept with label %s=true",
			infrav1.AnnotationAbandonInfrastructure, names.LabelAbandoned)
		return true, nil
	}
	if active := activeJob(r.Jobs); active != nil {
		e.RecordJob(r, active, "Running")
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Waiting for Job %s to finish before destroying", active.Name))
		return false, nil
	}
	if destroySucceeded(r.Jobs) {
		// Destroyed; only releasing the state (or the finalizer) failed.
		return e.release(ctx, r)
	}
	n := e.Names(obj)
	secrets := e.Kube.CoreV1().Secrets(obj.GetNamespace())
	durable, err := secrets.Get(ctx, n.DurableInputs(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	hasDurable := err == nil
	var hash string
	var data map[string][]byte
	if hasDurable {
		hash = HashSecretData(durable.Data)
	} else {
		head, err := secrets.Get(ctx, n.State(), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		if err != nil || !statestore.HasState(head) {
			if ok, _, err := e.checkState(ctx, r); err != nil || !ok {
				return false, err // applied, and the state is gone
			}
			return true, e.releaseState(ctx, obj) // never applied: nothing to destroy
		}
		in, err := render()
		if err != nil {
			e.SetReady(r, metav1.ConditionFalse, ReasonDestroyFailed, "No inputs to destroy with: "+err.Error())
			r.Requeue = time.Minute
			return false, nil
		}
		hash, data = in.Hash, in.SecretData()
	}
	attempt := 0
	if latest := latestJob(r.Jobs, infrav1.OperationDestroy, hash); latest != nil {
		var retry bool
		if attempt, retry = e.failed(ctx, r, latest, ReasonDestroyFailed, "terraform destroy failed"); !retry {
			return false, nil
		}
	}
	return false, e.start(ctx, r, infrav1.OperationDestroy, hash, attempt, data)
}

// release releases the state of an object whose destroy succeeded.
func (e *Engine) release(ctx context.Context, r *Sync) (bool, error) {
	if err := e.releaseState(ctx, r.Obj); err != nil {
		return false, fmt.Errorf("releasing the state of a destroyed object: %w", err)
	}
	e.Recorder.Event(r.Obj, corev1.EventTypeNormal, ReasonDestroyed, "The module's infrastructure is destroyed")
	return true, nil
}

// destroySucceeded tells whether the newest destroy Job succeeded after
// every apply.
func destroySucceeded(jobs []*CachedJob) bool {
	for _, j := range jobs { // newest first
		switch j.Operation {
		case infrav1.OperationApply, infrav1.OperationRefresh:
			return false
		case infrav1.OperationDestroy:
			_, succeeded := JobFinished(j)
			return succeeded
		}
	}
	return false
}

// holdForRescue stops the retries of a failed Job whose runner rescued the
// state terraform could not save: the current state may lack what that run
// created, and another run on it would create it a second time. A restore
// after the Job (of the rescued state, or any backup) lets it go on.
func (e *Engine) holdForRescue(r *Sync, job *CachedJob, res *run.Result) bool {
	if res == nil || res.RescuedState == "" {
		return false
	}
	if lr := r.Obj.WorkspaceStatus().LastRestore; lr != nil && lr.Time.After(FinishTime(job)) {
		SetCondition(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionFalse, ReasonRestored,
			fmt.Sprintf("Backup %s was restored after Job %s rescued its state into %s", lr.Backup, job.Name, res.RescuedState))
		return false
	}
	msg := fmt.Sprintf("Job %s could not save its state (%s: %s); CAPTF kept it in backup %s and runs nothing until a state is restored, "+
		"as the current state may lack what that run created. Compare them, then restore the right one: kubectl annotate %s -n %s %s %s=%s",
		job.Name, res.Stage, res.Error, res.RescuedState, strings.ToLower(e.GVK.Kind), r.Obj.GetNamespace(), r.Obj.GetName(), infrav1.AnnotationRestoreState, res.RescuedState)
	e.warnOnChange(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionTrue, ReasonStateRescued, ReasonStateRescued, msg)
	e.SetReady(r, metav1.ConditionFalse, ReasonStateRescued, msg)
	return true
}

// rescueHeld keeps every Job from starting while a rescued state waits for a
// restore, whatever the inputs: the current state may lack what the failed
// run created, and any run on it (an apply of changed inputs, a destroy)
// would create it twice or leave it behind.
func (e *Engine) rescueHeld(r *Sync) bool {
	st := r.Obj.WorkspaceStatus()
	c := meta.FindStatusCondition(st.Conditions, infrav1.ConditionStateRescued)
	if c == nil || c.Status != metav1.ConditionTrue {
		return false
	}
	if lr := st.LastRestore; lr != nil && lr.Time.After(c.LastTransitionTime.Time) {
		SetCondition(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionFalse, ReasonRestored,
			fmt.Sprintf("Backup %s was restored after the state was rescued", lr.Backup))
		return false
	}
	e.SetReady(r, metav1.ConditionFalse, ReasonStateRescued, c.Message)
	return true
}

// start creates the run-inputs Secret (unless data is nil: destroy with the
// durable inputs) and the Job of one attempt.
func (e *Engine) start(ctx context.Context, r *Sync, op infrav1.Operation, hash string, attempt int, data map[string][]byte) error {
	obj := r.Obj
	if e.rescueHeld(r) {
		return nil
	}
	if errs := e.RunnerPods.Check(&r.Policy.JobPolicy, field.NewPath("spec", "jobs")); len(errs) > 0 {
		e.InputError(r, &InputError{Reason: ReasonRunnerPodNotAllowed, Message: "The runner pod would break the operator's rules (with spec.defaults.jobs of the cluster merged in): " + errs.ToAggregate().Error()})
		return nil
	}
	if err := e.Access.CheckServiceAccount(ctx, obj.GetNamespace(), r.Policy.ServiceAccountName); err != nil {
		var ie *InputError
		if errors.As(err, &ie) {
			e.InputError(r, ie)
			return nil
		}
		return err
	}
	ok, expectState, err := e.checkState(ctx, r)
	if err != nil || !ok {
		return err
	}
	ca, err := e.RunnerAPI.ca()
	if err != nil {
		return err
	}
	spec := JobSpec{Owner: obj, OwnerGVK: e.GVK, Operation: op, InputsHash: hash, InputsBytes: secretSize(data), Attempt: attempt,
		Image: e.RunnerImage, Policy: r.Policy, Backups: e.StateBackups, DurableOnly: data == nil,
		ExpectState: expectState, MaxStateBytes: e.MaxStateBytes, RunnerAPI: e.RunnerAPI.URL, RunnerAPICA: ca, RunnerPods: e.RunnerPods}
	if g := r.Gate; g != nil && op == infrav1.OperationApply {
		spec.Gate, spec.ApprovedPlan, spec.ApprovedDestructivePlan = g.Policy, g.ApprovedPlan, g.ApprovedDestructivePlan
	}
	job := BuildJob(spec)
	created := false // the Job exists: its slot is taken until it finishes
	if e.Slots != nil {
		key := cache.MetaObjectToName(job)
		ok, why := e.Slots.take(r.Key, key, e.GVK.Kind, op, e.Clock.Now())
		if !ok {
			e.waitForSlot(r, op, why)
			return nil
		}
		defer func() {
			if !created {
				e.Slots.release(key)
			}
		}()
	}
	if err := e.blockMove(ctx, r, true); err != nil {
		return err
	}
	if data != nil {
		if err := e.createRunInputs(ctx, obj, job, data); err != nil {
			if e.refusedByQuota(r, op, "inputs Secret", err) {
				return nil
			}
			return e.terminating(r, err)
		}
	}
	if err := e.Access.Ensure(ctx, job.Namespace); err != nil {
		return e.terminating(r, err)
	}
	e.Expectations.ExpectJob(r.Key, job.Name)
	err = e.Jobs.Create(ctx, job)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		e.Expectations.JobObserved(r.Key, job.Name)
		return e.terminating(r, err)
	}
	made := CachedJobFrom(job)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Ours: the name is deterministic. The informer will show it.
	case err != nil:
		e.Expectations.JobObserved(r.Key, job.Name)
		if e.refusedByQuota(r, op, "Job", err) {
			return nil
		}
		return fmt.Errorf("creating Job %s: %w", job.Name, err)
	default:
		klog.FromContext(ctx).V(2).Info("Created Job", "job", klog.KObj(job))
		e.deletePreviousRunSecrets(ctx, r, made)
	}
	created = true
	e.RecordJob(r, made, "Running")
	switch op {
	case infrav1.OperationDestroy:
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Job %s is destroying the module's infrastructure", job.Name))
	case infrav1.OperationApply:
		e.setApplying(r, fmt.Sprintf("Job %s is applying the module", job.Name))
	}
	return nil
}

// waitForSlot retries the Job later: an apply or destroy says so in Ready;
// a drift check or refresh waits without a word (the object is as Ready as
// it was).
func (e *Engine) waitForSlot(r *Sync, op infrav1.Operation, why string) {
	r.Requeue = slotRetry
	if op == infrav1.OperationApply || op == infrav1.OperationDestroy {
		e.SetReady(r, metav1.ConditionFalse, ReasonWaitingForJobSlot, fmt.Sprintf("The %s Job waits for a slot: %s", op, why))
	}
}

// terminating turns the API server's refusal to create anything in a
// namespace being deleted into a condition; other errors pass through.
func (e *Engine) terminating(r *Sync, err error) error {
	if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err
	}
	obj := r.Obj
	ns, kind := obj.GetNamespace(), strings.ToLower(e.GVK.Kind)
	msg := fmt.Sprintf("Namespace %s is being deleted and Kubernetes creates no Job in it, so CAPTF cannot run terraform for this object. "+
		"Its state and backups stay (finalizer %s), and so does the namespace, until you decide: "+
		"to keep the infrastructure, save the state (kubectl get secrets -n %s -l %s=%s,%s=%s -o yaml > %s-state.yaml), then kubectl annotate %s -n %s %s %s=true; "+
		"to destroy it, see \"NamespaceTerminating\" in CAPTF's troubleshooting guide.",
		ns, names.StateFinalizer, ns, names.LabelKind, e.Names(obj).Kind, names.LabelObjectName, names.LabelValue(obj.GetName()), obj.GetName(),
		kind, ns, obj.GetName(), infrav1.AnnotationAbandonInfrastructure)
	e.stopped(r, ReasonNamespaceTerminating, msg)
	r.Requeue = time.Minute
	return nil
}

// stopped sets Ready False for what stops every Job of the object until a
// person acts, with a warning event when that is news.
func (e *Engine) stopped(r *Sync, reason, msg string) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, reason, reason, msg)
}

// InputError reports a problem the user must fix, and checks again later:
// the Secrets and ConfigMaps inputs read are not watched.
func (e *Engine) InputError(r *Sync, ie *InputError) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, ie.Reason, ie.Reason, ie.Message)
	r.Requeue = time.Minute
}

// secretSize is the size of a Secret's data.
func secretSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

func (e *Engine) createRunInputs(ctx context.Context, obj Object, job *batchv1.Job, data map[string][]byte) error {
	labels := names.ObjectLabels(e.GVK.Kind, obj.GetName(), obj.GetUID())
	labels[names.LabelSecretType] = names.SecretTypeRunInputs
	labels[names.LabelOperation] = job.Labels[names.LabelOperation]
	// No owner: clusterctl move copies what the objects it moves own, and
	// would fail when the runner deletes these during the move. The runner
	// deletes them when it is done, the next Job of the operation does
	// otherwise, and releasing or abandoning the state does last.
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: e.Names(obj).RunInputs(job.Name), Namespace: obj.GetNamespace(), Labels: labels},
		Data:       data,
	}
	_, err := e.Kube.CoreV1().Secrets(obj.GetNamespace()).Create(ctx, sec, metav1.CreateOptions{FieldManager: e.fieldManager()})
	if apierrors.IsAlreadyExists(err) {
		return nil // same name, same hash: the same inputs
	}
	return err
}

// errNoResult: a finished Job's result is not there (its runner was killed
// before writing it, or someone deleted it).
var errNoResult = errors.New("finished without a result")

// readResult reads what the runner of job reported.
func (e *Engine) readResult(ctx context.Context, r *Sync, job *CachedJob) (*run.Result, error) {
	sec, err := e.Kube.CoreV1().Secrets(job.Namespace).Get(ctx, e.Names(r.Obj).Result(job.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("job %s %w", job.Name, errNoResult)
	}
	if err != nil {
		return nil, err
	}
	res, err := run.ResultOf(sec.Data)
	if err != nil {
		return nil, fmt.Errorf("result of Job %s: %w", job.Name, err)
	}
	return res, nil
}

// deletePreviousRunSecrets deletes the run Secrets of the Job that ran op
// before job: once a newer Job of the operation runs, nothing reads them
// again. (The runner deletes its inputs itself when it is done; these are
// what a killed runner left.) Each object so keeps at most the result of the
// latest Job of each operation, not two Secrets per Job of its history.
func (e *Engine) deletePreviousRunSecrets(ctx context.Context, r *Sync, job *CachedJob) {
	n := e.Names(r.Obj)
	for _, prev := range r.Jobs { // newest first
		if prev.Name == job.Name || prev.Operation != job.Operation {
			continue
		}
		for _, name := range []string{n.RunInputs(prev.Name), n.Result(prev.Name)} {
			if err := e.Kube.CoreV1().Secrets(prev.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				klog.FromContext(ctx).Error(err, "Deleting a run Secret of an earlier Job", "secret", klog.KRef(prev.Namespace, name))
			}
		}
		return
	}
}

// cleanupHistory keeps the newest finished Jobs of each operation within
// the policy's limits. Their run Secrets went when the next Job of their
// operation started.
func (e *Engine) cleanupHistory(ctx context.Context, r *Sync) error {
	kept := map[string]int32{}
	var errs []error
	for _, job := range r.Jobs { // newest first
		finished, succeeded := JobFinished(job)
		if !finished || job.DeletionTimestamp != nil {
			continue
		}
		limit := r.Policy.FailedJobsHistoryLimit
		if succeeded {
			limit = r.Policy.SuccessfulJobsHistoryLimit
		}
		k := string(job.Operation) + strconv.FormatBool(succeeded)
		if kept[k] < limit {
			kept[k]++
			continue
		}
		if err := e.Jobs.Delete(ctx, job, metav1.DeletePropagationBackground); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetReady sets the Ready condition.
func (e *Engine) SetReady(r *Sync, status metav1.ConditionStatus, reason, message string) {
	SetCondition(r.Obj, infrav1.ConditionReady, status, reason, message)
}

// warnOnChange sets a condition, and sends a warning event named
// eventReason when that changed the condition: syncs repeat, events should
// not.
func (e *Engine) warnOnChange(obj Object, condType string, status metav1.ConditionStatus, reason, eventReason, msg string) {
	if c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, condType); c == nil || c.Status != status || c.Reason != reason || c.Message != msg {
		e.Recorder.Event(obj, corev1.EventTypeWarning, eventReason, msg)
	}
	SetCondition(obj, condType, status, reason, msg)
}

// SetCondition sets a condition of obj at its generation.
func SetCondition(obj Object, t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&obj.WorkspaceStatus().Conditions, metav1.Condition{Type: t, Status: status,
		Reason: reason, Message: message, ObservedGeneration: obj.GetGeneration()})
}

// setApplying keeps Ready True while a provisioned object takes a change.
func (e *Engine) setApplying(r *Sync, message string) {
	status := metav1.ConditionFalse
	if init := r.Obj.WorkspaceStatus().Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		status = metav1.ConditionTrue
	}
	e.SetReady(r, status, ReasonApplying, message)
}

// RecordJob notes the latest Job of its operation in the status.
func (e *Engine) RecordJob(r *Sync, job *CachedJob, outcome string) {
	st := r.Obj.WorkspaceStatus()
	ref := infrav1.JobReference{Operation: job.Operation, Name: job.Name, Outcome: outcome}
	// Times are recorded once the Job is done: a running Job's status
	// changes must not cost a status write each.
	if finished, _ := JobFinished(job); finished {
		t := metav1.NewTime(FinishTime(job))
		ref.StartTime, ref.CompletionTime = job.Status.StartTime, &t
	}
	for i := range st.LastJobs {
		if st.LastJobs[i].Operation == ref.Operation {
			st.LastJobs[i] = ref
			return
		}
	}
	st.LastJobs = append(st.LastJobs, ref)
}

func (e *Engine) fieldManager() string { return fieldManager(e.GVK) }

// unfinishedJob is a Job that may still run a pod, being deleted or not.
func unfinishedJob(jobs []*CachedJob) *CachedJob {
	for _, j := range jobs {
		if finished, _ := JobFinished(j); !finished {
			return j
		}
	}
	return nil
}

func activeJob(jobs []*CachedJob) *CachedJob {
	for _, j := range jobs {
		if finished, _ := JobFinished(j); !finished && j.DeletionTimestamp == nil {
			return j
		}
	}
	return nil
}

// latestJob is the newest attempt of op for hash.
func latestJob(jobs []*CachedJob, op infrav1.Operation, hash string) *CachedJob {
	var latest *CachedJob
	for _, j := range jobs {
		if j.Operation != op || j.InputsHash != hash {
			continue
		}
		if latest == nil || j.Attempt > latest.Attempt {
			latest = j
		}
	}
	return latest
}

// FinishTime is when job finished (its creation while it runs).
func FinishTime(job *CachedJob) time.Time {
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.Time
	}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return job.CreationTimestamp.Time
}

func publicOutputs(outputs map[string]run.Output) map[string]runtime.RawExtension {
	out := map[string]runtime.RawExtension{}
	for k, o := range outputs {
		if !o.Sensitive {
			out[k] = runtime.RawExtension{Raw: o.Value}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
