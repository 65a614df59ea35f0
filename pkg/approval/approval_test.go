package approval

import (
	"maps"
	"reflect"
	"testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/run"
)

// TestNeeded: which approval a plan needs under each policy, and which
// approvals count.
func TestNeeded(t *testing.T) {
	const h = "0123456789abcdef"
	add := &run.Plan{Hash: h, Summary: infrav1.PlanSummary{Add: 1}}
	replace := &run.Plan{Hash: h, Summary: infrav1.PlanSummary{Add: 1, Replace: 1}}
	none := &run.Plan{Hash: h}
	forget := &run.Plan{Hash: h, Summary: infrav1.PlanSummary{Forget: 1}}
	imported := &run.Plan{Hash: h, Summary: infrav1.PlanSummary{Import: 1}}
	outputs := &run.Plan{Hash: h, OutputChanges: []string{"endpoint"}}
	judged := func(p *run.Plan, action infrav1.PlanAction) *run.Plan {
		j := *p
		j.Verdict = &planpolicy.Verdict{Action: action}
		return &j
	}
	cases := []struct {
		name                   string
		plan                   *run.Plan
		gate                   infrav1.ApprovalPolicy
		approved, approvedDest string
		want                   string
	}{
		{"machines are never gated", replace, "", "", "", ""},
		{"default policy applies a harmless plan", add, infrav1.ApprovalPolicyDestructive, "", "", ""},
		{"default policy stops a replacement", replace, infrav1.ApprovalPolicyDestructive, "", "", infrav1.AnnotationApproveDestructivePlan},
		{"approve-plan is not enough for a replacement", replace, infrav1.ApprovalPolicyDestructive, h, "", infrav1.AnnotationApproveDestructivePlan},
		{"the destructive approval of this plan", replace, infrav1.ApprovalPolicyDestructive, "", h, ""},
		{"the destructive approval of another plan", replace, infrav1.ApprovalPolicyDestructive, "", "fedcba9876543210", infrav1.AnnotationApproveDestructivePlan},
		{"manual policy stops any change", add, infrav1.ApprovalPolicyManual, "", "", infrav1.AnnotationApprovePlan},
		{"manual policy with its approval", add, infrav1.ApprovalPolicyManual, h, "", ""},
		{"manual policy, the approval of another plan", add, infrav1.ApprovalPolicyManual, "fedcba9876543210", "", infrav1.AnnotationApprovePlan},
		{"manual policy, the destructive approval of another plan", add, infrav1.ApprovalPolicyManual, "", "fedcba9876543210", infrav1.AnnotationApprovePlan},
		{"manual policy, a replacement needs the destructive approval", replace, infrav1.ApprovalPolicyManual, h, "", infrav1.AnnotationApproveDestructivePlan},
		{"no changes apply under any policy", none, infrav1.ApprovalPolicyManual, "", "", ""},
		{"a forget is destructive", forget, infrav1.ApprovalPolicyDestructive, "", "", infrav1.AnnotationApproveDestructivePlan},
		{"manual policy stops a forget", forget, infrav1.ApprovalPolicyManual, h, "", infrav1.AnnotationApproveDestructivePlan},
		{"manual policy stops an import", imported, infrav1.ApprovalPolicyManual, "", "", infrav1.AnnotationApprovePlan},
		{"default policy lets an import through", imported, infrav1.ApprovalPolicyDestructive, "", "", ""},
		{"manual policy stops a change of outputs alone", outputs, infrav1.ApprovalPolicyManual, "", "", infrav1.AnnotationApprovePlan},
		{"manual policy, outputs approved", outputs, infrav1.ApprovalPolicyManual, h, "", ""},
		{"default policy lets outputs change", outputs, infrav1.ApprovalPolicyDestructive, "", "", ""},
		{"a plan policy allows a replacement", judged(replace, infrav1.PlanActionAllow), infrav1.ApprovalPolicyManual, "", "", ""},
		{"a plan policy denies, approved or not", judged(replace, infrav1.PlanActionDeny), infrav1.ApprovalPolicyDestructive, h, h, NotApprovable},
		{"a plan policy denies an object never gated", judged(add, infrav1.PlanActionDeny), "", "", "", NotApprovable},
		{"a plan policy requires an approval the default policy would not", judged(add, infrav1.PlanActionRequireApproval), infrav1.ApprovalPolicyDestructive, "", "", infrav1.AnnotationApprovePlan},
		{"a plan policy requires an approval, given", judged(add, infrav1.PlanActionRequireApproval), infrav1.ApprovalPolicyDestructive, h, "", ""},
		{"a plan policy requires an approval of a replacement: the destructive one", judged(replace, infrav1.PlanActionRequireApproval), infrav1.ApprovalPolicyDestructive, h, "", infrav1.AnnotationApproveDestructivePlan},
		{"no rule matched: the object's policy", judged(add, ""), infrav1.ApprovalPolicyManual, "", "", infrav1.AnnotationApprovePlan},
	}
	for _, tc := range cases {
		if got := (Gate{Policy: tc.gate, ApprovedPlan: tc.approved, ApprovedDestructivePlan: tc.approvedDest}).Needed(tc.plan); got != tc.want {
			t.Errorf("%s: Needed = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestOf: an approval applies once. The approval of the plan applied
// last is no approval, whichever annotation holds it; any other is passed
// on, and a missing policy is Destructive.
func TestOf(t *testing.T) {
	tests := map[string]struct {
		policy      infrav1.ApprovalPolicy
		protect     []string
		annotations map[string]string
		applied     string
		module      string
		inputs      string
		want        Gate
	}{
		"no policy, no approvals": {want: Gate{Policy: infrav1.ApprovalPolicyDestructive}},
		"approvals of a new plan": {
			policy:      infrav1.ApprovalPolicyManual,
			annotations: map[string]string{infrav1.AnnotationApprovePlan: "2222", infrav1.AnnotationApproveDestructivePlan: "2222"},
			applied:     "1111",
			want:        Gate{Policy: infrav1.ApprovalPolicyManual, ApprovedPlan: "2222", ApprovedDestructivePlan: "2222"},
		},
		"approvals of the applied plan": {
			policy:      infrav1.ApprovalPolicyManual,
			annotations: map[string]string{infrav1.AnnotationApprovePlan: "1111", infrav1.AnnotationApproveDestructivePlan: "1111"},
			applied:     "1111",
			want:        Gate{Policy: infrav1.ApprovalPolicyManual},
		},
		"protected": {
			protect: []string{"db.*"},
			want:    Gate{Policy: infrav1.ApprovalPolicyDestructive, Protect: []string{"db.*"}},
		},
		"one of each": {
			annotations: map[string]string{infrav1.AnnotationApprovePlan: "1111", infrav1.AnnotationApproveDestructivePlan: "3333"},
			applied:     "1111",
			want:        Gate{Policy: infrav1.ApprovalPolicyDestructive, ApprovedDestructivePlan: "3333"},
		},
		"applied code, and other code approved": {
			annotations: map[string]string{infrav1.AnnotationApproveModule: "sha256:b"},
			module:      "sha256:a",
			want:        Gate{Policy: infrav1.ApprovalPolicyDestructive, Modules: []string{"sha256:a"}, ApprovedModule: "sha256:b"},
		},
		"applied before digests were recorded": {
			annotations: map[string]string{infrav1.AnnotationApproveModule: "sha256:b"},
			inputs:      "abcd",
			want:        Gate{Policy: infrav1.ApprovalPolicyDestructive, Modules: []string{UnrecordedModule}, ApprovedModule: "sha256:b"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Of(tc.policy, tc.protect, tc.annotations, &infrav1.WorkspaceStatus{AppliedPlanHash: tc.applied, AppliedModule: tc.module, AppliedInputsHash: tc.inputs}); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Of = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestDropUsed: only the approvals of the plan and module just applied go.
func TestDropUsed(t *testing.T) {
	annotations := map[string]string{infrav1.AnnotationApprovePlan: "1111", infrav1.AnnotationApproveDestructivePlan: "2222", "other": "1111",
		infrav1.AnnotationApproveModule: "sha256:a"}
	if !DropUsed(annotations, "1111", "sha256:b") {
		t.Fatal("nothing dropped")
	}
	want := map[string]string{infrav1.AnnotationApproveDestructivePlan: "2222", "other": "1111", infrav1.AnnotationApproveModule: "sha256:a"}
	if !maps.Equal(annotations, want) {
		t.Errorf("annotations %v, want %v", annotations, want)
	}
	if DropUsed(annotations, "1111", "") {
		t.Error("dropped again")
	}
	if !DropUsed(annotations, "", "sha256:a") || annotations[infrav1.AnnotationApproveModule] != "" {
		t.Errorf("the approval of the module applied is still there: %v", annotations)
	}
}

// TestRunnableModules: an object that applied code runs that code, or
// code an approver names; one that applied none runs any.
func TestRunnableModules(t *testing.T) {
	cases := []struct {
		name     string
		gate     Gate
		digest   string
		runnable bool
	}{
		{"nothing applied yet", Gate{ApprovedModule: "sha256:b"}, "sha256:c", true},
		{"the applied code", Gate{Modules: []string{"sha256:a"}}, "sha256:a", true},
		{"changed code", Gate{Modules: []string{"sha256:a"}}, "sha256:c", false},
		{"changed code, approved", Gate{Modules: []string{"sha256:a"}, ApprovedModule: "sha256:c"}, "sha256:c", true},
		{"changed code, another approved", Gate{Modules: []string{"sha256:a"}, ApprovedModule: "sha256:b"}, "sha256:c", false},
		{"code of an unrecorded apply", Gate{Modules: []string{UnrecordedModule}}, "sha256:a", false},
		{"code of an unrecorded apply, approved", Gate{Modules: []string{UnrecordedModule}, ApprovedModule: "sha256:a"}, "sha256:a", true},
	}
	for _, tc := range cases {
		if got := tc.gate.ModuleRunnable(tc.digest); got != tc.runnable {
			t.Errorf("%s: ModuleRunnable(%s) = %v, want %v", tc.name, tc.digest, got, tc.runnable)
		}
	}
}

// TestProtected: a plan's protected changes count only while today's
// patterns still cover them.
func TestProtected(t *testing.T) {
	plan := &run.Plan{Hash: "1111", Protected: []string{"db.main", "net.gw"}}
	tests := map[string]struct {
		protect []string
		want    []string
	}{
		"both still covered":    {protect: []string{"db.*", "net.gw"}, want: []string{"db.main", "net.gw"}},
		"one pattern removed":   {protect: []string{"net.*"}, want: []string{"net.gw"}},
		"every pattern removed": {},
		"another pattern":       {protect: []string{"dns.*"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := (Gate{Protect: tc.protect}).Protected(plan); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Protected = %v, want %v", got, tc.want)
			}
		})
	}
}
