package workspace

import (
	"fmt"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

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

// SetReady sets the Ready condition.
func (e *Engine) SetReady(r *Sync, status metav1.ConditionStatus, reason, message string) {
	SetCondition(r.Obj, infrav1.ConditionReady, status, reason, message)
}

// warnOnChange sets a condition, and sends a warning event named
// eventReason when that changed the condition: syncs repeat, events should
// not.
func (e *Engine) warnOnChange(obj Object, condType string, status metav1.ConditionStatus, reason, eventReason, msg string) {
	msg = conditionMessage(msg) // compared as it is stored
	if c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, condType); c == nil || c.Status != status || c.Reason != reason || c.Message != msg {
		e.Recorder.Event(obj, corev1.EventTypeWarning, eventReason, msg)
	}
	SetCondition(obj, condType, status, reason, msg)
}

// SetCondition sets a condition of obj at its generation.
func SetCondition(obj Object, t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&obj.WorkspaceStatus().Conditions, metav1.Condition{Type: t, Status: status,
		Reason: reason, Message: conditionMessage(message), ObservedGeneration: obj.GetGeneration()})
}

// maxConditionMessage bounds a condition's message. Messages quote what
// modules and users wrote (an output, a name, an error), which can be far
// longer than the 32 KiB the API server admits in a condition: one that
// long would fail every status write of the object.
const maxConditionMessage = 4 << 10

// conditionMessage is msg cut to maxConditionMessage bytes, at a rune.
func conditionMessage(msg string) string {
	if len(msg) <= maxConditionMessage {
		return msg
	}
	cut := maxConditionMessage - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// reportStarted records a Job just created, and says what it does.
func (e *Engine) reportStarted(r *Sync, job *runnerjob.Cached) {
	e.RecordJob(r, job, "Running", nil)
	switch job.Operation {
	case infrav1.OperationDestroy:
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Job %s is destroying the module's infrastructure", job.Name))
	case infrav1.OperationApply:
		e.setApplying(r, fmt.Sprintf("Job %s is applying the module", job.Name))
	}
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
func (e *Engine) RecordJob(r *Sync, job *runnerjob.Cached, outcome string, res *run.Result) {
	st := r.Obj.WorkspaceStatus()
	ref := infrav1.JobReference{Operation: job.Operation, Name: job.Name, Outcome: outcome}
	if res != nil {
		ref.Record, ref.RecordDigest = res.Record, res.RecordDigest
	}
	// Times are recorded once the Job is done: a running Job's status
	// changes must not cost a status write each.
	if finished, _ := runnerjob.Finished(job); finished {
		t := metav1.NewTime(runnerjob.FinishTime(job))
		ref.StartTime, ref.CompletionTime = job.Status.StartTime, &t
	}
	for i := range st.LastJobs {
		if st.LastJobs[i].Operation == ref.Operation {
			if res == nil && st.LastJobs[i].Name == ref.Name {
				// Recorded again without its result at hand: what was
				// read of it stays, and the status does not change.
				ref.Record, ref.RecordDigest = st.LastJobs[i].Record, st.LastJobs[i].RecordDigest
			}
			st.LastJobs[i] = ref
			return
		}
	}
	st.LastJobs = append(st.LastJobs, ref)
}
