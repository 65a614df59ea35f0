package workspace

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// Reasons of the approval conditions.
const (
	ReasonAwaitingApproval       = "AwaitingApproval"
	ReasonApprovalForAnotherPlan = "ApprovalForAnotherPlan"
	ReasonPlanChanged            = "PlanChanged"
	ReasonNoPlanAwaitingApproval = "NoPlanAwaitingApproval"
	// ReasonModuleApproved (an event): an approver named the digest of
	// the module's code that waited.
	ReasonModuleApproved = "ModuleApproved"
)

// reportBlocked reports a plan that waits for an approval: the condition of its
// kind says what it would do and the exact command that approves it.
func (e *Engine) reportBlocked(r *Sync, job *runnerjob.Cached, plan *run.Plan) {
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
	msg := fmt.Sprintf("%sPlan %s %s: %s. Approve exactly this plan with: kubectl annotate %s -n %s %s %s=%s --overwrite",
		prefix, plan.Hash, what, run.PlanSummaryText(plan.Summary), strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), needed, plan.Hash)
	st := obj.WorkspaceStatus()
	e.warnOnChange(obj, condType, metav1.ConditionTrue, reason, condType, msg)
	SetCondition(obj, other, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	st.LastPlan = &infrav1.PlanStatus{Hash: plan.Hash, Operation: infrav1.OperationApply, Summary: plan.Summary, Time: metav1.NewTime(runnerjob.FinishTime(job))}
	if init := st.Initialization; init != nil && init.Provisioned != nil && *init.Provisioned {
		// What is provisioned keeps serving while a change waits.
		e.SetReady(r, metav1.ConditionTrue, ReasonApplied, fmt.Sprintf("The module is applied (plan %s); a change waits for approval (%s)", st.AppliedPlanHash, condType))
		return
	}
	e.SetReady(r, metav1.ConditionFalse, condType, msg)
}

// noPlanWaiting clears the approval conditions of a gated object.
func (e *Engine) noPlanWaiting(r *Sync) {
	if r.Gate == nil {
		return
	}
	SetCondition(r.Obj, infrav1.ConditionPlanAwaitingApproval, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	SetCondition(r.Obj, infrav1.ConditionDestructivePlanBlocked, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
}

// protectedChange reads a run refused because its plan changes what
// spec.protect covers. While the patterns still cover it the object says
// so and nothing runs again (no approval frees it; a retry would plan the
// same); once spec.protect changed since the Job was made and covers none
// of it, retry is true: run again now, without the failure's backoff. The
// Job's label, not the result (which module code can write), says what
// the Job was made with.
func (e *Engine) protectedChange(r *Sync, job *runnerjob.Cached, res *run.Result) (hold, retry bool) {
	if r.Gate == nil || res == nil || res.Reason != run.ReasonProtectedResourceChange || res.Plan == nil {
		return false, false
	}
	protected := r.Gate.Protected(res.Plan)
	if len(protected) == 0 {
		return false, names.ProtectHash(r.Gate.Protect) != job.Protect
	}
	obj, plan := r.Obj, res.Plan
	st := obj.WorkspaceStatus()
	st.LastPlan = &infrav1.PlanStatus{Hash: plan.Hash, Operation: res.Operation, Summary: plan.Summary, Time: metav1.NewTime(runnerjob.FinishTime(job))}
	what := "Plan " + plan.Hash
	if res.Operation == infrav1.OperationDestroy {
		what = "Destroying (plan " + plan.Hash + ")"
	}
	msg := fmt.Sprintf("%s destroys, replaces or forgets %s, which spec.protect covers: no approval applies it (Job %s). "+
		"To let it, remove the pattern from spec.protect: kubectl edit %s -n %s %s",
		what, strings.Join(protected, ", "), job.Name, strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName())
	if res.Operation == infrav1.OperationDestroy {
		msg += fmt.Sprintf("; or keep the infrastructure and let the object go: kubectl annotate %s -n %s %s %s=true",
			strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), infrav1.AnnotationAbandonInfrastructure)
	} else {
		SetCondition(obj, infrav1.ConditionDestructivePlanBlocked, metav1.ConditionTrue, run.ReasonProtectedResourceChange, msg)
		SetCondition(obj, infrav1.ConditionPlanAwaitingApproval, metav1.ConditionFalse, ReasonNoPlanAwaitingApproval, "")
	}
	e.warnOnChange(obj, infrav1.ConditionReady, metav1.ConditionFalse, run.ReasonProtectedResourceChange, run.ReasonProtectedResourceChange, msg)
	return true, false
}

// moduleMessage says that a run found module code no approver accepted,
// what to run to see and approve it, and that none of it ran.
func (e *Engine) moduleMessage(r *Sync, job *runnerjob.Cached, code *run.ModuleCode) string {
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
func (e *Engine) moduleWaits(r *Sync, job *runnerjob.Cached, code *run.ModuleCode) {
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

// moduleHeld holds a failed destroy (or other run) that stopped for module
// code no approver accepted, until an approver names its digest: retried
// then at once, never on a backoff that would only stop again.
func (e *Engine) moduleHeld(r *Sync, job *runnerjob.Cached, res *run.Result) (hold, retry bool) {
	if r.Gate == nil || res == nil || res.Reason != run.ReasonModuleAwaitingApproval || res.Module == nil {
		return false, false
	}
	if r.Gate.ModuleRunnable(res.Module.Digest) {
		return false, true
	}
	msg := e.moduleMessage(r, job, res.Module)
	e.warnOnChange(r.Obj, infrav1.ConditionReady, metav1.ConditionFalse, run.ReasonModuleAwaitingApproval, run.ReasonModuleAwaitingApproval, msg)
	return true, false
}
