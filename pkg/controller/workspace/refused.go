package workspace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
)

// Reasons of a run Kubernetes refuses to start.
const (
	// ReasonQuotaExceeded: a ResourceQuota refuses the run's Job, its
	// inputs Secret or its pod.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonRunnerPodRefused: the Job exists, but Kubernetes refuses its
	// pod for another reason (Pod Security admission, a policy webhook).
	ReasonRunnerPodRefused = "RunnerPodRefused"
)

const (
	// podGrace is how long a new Job may go without a pod before CAPTF
	// looks for why; refusedRetry how often it looks again, and how often
	// a create a quota refused is tried again (quotas are not watched).
	podGrace     = 15 * time.Second
	refusedRetry = 30 * time.Second
)

// refusedByQuota reports a create of what (for the run of op) that a
// ResourceQuota refused, and retries it later. False for any other error.
func (e *engine) refusedByQuota(r *Sync, op infrav1.Operation, what string, err error) bool {
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		return false
	}
	e.refused(r, op, ReasonQuotaExceeded, fmt.Sprintf("A ResourceQuota of namespace %s refuses the %s of the %s run: %v", r.Obj.GetNamespace(), what, op, err))
	r.Requeue = refusedRetry
	return true
}

// refused says why a run cannot start: in Ready for an apply or destroy, in
// a warning event for a drift check or refresh (the infrastructure is as
// Ready as it was).
func (e *engine) refused(r *Sync, op infrav1.Operation, reason, msg string) {
	if op == infrav1.OperationApply || op == infrav1.OperationDestroy {
		e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, reason, reason, msg)
		return
	}
	e.Recorder.Event(r.Obj, corev1.EventTypeWarning, reason, msg)
}

// podRefused tells whether the running job has gone without a pod past its
// grace because Kubernetes refuses to create it, and says why. The Job
// controller reports that only in events on the Job, which nothing caches:
// they are read only for a Job the Job controller has started (it tries its
// pod as it does) and that has had no pod for podGrace since. A Job
// controller that is merely behind (a burst of Jobs) costs no read.
func (e *engine) podRefused(ctx context.Context, r *Sync, job *runnerjob.Cached) (bool, error) {
	st := job.Status
	if st.StartTime == nil || st.Active > 0 || st.Succeeded > 0 || st.Failed > 0 || st.Terminating > 0 || st.Uncounted {
		return false, nil
	}
	if wait := podGrace - e.Clock.Now().Sub(st.StartTime.Time); wait > 0 {
		r.requeueWithin(wait)
		return false, nil
	}
	r.requeueWithin(refusedRetry)
	list, err := e.Kube.CoreV1().Events(job.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(job.UID), "reason": "FailedCreate"}.AsSelector().String()})
	if err != nil {
		return false, fmt.Errorf("reading why Job %s has no pod: %w", job.Name, err)
	}
	if len(list.Items) == 0 {
		return false, nil
	}
	latest := slices.MaxFunc(list.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	reason := ReasonRunnerPodRefused
	if strings.Contains(latest.Message, "exceeded quota") {
		reason = ReasonQuotaExceeded
	}
	op := job.Operation
	e.refused(r, op, reason, fmt.Sprintf("Kubernetes does not create the runner pod of Job %s: %s", job.Name, latest.Message))
	return true, nil
}

func eventTime(ev corev1.Event) time.Time {
	if !ev.LastTimestamp.IsZero() {
		return ev.LastTimestamp.Time
	}
	return ev.EventTime.Time
}
