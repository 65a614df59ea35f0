package workspace_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// TestGateSequence walks a destructive plan through the gate: blocked,
// a stale approval (nothing runs), the right approval (attempt 1 with the
// approval), a plan that changed meanwhile (re-armed), then applied.
func TestGateSequence(t *testing.T) {
	k := kinds[0]
	f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi)
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 1 {
		t.Fatalf("first sync created %v", jobNames(jobs))
	}
	destroyOne := infrav1.PlanSummary{Destroy: 1, Resources: []infrav1.PlannedResource{{Address: "terraform_data.instance[1]", Action: "destroy"}}}
	first := f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked, Stage: "gate",
		Plan: &run.Plan{Hash: "1111111111111111", Summary: destroyOne}})

	f.sync()
	c := f.condition(infrav1.ConditionDestructivePlanBlocked)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != workspace.ReasonAwaitingApproval ||
		!strings.Contains(c.Message, "kubectl annotate terraformcluster -n ns prod captf.io/approve-destructive-plan=1111111111111111 --overwrite") {
		t.Fatalf("blocked: DestructivePlanBlocked = %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("a blocked plan started %v", jobNames(jobs))
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "2222222222222222")
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Reason != workspace.ReasonApprovalForAnotherPlan {
		t.Errorf("approval of another plan: %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("an approval of another plan started %v", jobNames(jobs))
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "1111111111111111")
	f.sync()
	jobs := jobNames(f.createdJobs())
	if len(jobs) != 1 || !strings.HasSuffix(jobs[0], "-1") || strings.TrimSuffix(jobs[0], "-1") != strings.TrimSuffix(first.Name, "-0") {
		t.Fatalf("the approval started %v, want attempt 1 of %s", jobs, first.Name)
	}
	approved := f.createdJobs()[0]
	if approved.Labels[names.LabelApprovedPlan] != "1111111111111111" ||
		!slices.Contains(approved.Spec.Template.Spec.Containers[0].Args, "--approved-destructive-plan=1111111111111111") {
		t.Errorf("approved Job labels %v args %v", approved.Labels, approved.Spec.Template.Spec.Containers[0].Args)
	}

	// Meanwhile the plan changed: the gate re-arms with the new hash.
	f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked, Stage: "gate",
		Plan: &run.Plan{Hash: "3333333333333333", Summary: destroyOne}})
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Reason != workspace.ReasonPlanChanged ||
		!strings.Contains(c.Message, "The approved plan 1111111111111111 is no longer what terraform plans") || !strings.Contains(c.Message, "=3333333333333333") {
		t.Errorf("changed plan: %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("a changed plan started %v", jobNames(jobs))
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "3333333333333333")
	f.sync()
	if jobs := jobNames(f.createdJobs()); len(jobs) != 1 || !strings.HasSuffix(jobs[0], "-2") {
		t.Fatalf("the second approval started %v, want attempt 2", jobs)
	}
	f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded,
		Plan:    &run.Plan{Hash: "3333333333333333", Summary: destroyOne},
		Outputs: map[string]run.Output{"x": {Value: json.RawMessage("1")}}})
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Status != metav1.ConditionFalse {
		t.Errorf("after the apply: %+v", c)
	}
	if r := f.readyReason(); r != workspace.ReasonApplied {
		t.Errorf("Ready reason %q after the apply", r)
	}
	// Applied once (issue 30, item 4): the used approval is gone, so no
	// later plan that hashes alike applies on it.
	if _, ok := f.object().GetAnnotations()[infrav1.AnnotationApproveDestructivePlan]; ok {
		t.Errorf("the used approval is still on the object: %v", f.object().GetAnnotations())
	}
	f.observe()
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Errorf("an applied approval started %v", jobNames(jobs))
	}
}

// TestProtectedChange: a run refused for a protected change holds the
// object (no retry, whatever the approvals) while spec.protect covers it;
// removing the pattern runs it again at once. A result claiming protected
// addresses no pattern covers (module code can write its own result) does
// not skip the failure's backoff while spec.protect is unchanged.
func TestProtectedChange(t *testing.T) {
	k := kinds[0]
	protect := func(patterns ...string) func(workspace.Object) {
		return func(o workspace.Object) { o.(*infrav1.TerraformCluster).Spec.Protect = patterns }
	}
	refused := func(protected ...string) run.Result {
		return run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeFailed, Stage: run.StageGate, Reason: run.ReasonProtectedResourceChange,
			Error: "protected", Plan: &run.Plan{Hash: "1111111111111111", Summary: infrav1.PlanSummary{Replace: 1}, Protected: protected}}
	}
	t.Run("held until the pattern goes", func(t *testing.T) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), protect("db.*")), k.capi)
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || jobs[0].Labels[names.LabelProtect] != names.ProtectHash([]string{"db.*"}) {
			t.Fatalf("first sync created %v", jobNames(jobs))
		}
		f.failJob(refused("db.main"))
		f.annotate(infrav1.AnnotationApproveDestructivePlan, "1111111111111111")
		f.sync()
		if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c == nil || c.Reason != run.ReasonProtectedResourceChange || !strings.Contains(c.Message, "db.main, which spec.protect covers") {
			t.Errorf("DestructivePlanBlocked = %+v", c)
		}
		if r := f.readyReason(); r != run.ReasonProtectedResourceChange {
			t.Errorf("Ready's reason %q", r)
		}
		if jobs := f.createdJobs(); len(jobs) != 0 {
			t.Fatalf("a protected change, approved, started %v", jobNames(jobs))
		}
		f.change(protect("net.*"))
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 1 || jobs[0].Labels[names.LabelAttempt] != "1" {
			t.Errorf("the pattern removed: created %v, want attempt 1 at once", jobNames(jobs))
		}
	})
	t.Run("a forged reason", func(t *testing.T) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), protect("db.*")), k.capi)
		f.sync()
		f.failJob(refused("nothing.covered"))
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 0 {
			t.Errorf("a result naming addresses no pattern covers skipped the backoff: %v", jobNames(jobs))
		}
	})
}

// TestModuleGate (issue 50, item 2): once a TerraformCluster has applied,
// its Jobs run only the applied code or code an approver named. An apply
// that stopped for other code waits without a retry and says which digest
// waits; a destroy that stopped is held, not retried on a backoff, and
// runs again at once when an approver names the digest.
func TestModuleGate(t *testing.T) {
	k := kinds[0]
	const applied, next = "sha256:aaaa", "sha256:bbbb"
	stopped := func(op infrav1.Operation, outcome string) run.Result {
		return run.Result{Operation: op, Outcome: outcome, Stage: run.StageModule, Reason: run.ReasonModuleAwaitingApproval,
			Error: "not approved", Module: &run.ModuleCode{Digest: next}}
	}
	withApplied := func(o workspace.Object) { o.WorkspaceStatus().AppliedModule = applied }
	args := func(j *batchv1.Job) string { return jobArgs([]*batchv1.Job{j})[0] }
	t.Run("apply waits", func(t *testing.T) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), withApplied), k.capi)
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || !strings.Contains(args(jobs[0]), `--approved-modules=["`+applied+`"]`) {
			t.Fatalf("first sync created %v with args %v, want the applied code only", jobNames(jobs), jobs)
		}
		blocked := f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked, Stage: run.StageModule,
			Reason: run.ReasonModuleAwaitingApproval, Module: &run.ModuleCode{Digest: next}, Record: "blocked-run", RecordDigest: "sha256:1234"})
		f.sync()
		if c := f.condition(infrav1.ConditionPlanAwaitingApproval); c == nil || c.Status != metav1.ConditionTrue || c.Reason != run.ReasonModuleAwaitingApproval ||
			!strings.Contains(c.Message, "captf.io/approve-module="+next) {
			t.Errorf("PlanAwaitingApproval = %+v", c)
		}
		// The plugin shows the files of the record the status vouches for.
		if want := (infrav1.JobReference{Operation: infrav1.OperationApply, Name: blocked.Name, Outcome: run.OutcomeBlocked, Record: "blocked-run", RecordDigest: "sha256:1234"}); !slices.ContainsFunc(f.object().WorkspaceStatus().LastJobs, func(j infrav1.JobReference) bool {
			return j.Name == want.Name && j.Record == want.Record && j.RecordDigest == want.RecordDigest
		}) {
			t.Errorf("lastJobs %+v, want %+v", f.object().WorkspaceStatus().LastJobs, want)
		}
		if jobs := f.createdJobs(); len(jobs) != 0 {
			t.Fatalf("code that waits started %v", jobNames(jobs))
		}
		f.observe()
		f.annotate(infrav1.AnnotationApproveModule, next)
		f.sync()
		jobs = f.createdJobs()
		if len(jobs) != 1 || !strings.Contains(args(jobs[0]), `--approved-modules=["`+applied+`","`+next+`"]`) {
			t.Fatalf("the approval created %v, want a Job that may run the approved code", jobNames(jobs))
		}
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Module: &run.ModuleCode{Digest: next},
			Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs, Record: "applied-run", RecordDigest: "sha256:5678"})
		f.sync()
		obj := f.object()
		if got := obj.WorkspaceStatus().AppliedModule; got != next {
			t.Errorf("appliedModule %q, want %q", got, next)
		}
		if st := obj.WorkspaceStatus(); st.AppliedRecord != "applied-run" || st.AppliedRecordDigest != "sha256:5678" {
			t.Errorf("appliedRecord %q %q, want the applying run's record and digest", st.AppliedRecord, st.AppliedRecordDigest)
		}
		// The next sync, with the Job still there, writes nothing: its
		// record stays named without the result being read again.
		f.observe()
		f.sync()
		f.wantPrefixes("writes of a sync that changes nothing", f.writes(), nil)
		if _, ok := obj.GetAnnotations()[infrav1.AnnotationApproveModule]; ok {
			t.Errorf("the used approval is still on the object: %v", obj.GetAnnotations())
		}
	})
	// An object applied by a CAPTF that recorded no digest: runs of the
	// applied inputs run and record it, other inputs run no new code
	// unapproved.
	t.Run("applied before digests were recorded", func(t *testing.T) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
		}), k.capi)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()
		if st := f.object().WorkspaceStatus(); st.AppliedInputsHash == "" || st.AppliedModule != "" {
			t.Fatalf("applied %q, module %q: want an apply without a digest", st.AppliedInputsHash, st.AppliedModule)
		}
		f.change(func(o workspace.Object) { o.Workspace().Module.Inline += "\n# changed" })
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || !strings.Contains(args(jobs[0]), `--approved-modules=["`+approval.UnrecordedModule+`"]`) {
			t.Fatalf("changed inputs created %v (%v), want an apply that runs no unapproved code", jobNames(jobs), jobArgs(jobs))
		}
		f.observe(jobs[0])
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked, Stage: run.StageModule,
			Reason: run.ReasonModuleAwaitingApproval, Module: &run.ModuleCode{Digest: next}})
		f.sync()
		if c := f.condition(infrav1.ConditionPlanAwaitingApproval); c == nil || c.Reason != run.ReasonModuleAwaitingApproval ||
			!strings.Contains(c.Message, "before CAPTF recorded the digest") {
			t.Errorf("PlanAwaitingApproval = %+v, want the code waiting, with why", c)
		}
		f.observe()
		f.change(func(o workspace.Object) {
			o.Workspace().Module.Inline = strings.TrimSuffix(o.Workspace().Module.Inline, "\n# changed")
		})
		clk := f.clock
		for start := clk.Now(); len(f.createdJobs()) == 0 && clk.Since(start) < 2*time.Minute; {
			clk.Step(5 * time.Second)
			f.sync()
		}
		jobs = f.createdJobs()
		if len(jobs) != 1 || jobs[0].Labels[names.LabelOperation] != string(infrav1.OperationDrift) || strings.Contains(args(jobs[0]), "--approved-modules") {
			t.Fatalf("the applied inputs again: created %v (%v), want a drift check of the applied code", jobNames(jobs), jobArgs(jobs))
		}
		f.observe(jobs[0])
		f.finishJob(run.Result{Operation: infrav1.OperationDrift, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "2222222222222222"}, Module: &run.ModuleCode{Digest: applied}})
		f.sync()
		if got := f.object().WorkspaceStatus().AppliedModule; got != applied {
			t.Errorf("appliedModule %q after a drift check of the applied inputs, want %q", got, applied)
		}
	})
	t.Run("destroy held", func(t *testing.T) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Module: &run.ModuleCode{Digest: applied},
			Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()
		f.change(deleting)
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 1 || jobs[0].Labels[names.LabelOperation] != string(infrav1.OperationDestroy) {
			t.Fatalf("first sync created %v, want a destroy", jobNames(jobs))
		}
		f.failJob(stopped(infrav1.OperationDestroy, run.OutcomeFailed))
		f.sync()
		if r := f.readyReason(); r != run.ReasonModuleAwaitingApproval {
			t.Errorf("Ready's reason %q", r)
		}
		if jobs := f.createdJobs(); len(jobs) != 0 {
			t.Fatalf("a destroy of code that waits was retried: %v", jobNames(jobs))
		}
		f.annotate(infrav1.AnnotationApproveModule, next)
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 1 || jobs[0].Labels[names.LabelAttempt] != "1" {
			t.Errorf("the approval created %v, want attempt 1 at once", jobNames(jobs))
		}
	})
}

// jobArgs are the runner's arguments of each of jobs.
func jobArgs(jobs []*batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, strings.Join(j.Spec.Template.Spec.Containers[0].Args, " "))
	}
	return out
}
