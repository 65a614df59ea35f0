package workspace

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
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

// protectedChange reads a run refused because its plan changes what
// spec.protect covers. While the patterns still cover it the object says
// so and nothing runs again (no approval frees it; a retry would plan the
// same); once spec.protect changed since the Job was made and covers none
// of it, retry is true: run again now, without the failure's backoff. The
// Job's label, not the result (which module code can write), says what
// the Job was made with.
func (e *engine) protectedChange(r *Sync, job *runnerjob.Cached, res *run.Result) (hold, retry bool) {
	if r.Gate == nil || res == nil || res.Reason != run.ReasonProtectedResourceChange || res.Plan == nil {
		return false, false
	}
	protected := r.Gate.Protected(res.Plan)
	if len(protected) == 0 {
		return false, names.ProtectHash(r.Gate.Protect) != job.Protect
	}
	obj, plan := r.Obj, res.Plan
	st := obj.WorkspaceStatus()
	recordPlan(st, job, res.Operation, plan)
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

// moduleHeld holds a failed destroy (or other run) that stopped for module
// code no approver accepted, until an approver names its digest: retried
// then at once, never on a backoff that would only stop again.
func (e *engine) moduleHeld(r *Sync, job *runnerjob.Cached, res *run.Result) (hold, retry bool) {
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
