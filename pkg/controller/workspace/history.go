package workspace

import (
	"context"
	"errors"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
)

// cleanupHistory keeps the newest finished Jobs of each operation within
// the policy's limits. Their run Secrets went when the next Job of their
// operation started; their run records go by the same limits
// (pruneRecords), checked when a Job that kept one goes.
//
// By default a drift check that succeeded keeps no Job once the status
// holds its result (Drifted, the last check's time), but the newest while
// Drifted is True: its pod's log shows the plan. A fleet checks every
// interval, and each kept check was a Job and a pod in the cluster and in
// the manager's cache (at 10,000 objects and a limit of 3, 30,000 of
// each). A successfulJobsHistoryLimit set by the user keeps them as it
// keeps other Jobs.
func (e *engine) cleanupHistory(ctx context.Context, r *Sync) error {
	kept := map[string]int32{}
	st := r.Obj.WorkspaceStatus()
	drifted := meta.IsStatusConditionTrue(st.Conditions, infrav1.ConditionDrifted)
	var errs []error
	prune := false               // a Job with a record went: records may be over the limits
	for _, job := range r.Jobs { // newest first
		finished, succeeded := runnerjob.Finished(job)
		if !finished || job.DeletionTimestamp != nil {
			continue
		}
		limit := r.Policy.FailedJobsHistoryLimit
		if succeeded {
			limit = r.Policy.SuccessfulJobsHistoryLimit
		}
		recordedCheck := succeeded && job.Operation == infrav1.OperationDrift &&
			st.LastDriftCheckTime != nil && !runnerjob.FinishTime(job).After(st.LastDriftCheckTime.Time)
		if recordedCheck {
			limit = r.Policy.CleanDriftChecksKept
			if drifted {
				limit = max(limit, min(1, r.Policy.SuccessfulJobsHistoryLimit))
			}
		}
		k := string(job.Operation) + strconv.FormatBool(succeeded)
		if kept[k] < limit {
			kept[k]++
			continue
		}
		if err := e.JobControl.Delete(ctx, job, metav1.DeletePropagationBackground); err != nil {
			errs = append(errs, err)
			continue
		}
		prune = prune || mayHaveRecord(job, succeeded, drifted)
		if recordedCheck {
			// Its result is read; the next check would not find it.
			e.deleteRunSecrets(ctx, r, job)
		}
	}
	if prune {
		e.pruneRecords(ctx, r)
	}
	return errors.Join(errs...)
}
