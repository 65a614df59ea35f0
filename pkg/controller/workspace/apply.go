package workspace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// Apply drives the apply of in. It returns the result and Job of an apply of
// in that succeeded and is not in the status yet, for the caller to read the
// kind's outputs and then call Applied. Otherwise it returns nil: a Job
// runs, was started, failed (retried after a backoff) or in is applied.
func (e *engine) Apply(ctx context.Context, r *Sync, in *Inputs) (*run.Result, *runnerjob.Cached, error) {
	st := r.Obj.WorkspaceStatus()
	f := applyFacts{Hash: in.Hash, Applied: st.AppliedInputsHash, StateChanged: e.stateChangedAfter(r),
		Active: runnerjob.Active(r.Jobs), Latest: runnerjob.Latest(r.Jobs, infrav1.OperationApply, in.Hash)}
	if st.LastAppliedTime != nil {
		f.LastApplied = &st.LastAppliedTime.Time
	}
	d := decideApply(f)
	if f.Active == nil {
		if err := e.cleanupHistory(ctx, r); err != nil {
			klog.FromContext(ctx).Error(err, "Cleaning up old Jobs")
		}
	}
	if d.ReadRefresh {
		// A refresh of the applied inputs: the caller reads its outputs.
		if res, job, err := e.refreshResult(ctx, r); err != nil || res != nil {
			return res, job, err
		}
	}
	switch d.Action {
	case applyStopDrift:
		if err := e.JobControl.Delete(ctx, f.Active, metav1.DeletePropagationBackground); err != nil {
			return nil, nil, err
		}
		klog.FromContext(ctx).V(2).Info("Stopped a drift check for an apply", "job", klog.KObj(f.Active))
		return nil, nil, nil
	case applyReportRunning:
		return nil, nil, e.reportRunning(ctx, r, f.Active)
	case applyStart:
		return nil, nil, e.startApply(ctx, r, in, d.Attempt)
	case applyRecordUpToDate:
		e.RecordJob(r, f.Latest, run.OutcomeSucceeded, nil)
		fallthrough
	case applyUpToDate:
		e.upToDate(r)
		return nil, nil, e.CheckDrift(ctx, r, in.Hash)
	case applyFailed:
		return nil, nil, e.applyFailed(ctx, r, f.Latest, in)
	default:
		return e.applySucceeded(ctx, r, f.Latest, in)
	}
}

// startApply starts an apply Job of in. A Job never runs inputs known
// only by their hash (HashOnly): they are rendered now, and when what was
// read is not what the hash says (a Secret or ConfigMap changed since it
// was remembered), the object is synced again to decide on what was read.
func (e *engine) startApply(ctx context.Context, r *Sync, in *Inputs, attempt int) error {
	if in.HashOnly {
		rendered, err := in.render()
		var ie *InputError
		if errors.As(err, &ie) {
			e.InputError(r, ie)
			return nil
		}
		if err != nil {
			return err
		}
		if rendered.Hash != in.Hash {
			klog.FromContext(ctx).V(2).Info("Inputs changed since they were last read; deciding again", "was", in.Hash, "now", rendered.Hash)
			r.requeueWithin(time.Millisecond)
			return nil
		}
		in = rendered
	}
	return e.start(ctx, r, infrav1.OperationApply, in.Hash, attempt, in.SecretData())
}

// reportRunning reports the running Job.
func (e *engine) reportRunning(ctx context.Context, r *Sync, active *runnerjob.Cached) error {
	e.RecordJob(r, active, "Running", nil)
	if refused, err := e.podRefused(ctx, r, active); err != nil || refused {
		return err
	}
	if active.Operation == infrav1.OperationApply {
		e.setApplying(r, fmt.Sprintf("Job %s is applying the module", active.Name))
	}
	return nil
}

// stateChangedAfter is when the state last changed under the applied
// inputs: the last restore, or drift to remediate.
func (e *engine) stateChangedAfter(r *Sync) time.Time {
	after := r.ReapplyAfter
	if lr := r.Obj.WorkspaceStatus().LastRestore; lr != nil && lr.Time.After(after) {
		after = lr.Time.Time
	}
	return after
}

// applySucceeded reads the result of a successful apply Job: a plan held
// for approval, a plan approved since (planned again), or outputs for the
// caller.
func (e *engine) applySucceeded(ctx context.Context, r *Sync, job *runnerjob.Cached, in *Inputs) (*run.Result, *runnerjob.Cached, error) {
	res, err := e.readResult(ctx, r, job)
	if errors.Is(err, errNoResult) {
		// Nothing says what it applied or planned: plan again (an
		// applied module plans no change).
		klog.FromContext(ctx).Info("An apply Job's result is gone; planning again", "job", klog.KObj(job))
		return nil, nil, e.startApply(ctx, r, in, job.Attempt+1)
	}
	if err != nil {
		return nil, nil, err
	}
	var rules string
	if res.Plan.Denied() {
		policy, err := e.gatherPlanPolicy(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		rules = policy.Digest()
	}
	switch decideResult(res, r.Gate, rules) {
	case resultOutputs:
		e.noPlanWaiting(r)
		noPlanDenied(r.Obj)
		return res, job, nil
	case resultPlanDenied:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		e.reportDenied(r, job, res.Plan)
	case resultPolicyChanged:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		e.Recorder.Eventf(r.Obj, corev1.EventTypeNormal, ReasonPlanPolicyChanged, "The plan policies changed since plan %s was denied: planning again", res.Plan.Hash)
		return nil, nil, e.startApply(ctx, r, in, job.Attempt+1)
	case resultModuleApproved:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		e.Recorder.Eventf(r.Obj, corev1.EventTypeNormal, ReasonModuleApproved, "The module's code %s is approved: planning with it", res.Module.Digest)
		return nil, nil, e.startApply(ctx, r, in, job.Attempt+1)
	case resultPlanApproved:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		e.Recorder.Eventf(r.Obj, corev1.EventTypeNormal, ReasonPlanApproved, "Plan %s is approved: planning again to apply exactly it", res.Plan.Hash)
		return nil, nil, e.startApply(ctx, r, in, job.Attempt+1)
	case resultModuleWaits:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		e.moduleWaits(r, job, res.Module)
	default:
		e.RecordJob(r, job, run.OutcomeBlocked, res)
		noPlanDenied(r.Obj)
		e.reportBlocked(r, job, res.Plan)
	}
	return nil, nil, nil
}

// applyFailed reports a failed apply Job and retries it after a backoff,
// unless its runner rescued a state that must be looked at first.
func (e *engine) applyFailed(ctx context.Context, r *Sync, job *runnerjob.Cached, in *Inputs) error {
	attempt, retry := e.failed(ctx, r, job, ReasonApplyFailed, "terraform failed")
	if !retry {
		return nil
	}
	return e.startApply(ctx, r, in, attempt)
}

// failed reports a failed Job: Ready False with the runner's reason (else
// reason) and a warning when that is news. It returns the attempt that
// retries the Job, and whether that is due now; never while the runner's
// rescued state waits for a person.
func (e *engine) failed(ctx context.Context, r *Sync, job *runnerjob.Cached, reason, what string) (int, bool) {
	res, _ := e.readResult(ctx, r, job) // a Job killed early has none: its status tells
	e.RecordJob(r, job, run.OutcomeFailed, res)
	if e.holdForRescue(r, job, res) {
		return 0, false
	}
	if hold, now := e.protectedChange(r, job, res); hold {
		return 0, false
	} else if now {
		return job.Attempt + 1, true
	}
	if hold, now := e.moduleHeld(r, job, res); hold {
		return 0, false
	} else if now {
		return job.Attempt + 1, true
	}
	msg := runnerjob.FailureMessage(job)
	if res != nil && res.Error != "" {
		msg = fmt.Sprintf("%s in %s (Job %s): %s", what, res.Stage, job.Name, res.Error)
		reason = cmp.Or(res.Reason, reason)
	}
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, reason, reason, msg)
	attempt := job.Attempt + 1
	if wait := runnerjob.Backoff(attempt) - e.Clock.Now().Sub(runnerjob.FinishTime(job)); wait > 0 {
		r.Requeue = wait
		return attempt, false
	}
	return attempt, true
}

// errNoResult: a finished Job's result is not there (its runner was killed
// before writing it, or someone deleted it).
var errNoResult = errors.New("finished without a result")

// readResult reads what the runner of job reported.
func (e *engine) readResult(ctx context.Context, r *Sync, job *runnerjob.Cached) (*run.Result, error) {
	res, err := e.Results.Read(ctx, job.Namespace, r.Names.Result(job.Name), job.UID)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("job %s %w", job.Name, errNoResult)
	}
	if err != nil {
		return nil, fmt.Errorf("result of Job %s: %w", job.Name, err)
	}
	return res, nil
}
