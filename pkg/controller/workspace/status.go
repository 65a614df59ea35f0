package workspace

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// stopped sets Ready False for what stops every Job of the object until a
// person acts, with a warning event when that is news.
func (e *engine) stopped(r *Sync, reason, msg string) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, reason, reason, msg)
}

// InputError reports a problem the user must fix, and checks again later:
// the Secrets and ConfigMaps inputs read are not watched.
func (e *engine) InputError(r *Sync, ie *InputError) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, ie.Reason, ie.Reason, ie.Message)
	r.Requeue = time.Minute
}

// SetReady sets the Ready condition.
func (e *engine) SetReady(r *Sync, status metav1.ConditionStatus, reason, message string) {
	SetCondition(r.Obj, infrav1.ConditionReady, status, reason, message)
}

// warnOnChange sets a condition, and sends a warning event named
// eventReason when that changed the condition: syncs repeat, events should
// not.
func (e *engine) warnOnChange(obj Object, condType string, status metav1.ConditionStatus, reason, eventReason, msg string) {
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
func (e *engine) reportStarted(r *Sync, job *runnerjob.Cached) {
	e.RecordJob(r, job, "Running", nil)
	switch job.Operation {
	case infrav1.OperationDestroy:
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Job %s is destroying the module's infrastructure", job.Name))
	case infrav1.OperationApply:
		e.setApplying(r, fmt.Sprintf("Job %s is applying the module", job.Name))
	}
}

// setApplying keeps Ready True while a provisioned object takes a change.
func (e *engine) setApplying(r *Sync, message string) {
	status := metav1.ConditionFalse
	if init := r.Obj.WorkspaceStatus().Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		status = metav1.ConditionTrue
	}
	e.SetReady(r, status, ReasonApplying, message)
}

// RecordJob notes the latest Job of its operation in the status.
func (e *engine) RecordJob(r *Sync, job *runnerjob.Cached, outcome string, res *run.Result) {
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

// RecordApplied records a successful apply (or refresh) in the status.
func (e *engine) RecordApplied(r *Sync, hash string, job *runnerjob.Cached, res *run.Result) {
	st := r.Obj.WorkspaceStatus()
	st.Outputs = publicOutputs(res.Outputs)
	if res.Operation == infrav1.OperationRefresh {
		recordTime(&st.LastRefreshTime, job)
		learnModule(st, res)
		e.RecordJob(r, job, run.OutcomeSucceeded, res)
		return
	}
	st.AppliedInputsHash = hash
	if res.Module != nil {
		st.AppliedModule = res.Module.Digest
	}
	st.AppliedRecord, st.AppliedRecordDigest = res.Record, res.RecordDigest
	if res.Plan != nil {
		st.AppliedPlanHash = res.Plan.Hash
		recordPlan(st, job, infrav1.OperationApply, res.Plan)
	}
	msg := appliedMessage(st)
	recordTime(&st.LastAppliedTime, job)
	provisioned := true
	st.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
	st.Ready = true
	e.RecordJob(r, job, run.OutcomeSucceeded, res)
	e.clearDrifted(r.Obj)
	e.SetReady(r, metav1.ConditionTrue, ReasonApplied, msg)
	e.Recorder.Event(r.Obj, corev1.EventTypeNormal, ReasonApplied, msg)
}

// learnModule records the digest of the code a run of the applied inputs
// (a drift check, a refresh) ran, for an object whose last apply ran
// before CAPTF recorded digests: from then on other code waits for an
// approver without the detour through approval.UnrecordedModule.
func learnModule(st *infrav1.WorkspaceStatus, res *run.Result) {
	if st.AppliedModule == "" && st.AppliedInputsHash != "" && res.Module != nil {
		st.AppliedModule = res.Module.Digest
	}
}

// upToDate reports an object whose inputs are applied and need no Job: Ready
// again after whatever wait came before (an owner, a pause, a restore).
func (e *engine) upToDate(r *Sync) {
	e.noPlanWaiting(r)
	noPlanDenied(r.Obj)
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
	return fmt.Sprintf("The module is applied (plan %s: %s)", st.LastPlan.Hash, run.PlanCounts(st.LastPlan.Summary))
}

// InvalidOutput reports an output the kind cannot read.
func (e *engine) InvalidOutput(r *Sync, err error) {
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, ReasonInvalidOutput, ReasonInvalidOutput, err.Error())
}

// clearDrifted clears Drifted after an apply: the infrastructure is what the
// module says again.
func (e *engine) clearDrifted(obj Object) {
	c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, infrav1.ConditionDrifted)
	if c == nil || c.Status == metav1.ConditionFalse {
		return
	}
	SetCondition(obj, infrav1.ConditionDrifted, metav1.ConditionFalse, ReasonConverged, "The last apply converged the infrastructure")
}

// reportBlocked reports a plan that waits for an approval: the condition of its
// kind says what it would do and the exact command that approves it.
func (e *engine) reportBlocked(r *Sync, job *runnerjob.Cached, plan *run.Plan) {
	obj, g := r.Obj, r.Gate
	needed := approval.Gate{Policy: g.Policy}.Needed(plan)
	condType, other := infrav1.ConditionPlanAwaitingApproval, infrav1.ConditionDestructivePlanBlocked
	what := "changes resources"
	if needed == infrav1.AnnotationApproveDestructivePlan {
		condType, other = other, condType
		what = "deletes or replaces resources"
	}
	reason := ReasonAwaitingApproval
	var prefix string
	given := obj.GetAnnotations()[needed]
	switch approved := job.ApprovedPlan; {
	case approved != "" && approved != plan.Hash:
		reason, prefix = ReasonPlanChanged, fmt.Sprintf("The approved plan %s is no longer what terraform plans. ", approved)
	case given != "" && given != plan.Hash:
		reason, prefix = ReasonApprovalForAnotherPlan, fmt.Sprintf("%s names %s, which is not the plan waiting. ", needed, given)
	}
	if v := plan.Verdict; v != nil && v.Action == infrav1.PlanActionRequireApproval {
		prefix += fmt.Sprintf("A plan policy requires an approval (rule %s of TerraformPlanPolicy %s: %s). ", v.Rule, v.Policy, v.Message)
	}
	msg := fmt.Sprintf("%sPlan %s %s: %s. Approve exactly this plan with: kubectl annotate %s -n %s %s %s=%s --overwrite",
		prefix, plan.Hash, what, run.PlanSummaryText(plan.Summary), strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), needed, plan.Hash)
	st := obj.WorkspaceStatus()
	e.warnOnChange(obj, condType, metav1.ConditionTrue, reason, condType, msg)
	SetCondition(obj, other, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	recordPlan(st, job, infrav1.OperationApply, plan)
	if init := st.Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		// What is provisioned keeps serving while a change waits.
		e.SetReady(r, metav1.ConditionTrue, ReasonApplied, fmt.Sprintf("The module is applied (plan %s); a change waits for approval (%s)", st.AppliedPlanHash, condType))
		return
	}
	e.SetReady(r, metav1.ConditionFalse, condType, msg)
}

// reportDenied reports a plan a plan policy denied: Ready False
// (PlanDenied) unless what is provisioned still serves, and a warning
// when that is news. No approval applies it; a new plan or new rules do.
func (e *engine) reportDenied(r *Sync, job *runnerjob.Cached, plan *run.Plan) {
	obj, v := r.Obj, plan.Verdict
	msg := fmt.Sprintf("Plan %s (%s) is denied by rule %s of TerraformPlanPolicy %s: %s. No approval applies it; it is planned again when the policy or the object changes",
		plan.Hash, run.PlanSummaryText(plan.Summary), v.Rule, v.Policy, v.Message)
	e.noPlanWaiting(r)
	st := obj.WorkspaceStatus()
	recordPlan(st, job, infrav1.OperationApply, plan)
	if init := st.Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		e.warnOnChange(obj, infrav1.ConditionPlanDenied, metav1.ConditionTrue, run.ReasonPlanDenied, run.ReasonPlanDenied, msg)
		e.SetReady(r, metav1.ConditionTrue, ReasonApplied, fmt.Sprintf("The module is applied (plan %s); a plan policy denies the change (%s)", st.AppliedPlanHash, infrav1.ConditionPlanDenied))
		return
	}
	e.warnOnChange(obj, infrav1.ConditionPlanDenied, metav1.ConditionTrue, run.ReasonPlanDenied, run.ReasonPlanDenied, msg)
	e.SetReady(r, metav1.ConditionFalse, run.ReasonPlanDenied, msg)
}

// noPlanDenied clears PlanDenied once a plan applies (or waits for a
// person instead).
func noPlanDenied(obj Object) {
	if c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, infrav1.ConditionPlanDenied); c != nil && c.Status == metav1.ConditionTrue {
		SetCondition(obj, infrav1.ConditionPlanDenied, metav1.ConditionFalse, ReasonPlanAllowed, "")
	}
}

// ReasonPlanAllowed: no plan policy denies the object's plan (any more).
const ReasonPlanAllowed = "PlanAllowed"

// noPlanWaiting clears the approval conditions of a gated object.
func (e *engine) noPlanWaiting(r *Sync) {
	if r.Gate == nil {
		return
	}
	SetCondition(r.Obj, infrav1.ConditionPlanAwaitingApproval, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	SetCondition(r.Obj, infrav1.ConditionDestructivePlanBlocked, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
}

// moduleMessage says that a run found module code no approver accepted,
// what to run to see and approve it, and that none of it ran.
func (e *engine) moduleMessage(r *Sync, job *runnerjob.Cached, code *run.ModuleCode) string {
	obj := r.Obj
	kind := strings.ToLower(e.GVK.Kind)
	was := "the code applied (" + strings.Join(r.Gate.Modules, ", ") + ")"
	if r.Gate.Unrecorded() {
		was = "a digest on record (the last apply ran before CAPTF recorded the digest of the code it ran)"
	}
	return fmt.Sprintf("The module's code changed: digest %s is not %s, and none of it ran (Job %s). "+
		"See what changed and approve it with: kubectl captf approve %s/%s -n %s; or: kubectl annotate %s -n %s %s %s=%s --overwrite",
		code.Digest, was, job.Name, kind, obj.GetName(), obj.GetNamespace(), kind, obj.GetNamespace(), obj.GetName(), infrav1.AnnotationApproveModule, code.Digest)
}

// moduleWaits reports an apply that stopped before terraform planned,
// for module code no approver accepted: PlanAwaitingApproval with reason
// ModuleAwaitingApproval, the command that approves it.
func (e *engine) moduleWaits(r *Sync, job *runnerjob.Cached, code *run.ModuleCode) {
	obj := r.Obj
	msg := e.moduleMessage(r, job, code)
	e.warnOnChange(obj, infrav1.ConditionPlanAwaitingApproval, metav1.ConditionTrue, run.ReasonModuleAwaitingApproval, run.ReasonModuleAwaitingApproval, msg)
	SetCondition(obj, infrav1.ConditionDestructivePlanBlocked, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	st := obj.WorkspaceStatus()
	if init := st.Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		e.SetReady(r, metav1.ConditionTrue, ReasonApplied, fmt.Sprintf("The module is applied (plan %s); a change of its code waits for approval (%s)", st.AppliedPlanHash, run.ReasonModuleAwaitingApproval))
		return
	}
	e.SetReady(r, metav1.ConditionFalse, run.ReasonModuleAwaitingApproval, msg)
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

// recordTime sets a time the status keeps of a Job (a drift check's, a
// refresh's): when it finished.
func recordTime(field **metav1.Time, job *runnerjob.Cached) {
	t := metav1.NewTime(runnerjob.FinishTime(job))
	*field = &t
}

// recordPlan notes the plan a Job of op made.
func recordPlan(st *infrav1.WorkspaceStatus, job *runnerjob.Cached, op infrav1.Operation, plan *run.Plan) {
	st.LastPlan = &infrav1.PlanStatus{Hash: plan.Hash, Operation: op, Summary: plan.Summary, Time: metav1.NewTime(runnerjob.FinishTime(job))}
}

// recordRestore notes a restore of backup made at now; previous is the
// backup the state before it became.
func recordRestore(st *infrav1.WorkspaceStatus, backup, previous string, now time.Time) {
	st.LastRestore = &infrav1.StateRestore{Backup: backup, PreviousState: previous, Time: metav1.NewTime(now.Truncate(time.Second))}
}
