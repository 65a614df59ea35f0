package jobmetrics

import (
	"context"
	"errors"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// resultReader reads the result a runner wrote for a Job: the engine's
// runnerjob.Results, which answers from the result the object's controller
// read when it can.
type resultReader interface {
	Read(ctx context.Context, namespace, name string, job types.UID) (*run.Result, error)
}

// sync counts one finished Job. An error (the result could not be read)
// retries it; nothing is counted before the result is read.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	var job *runnerjob.Cached
	if seen, ok := c.finished.Load(key); ok {
		job = seen.(*runnerjob.Cached)
	} else {
		obj, exists, err := c.jobs.GetByKey(key.String())
		if err != nil {
			return err
		}
		if job, _ = obj.(*runnerjob.Cached); !exists || job == nil {
			klog.FromContext(ctx).V(4).Info("Finished Job deleted before it was counted", "job", key)
			return nil
		}
	}
	owner := job.Controller
	if owner == (runnerjob.JobController{}) {
		c.finished.Delete(key)
		return nil
	}
	res, err := c.result(ctx, job, owner)
	if err != nil {
		return err
	}
	observe(job, owner.Kind, res)
	c.finished.Delete(key)
	return nil
}

// result reads what the runner reported; nil when it reported nothing (a
// pod killed early) or something unreadable.
func (c *Controller) result(ctx context.Context, job *runnerjob.Cached, owner runnerjob.JobController) (*run.Result, error) {
	n := names.ObjectOf(owner.Kind, owner.Name)
	res, err := c.results.Read(ctx, job.Namespace, n.Result(job.Name), job.UID)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if errors.Is(err, runnerjob.ErrUnreadableResult) {
		klog.FromContext(ctx).Info("Unreadable result", "job", klog.KObj(job), "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// observe counts a finished Job of an object of kind.
func observe(job *runnerjob.Cached, kind string, res *run.Result) {
	op := string(job.Operation)
	finished, succeeded := runnerjob.Finished(job)
	if !finished {
		return
	}
	result := "succeeded"
	if !succeeded {
		result = "failed"
		reason := "failed"
		if failedReason(job) == batchv1.JobReasonDeadlineExceeded {
			reason = "deadline_exceeded"
		}
		metrics.JobsFailed.WithLabelValues(kind, op, reason).Inc()
	}
	start := job.CreationTimestamp.Time
	if job.Status.StartTime != nil {
		start = job.Status.StartTime.Time
	}
	if res != nil && res.Started != nil {
		start = res.Started.Time
		metrics.JobQueue.WithLabelValues(kind, op).Observe(nonNegative(start.Sub(job.CreationTimestamp.Time)))
	}
	metrics.JobDuration.WithLabelValues(kind, op, result).Observe(nonNegative(runnerjob.FinishTime(job).Sub(start)))
	if res == nil {
		return
	}
	if res.LockWaits > 0 {
		metrics.LeaseWaits.WithLabelValues(kind).Add(float64(res.LockWaits))
	}
	if res.ForceUnlocked {
		metrics.ForceUnlocks.WithLabelValues(kind).Inc()
	}
	if res.BackupsMade > 0 {
		metrics.StateBackups.WithLabelValues(kind).Add(float64(res.BackupsMade))
	}
	if slices.Contains(metrics.StateReadErrorReasons, res.Reason) {
		metrics.StateReadErrors.WithLabelValues(kind, res.Reason).Inc()
	}
}

func failedReason(job *runnerjob.Cached) string {
	if st := job.Status; st.Finished && !st.Complete {
		return st.EndReason
	}
	return ""
}

// nonNegative is d in seconds; clocks of nodes and API server may differ.
func nonNegative(d time.Duration) float64 { return max(d, 0).Seconds() }
