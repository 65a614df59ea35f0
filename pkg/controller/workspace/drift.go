package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// Reasons of the Drifted condition.
const (
	ReasonDriftDetected    = "DriftDetected"
	ReasonNoDrift          = "NoDrift"
	ReasonDriftCheckFailed = "DriftCheckFailed"
	ReasonConverged        = "Converged"
)

// nextDriftCheck is when obj's next drift check is due after base (its
// last check or apply). Each object checks at a fixed phase of the
// interval, from its UID: a fleet applied in one burst (a new cluster, a
// restore, a manager upgrade) checks evenly over the interval ever after
// (N/interval checks a second) instead of in a burst every interval. The
// first check after base comes after half an interval at least.
func nextDriftCheck(obj Object, base time.Time, interval time.Duration) time.Time {
	if interval <= 0 {
		return base
	}
	earliest := base.Add(interval / 2)
	due := driftSlot(obj, earliest, interval)
	if due.Before(earliest) {
		due = due.Add(interval)
	}
	return due
}

// driftSlot is obj's last check slot at or before t: the slots are its
// phase + k*interval from the Unix epoch.
func driftSlot(obj Object, t time.Time, interval time.Duration) time.Time {
	h := fnv.New64a()
	h.Write([]byte(obj.GetUID()))
	phase := time.Duration(h.Sum64() % uint64(interval))
	k := t.Sub(time.Unix(0, 0).Add(phase)) / interval
	return time.Unix(0, 0).Add(phase + k*interval)
}

// driftCheckHash names the drift check of the inputs appliedHash due at
// due: one check per due time, so a restarted manager does not start it
// twice.
func driftCheckHash(appliedHash string, due time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", appliedHash, due.Unix()))
	return hex.EncodeToString(sum[:])[:16]
}

// driftDue is when obj's next drift check is due, given its newest drift
// Job (nil when none is left: a clean check's Job goes once recorded): the
// slot after the one its last check was for, or half an interval after an
// apply at least. Counting half an interval from when the last check
// finished instead would move the next one a whole interval on whenever a
// check ran more than half an interval late (a backlog of Jobs, a cap):
// that object would go two intervals unchecked.
func driftDue(obj Object, latest *runnerjob.Cached, appliedHash string, interval time.Duration) (time.Time, bool) {
	st := obj.WorkspaceStatus()
	checked, applied := st.LastDriftCheckTime, st.LastAppliedTime
	if checked == nil || (applied != nil && applied.After(checked.Time)) {
		if applied == nil {
			return time.Time{}, false
		}
		return nextDriftCheck(obj, applied.Time, interval), true
	}
	if latest != nil && interval > 0 {
		// Its slot is the last before the Job was made, or one either
		// side of it (clocks differ): its name says which.
		slot := driftSlot(obj, latest.CreationTimestamp.Time, interval)
		for _, s := range []time.Time{slot, slot.Add(interval), slot.Add(-interval)} {
			if driftCheckHash(appliedHash, s) == latest.InputsHash {
				return s.Add(interval), true
			}
		}
	}
	if interval <= 0 {
		return checked.Time, true
	}
	// The Job is gone: its check was for the last slot before it
	// finished, unless it ran a whole interval late. The API server's
	// clock, which timed its end, may be behind the manager's, which timed
	// the slot: a minute's allowance.
	return driftSlot(obj, checked.Add(min(interval/10, time.Minute)), interval).Add(interval), true
}

// CheckDrift records the last drift check and starts the next when it is
// due. Call it when Apply found the inputs applied and no Job running: a
// drift check plans with the inputs of the last apply and changes nothing.
func (e *engine) CheckDrift(ctx context.Context, r *Sync, appliedHash string) error {
	obj := r.Obj
	st := obj.WorkspaceStatus()
	enabled, interval, _ := e.driftPolicy(obj)
	if st.AppliedInputsHash != appliedHash || runnerjob.Active(r.Jobs) != nil {
		return nil
	}
	latest := latestOp(r.Jobs, infrav1.OperationDrift)
	if latest != nil {
		if finished, _ := runnerjob.Finished(latest); finished {
			if st.LastDriftCheckTime == nil || runnerjob.FinishTime(latest).After(st.LastDriftCheckTime.Time) {
				if outputs := e.recordDrift(ctx, r, latest); len(outputs) > 0 {
					// Only outputs moved: a refresh-only apply records them.
					return e.start(ctx, r, infrav1.OperationRefresh, latest.InputsHash, 0, nil)
				}
			}
		}
	}
	if !enabled {
		return nil
	}
	due, ok := driftDue(obj, latest, appliedHash, interval)
	if !ok {
		return nil
	}
	if wait := due.Sub(e.Clock.Now()); wait > 0 {
		r.requeueWithin(wait)
		return nil
	}
	return e.start(ctx, r, infrav1.OperationDrift, driftCheckHash(appliedHash, due), 0, nil)
}

// recordDrift turns a finished drift Job into the Drifted condition. It
// returns the outputs that would change when no resource would.
func (e *engine) recordDrift(ctx context.Context, r *Sync, job *runnerjob.Cached) []string {
	obj := r.Obj
	st := obj.WorkspaceStatus()
	recordTime(&st.LastDriftCheckTime, job)
	kind := e.GVK.Kind
	res, err := e.readResult(ctx, r, job)
	_, succeeded := runnerjob.Finished(job)
	switch {
	case err != nil || !succeeded || res.Plan == nil:
		msg := runnerjob.FailureMessage(job)
		if res != nil && res.Error != "" {
			msg = fmt.Sprintf("terraform failed in %s (Job %s): %s", res.Stage, job.Name, res.Error)
		} else if err != nil {
			msg = err.Error()
		}
		e.RecordJob(r, job, run.OutcomeFailed, res)
		metrics.DriftChecks.WithLabelValues(kind, "failed").Inc()
		e.warnOnChange(obj, infrav1.ConditionDrifted, metav1.ConditionUnknown, ReasonDriftCheckFailed, ReasonDriftCheckFailed, msg)
	case res.Plan.HasChanges():
		learnModule(st, res)
		e.RecordJob(r, job, run.OutcomeSucceeded, res)
		metrics.DriftChecks.WithLabelValues(kind, "drifted").Inc()
		msg := fmt.Sprintf("The infrastructure differs from the last apply: plan %s would make %s", res.Plan.Hash, run.PlanSummaryText(res.Plan.Summary))
		if _, _, remediate := e.driftPolicy(obj); remediate {
			msg += "; remediating with an apply"
		}
		e.warnOnChange(obj, infrav1.ConditionDrifted, metav1.ConditionTrue, ReasonDriftDetected, ReasonDriftDetected, msg)
	default:
		learnModule(st, res)
		e.RecordJob(r, job, run.OutcomeSucceeded, res)
		metrics.DriftChecks.WithLabelValues(kind, "clean").Inc()
		// The Job goes once this is recorded (cleanupHistory): not named.
		SetCondition(obj, infrav1.ConditionDrifted, metav1.ConditionFalse, ReasonNoDrift, "The infrastructure matches the last apply")
		return res.Plan.OutputChanges
	}
	return nil
}

// refreshResult returns the result of a refresh Job not yet in the status.
func (e *engine) refreshResult(ctx context.Context, r *Sync) (*run.Result, *runnerjob.Cached, error) {
	st := r.Obj.WorkspaceStatus()
	job := latestOp(r.Jobs, infrav1.OperationRefresh)
	if job == nil {
		return nil, nil, nil
	}
	finished, succeeded := runnerjob.Finished(job)
	if !finished || (st.LastRefreshTime != nil && !runnerjob.FinishTime(job).After(st.LastRefreshTime.Time)) {
		return nil, nil, nil
	}
	if !succeeded {
		// Tried again after the next drift check finds outputs moved.
		e.RecordJob(r, job, run.OutcomeFailed, nil)
		recordTime(&st.LastRefreshTime, job)
		e.Recorder.Event(r.Obj, corev1.EventTypeWarning, ReasonRefreshFailed, runnerjob.FailureMessage(job))
		return nil, nil, nil
	}
	res, err := e.readResult(ctx, r, job)
	if err != nil {
		return nil, nil, err
	}
	return res, job, nil
}

// latestOp is the newest Job of op: jobs are newest first.
func latestOp(jobs []*runnerjob.Cached, op infrav1.Operation) *runnerjob.Cached {
	for _, j := range jobs {
		if j.Operation == op {
			return j
		}
	}
	return nil
}
