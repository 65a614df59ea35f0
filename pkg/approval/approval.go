// Package approval decides whether a plan may apply: an object's approval
// policy and the approvals its annotations hold, against the plan. It does
// no I/O. The manager asks it whether to start an apply for a plan that
// waited, the runner whether to apply what it has just planned: both ask
// the same question of the same Gate.
package approval

import (
	"slices"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// Gate is an object's approval policy and the plan hashes its approval
// annotations name. The zero Gate (no policy) lets every plan apply:
// machines and pools are not gated.
type Gate struct {
	Policy                                infrav1.ApprovalPolicy
	ApprovedPlan, ApprovedDestructivePlan string
	// Protect is spec.protect: no approval lets a plan destroy, replace or
	// forget what it covers.
	Protect []string
	// Modules are the digests of module code an approver accepted for the
	// object (the code its last apply ran, and the code its state was kept
	// under); empty: the object runs whatever code it names (none was
	// applied yet). ApprovedModule is the digest captf.io/approve-module
	// names.
	Modules        []string
	ApprovedModule string
}

// UnrecordedModule stands in Gate.Modules for the code of an object
// applied before CAPTF recorded module digests: no code has this digest,
// so code of changed inputs waits for an approver, while runs of the
// applied inputs (drift checks, refreshes, a destroy) run and record it.
const UnrecordedModule = "unrecorded"

// Of is the Gate of a TerraformCluster: policy (Destructive when unset)
// and the approvals in annotations. An approval of appliedPlan, the plan
// applied last, is no approval: an approved plan applies once, and one
// left in place would approve any later plan that hashes alike. st says
// what was applied: the plan, the inputs and the code's digest.
func Of(policy infrav1.ApprovalPolicy, protect []string, annotations map[string]string, st *infrav1.WorkspaceStatus) Gate {
	if policy == "" {
		policy = infrav1.ApprovalPolicyDestructive
	}
	approval := func(key string) string {
		if v := annotations[key]; v != st.AppliedPlanHash {
			return v
		}
		return ""
	}
	g := Gate{Policy: policy, ApprovedPlan: approval(infrav1.AnnotationApprovePlan),
		ApprovedDestructivePlan: approval(infrav1.AnnotationApproveDestructivePlan), Protect: protect,
		ApprovedModule: annotations[infrav1.AnnotationApproveModule]}
	switch {
	case st.AppliedModule != "":
		g.Modules = []string{st.AppliedModule}
	case st.AppliedInputsHash != "":
		g.Modules = []string{UnrecordedModule}
	}
	return g
}

// Unrecorded tells whether the code the object applied has no digest on
// record (UnrecordedModule).
func (g Gate) Unrecorded() bool {
	return len(g.Modules) == 1 && g.Modules[0] == UnrecordedModule
}

// RunnableModules are the digests of the code a Job of the object may run,
// for the runner to check (run.Spec.ApprovedModules): nil when any may run.
func (g Gate) RunnableModules() []string {
	if len(g.Modules) == 0 {
		return nil
	}
	out := slices.Clone(g.Modules)
	if g.ApprovedModule != "" && !slices.Contains(out, g.ApprovedModule) {
		out = append(out, g.ApprovedModule)
	}
	return out
}

// ModuleRunnable tells whether a Job of the object may run the code of
// digest.
func (g Gate) ModuleRunnable(digest string) bool {
	mods := g.RunnableModules()
	return mods == nil || slices.Contains(mods, digest)
}

// Protected names the addresses of plan's protected changes that the
// gate's patterns still cover: a plan made under other patterns is judged
// by today's (a pattern removed since frees its addresses).
func (g Gate) Protected(plan *run.Plan) []string {
	var out []string
	for _, a := range plan.Protected {
		if run.ProtectedBy(g.Protect, a) {
			out = append(out, a)
		}
	}
	return out
}

// Needed says which annotation must name plan before it may apply, or ""
// when it may apply (Protected is asked apart: no annotation frees a
// protected change): a plan that deletes, replaces or forgets needs
// approve-destructive-plan under either policy; under Manual any change
// needs approve-plan (or approve-destructive-plan), a change of outputs
// alone included. A plan that changes nothing always applies.
//
// A plan policy's verdict (plan.Verdict) comes first: Allow lets the plan
// apply, RequireApproval judges it as Manual would, and Deny is never
// approved (NotApprovable: ask Denied first).
func (g Gate) Needed(plan *run.Plan) string {
	if v := plan.Verdict; v != nil {
		switch v.Action {
		case infrav1.PlanActionDeny:
			return NotApprovable
		case infrav1.PlanActionAllow:
			return ""
		case infrav1.PlanActionRequireApproval:
			g.Policy = infrav1.ApprovalPolicyManual
		}
	}
	switch {
	case g.Policy == "" || !plan.HasChanges() && (g.Policy != infrav1.ApprovalPolicyManual || len(plan.OutputChanges) == 0):
		return ""
	case plan.Destructive():
		if g.ApprovedDestructivePlan == plan.Hash {
			return ""
		}
		return infrav1.AnnotationApproveDestructivePlan
	case g.Policy == infrav1.ApprovalPolicyManual:
		if g.ApprovedPlan == plan.Hash || g.ApprovedDestructivePlan == plan.Hash {
			return ""
		}
		return infrav1.AnnotationApprovePlan
	}
	return ""
}

// NotApprovable is what Needed says of a plan a plan policy denied: no
// annotation applies it.
const NotApprovable = "(none: a plan policy denies the plan)"

// DropUsed removes from annotations the approvals that name plan or
// module, just applied, and says whether it removed any: the module's
// digest is the applied one now, accepted without it.
func DropUsed(annotations map[string]string, plan, module string) bool {
	dropped := false
	for key, used := range map[string]string{infrav1.AnnotationApprovePlan: plan, infrav1.AnnotationApproveDestructivePlan: plan, infrav1.AnnotationApproveModule: module} {
		if v, ok := annotations[key]; ok && used != "" && v == used {
			delete(annotations, key)
			dropped = true
		}
	}
	return dropped
}
