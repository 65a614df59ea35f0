package workspace

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

var decidedAt = time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)

// job is an apply Job of attempt created at created; ended, when not
// zero, is when it finished, succeeded or not.
func job(op infrav1.Operation, attempt int, created time.Time, ended time.Time, succeeded bool) *runnerjob.Cached {
	j := &runnerjob.Cached{Name: "j", Operation: op, Attempt: attempt, CreationTimestamp: metav1.NewTime(created)}
	if !ended.IsZero() {
		j.Status.Finished, j.Status.Complete = true, succeeded
		j.Status.EndTime = metav1.NewTime(ended)
		if succeeded {
			end := metav1.NewTime(ended)
			j.Status.CompletionTime = &end
		}
	}
	return j
}

func at(d time.Duration) *time.Time { t := decidedAt.Add(d); return &t }

func TestDecideApply(t *testing.T) {
	ok := job(infrav1.OperationApply, 2, decidedAt, decidedAt.Add(time.Minute), true)
	failed := job(infrav1.OperationApply, 2, decidedAt, decidedAt.Add(time.Minute), false)
	tests := map[string]struct {
		f    applyFacts
		want applyDecision
	}{
		"new inputs, no Job": {applyFacts{Hash: "b", Applied: "a"}, applyDecision{Action: applyStart}},
		"never applied":      {applyFacts{Hash: "a"}, applyDecision{Action: applyStart}},
		"applied, its Jobs gone from history": {applyFacts{Hash: "a", Applied: "a", LastApplied: at(0)},
			applyDecision{Action: applyUpToDate, ReadRefresh: true}},
		"applied, then the state was restored": {applyFacts{Hash: "a", Applied: "a", LastApplied: at(0), StateChanged: decidedAt.Add(time.Hour)},
			applyDecision{Action: applyStart, ReadRefresh: true}},
		"an apply runs": {applyFacts{Hash: "b", Applied: "a", Active: job(infrav1.OperationApply, 0, decidedAt, time.Time{}, false)},
			applyDecision{Action: applyReportRunning}},
		"a drift check runs, the inputs changed": {applyFacts{Hash: "b", Applied: "a", Active: job(infrav1.OperationDrift, 0, decidedAt, time.Time{}, false)},
			applyDecision{Action: applyStopDrift}},
		"a drift check of the applied inputs runs": {applyFacts{Hash: "a", Applied: "a", Active: job(infrav1.OperationDrift, 0, decidedAt, time.Time{}, false)},
			applyDecision{Action: applyReportRunning}},
		"the apply succeeded":             {applyFacts{Hash: "b", Applied: "a", LastApplied: at(-time.Hour), Latest: ok}, applyDecision{Action: applySucceeded}},
		"the apply failed":                {applyFacts{Hash: "b", Applied: "a", LastApplied: at(-time.Hour), Latest: failed}, applyDecision{Action: applyFailed}},
		"the apply of the applied inputs": {applyFacts{Hash: "a", Applied: "a", LastApplied: at(-time.Hour), Latest: ok}, applyDecision{Action: applySucceeded, ReadRefresh: true}},
		"the applied Job, recorded": {applyFacts{Hash: "a", Applied: "a", LastApplied: at(time.Minute), Latest: ok},
			applyDecision{Action: applyRecordUpToDate, ReadRefresh: true}},
		"the state changed after the apply succeeded": {applyFacts{Hash: "a", Applied: "a", LastApplied: at(time.Minute), StateChanged: decidedAt.Add(time.Hour), Latest: ok},
			applyDecision{Action: applyStart, Attempt: 3}},
		"the state changed after an apply that failed": {applyFacts{Hash: "b", Applied: "a", LastApplied: at(-time.Hour), StateChanged: decidedAt.Add(time.Hour), Latest: failed},
			applyDecision{Action: applyFailed}},
		"the spec went back to inputs applied before others": {applyFacts{Hash: "b", Applied: "a", LastApplied: at(time.Hour), Latest: ok},
			applyDecision{Action: applyStart, Attempt: 3}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := decideApply(tc.f); got != tc.want {
				t.Errorf("decideApply = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideResult(t *testing.T) {
	plan := &run.Plan{Hash: "1111111111111111", Summary: infrav1.PlanSummary{Change: 1}}
	destructive := &run.Plan{Hash: "2222222222222222", Summary: infrav1.PlanSummary{Destroy: 1}}
	module := &run.ModuleCode{Digest: "sha256:new"}
	blocked := func(p *run.Plan) *run.Result { return &run.Result{Outcome: run.OutcomeBlocked, Plan: p} }
	moduleWaits := &run.Result{Outcome: run.OutcomeBlocked, Reason: run.ReasonModuleAwaitingApproval, Module: module}
	judged := func(p *run.Plan, action infrav1.PlanAction, rules string) *run.Result {
		p = &run.Plan{Hash: p.Hash, Summary: p.Summary, Verdict: &planpolicy.Verdict{Action: action, Policy: "p", Rule: "r", Rules: rules}}
		return blocked(p)
	}
	tests := map[string]struct {
		res   *run.Result
		gate  *approval.Gate
		want  resultAction
		rules string // the digest of today's rules
	}{
		"a plan denied":                          {res: judged(plan, infrav1.PlanActionDeny, "r1"), rules: "r1", want: resultPlanDenied},
		"a plan denied, approved all the same":   {res: judged(destructive, infrav1.PlanActionDeny, "r1"), rules: "r1", gate: &approval.Gate{Policy: infrav1.ApprovalPolicyDestructive, ApprovedDestructivePlan: destructive.Hash}, want: resultPlanDenied},
		"a plan denied, of a machine":            {res: judged(plan, infrav1.PlanActionDeny, "r1"), rules: "r1", want: resultPlanDenied},
		"a plan denied by rules changed since":   {res: judged(plan, infrav1.PlanActionDeny, "r1"), rules: "r2", want: resultPolicyChanged},
		"a plan denied by rules deleted since":   {res: judged(plan, infrav1.PlanActionDeny, "r1"), want: resultPolicyChanged},
		"a plan that must wait by policy":        {res: judged(plan, infrav1.PlanActionRequireApproval, "r1"), rules: "r1", gate: &approval.Gate{Policy: infrav1.ApprovalPolicyDestructive}, want: resultPlanWaits},
		"a plan that waited by policy, approved": {res: judged(plan, infrav1.PlanActionRequireApproval, "r1"), rules: "r1", gate: &approval.Gate{Policy: infrav1.ApprovalPolicyDestructive, ApprovedPlan: plan.Hash}, want: resultPlanApproved},
		"a plan allowed":                         {res: judged(destructive, infrav1.PlanActionAllow, "r1"), rules: "r1", gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual}, want: resultPlanApproved},
		"applied":                                {res: &run.Result{Outcome: run.OutcomeSucceeded, Plan: plan}, gate: nil, want: resultOutputs},
		"applied under a gate":                   {res: &run.Result{Outcome: run.OutcomeSucceeded, Plan: plan}, gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual}, want: resultOutputs},
		"a plan waits":                           {res: blocked(plan), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual}, want: resultPlanWaits},
		"a plan approved since":                  {res: blocked(plan), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual, ApprovedPlan: plan.Hash}, want: resultPlanApproved},
		"another plan approved":                  {res: blocked(plan), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual, ApprovedPlan: destructive.Hash}, want: resultPlanWaits},
		"a destructive plan waits":               {res: blocked(destructive), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyDestructive, ApprovedPlan: destructive.Hash}, want: resultPlanWaits},
		"a destructive plan approved":            {res: blocked(destructive), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyDestructive, ApprovedDestructivePlan: destructive.Hash}, want: resultPlanApproved},
		"a blocked result, no plan":              {res: blocked(nil), gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual}, want: resultOutputs},
		"code waits":                             {res: moduleWaits, gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual, Modules: []string{"sha256:old"}}, want: resultModuleWaits},
		"code approved since":                    {res: moduleWaits, gate: &approval.Gate{Policy: infrav1.ApprovalPolicyManual, Modules: []string{"sha256:old"}, ApprovedModule: module.Digest}, want: resultModuleApproved},
		"code of an object never gated":          {res: moduleWaits, gate: nil, want: resultModuleApproved},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := decideResult(tc.res, tc.gate, tc.rules); got != tc.want {
				t.Errorf("decideResult = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDecideLifecycle(t *testing.T) {
	tests := map[string]struct {
		f    lifecycleFacts
		want lifecycleDecision
	}{
		"a new object without its owner waits quietly": {lifecycleFacts{OwnerMissing: true, Age: 3 * time.Second},
			lifecycleDecision{QuietFor: 7 * time.Second}},
		"a clock behind the API server's": {lifecycleFacts{OwnerMissing: true, Age: -time.Minute},
			lifecycleDecision{QuietFor: ownerGrace}},
		"an owner missing for long":              {lifecycleFacts{OwnerMissing: true, Age: time.Minute}, lifecycleDecision{OwnerMissing: true}},
		"an owner missing, reported already":     {lifecycleFacts{OwnerMissing: true, Age: time.Second, Reported: true}, lifecycleDecision{OwnerMissing: true}},
		"a deletion does not wait for an owner":  {lifecycleFacts{OwnerMissing: true, Deleting: true, HasFinalizer: true}, lifecycleDecision{Destroy: true}},
		"the first sync":                         {lifecycleFacts{}, lifecycleDecision{AddFinalizer: true, BlockMove: true, Go: true}},
		"the first sync, paused":                 {lifecycleFacts{Paused: true}, lifecycleDecision{AddFinalizer: true, Paused: true}},
		"no Job runs: move unblocked":            {lifecycleFacts{HasFinalizer: true, MoveBlocked: true}, lifecycleDecision{UnblockMove: true, Go: true}},
		"no Job runs, paused: move unblocked":    {lifecycleFacts{HasFinalizer: true, MoveBlocked: true, Paused: true}, lifecycleDecision{UnblockMove: true, Paused: true}},
		"a Job may run: move stays blocked":      {lifecycleFacts{HasFinalizer: true, MoveBlocked: true, JobMayRun: true}, lifecycleDecision{Go: true}},
		"deleting":                               {lifecycleFacts{Deleting: true, HasFinalizer: true}, lifecycleDecision{Destroy: true}},
		"deleting while paused destroys nothing": {lifecycleFacts{Deleting: true, HasFinalizer: true, Paused: true}, lifecycleDecision{Paused: true}},
		"deleting, the finalizer gone":           {lifecycleFacts{Deleting: true}, lifecycleDecision{}},
		"a restore comes first":                  {lifecycleFacts{HasFinalizer: true, RestoreAsked: true}, lifecycleDecision{Go: true, Restore: true}},
		"a restore comes before the destroy":     {lifecycleFacts{Deleting: true, HasFinalizer: true, RestoreAsked: true}, lifecycleDecision{Destroy: true, Restore: true}},
		"no restore while paused":                {lifecycleFacts{HasFinalizer: true, RestoreAsked: true, Paused: true}, lifecycleDecision{Paused: true}},
		"no restore while the owner is missing":  {lifecycleFacts{OwnerMissing: true, Age: time.Minute, HasFinalizer: true, RestoreAsked: true}, lifecycleDecision{OwnerMissing: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := decideLifecycle(tc.f); got != tc.want {
				t.Errorf("decideLifecycle = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideStart(t *testing.T) {
	rescued := &metav1.Condition{Type: infrav1.ConditionStateRescued, Status: metav1.ConditionTrue, Message: "rescued into b-3", LastTransitionTime: metav1.NewTime(decidedAt)}
	restored := func(d time.Duration) *infrav1.StateRestore {
		return &infrav1.StateRestore{Backup: "b-3", Time: metav1.NewTime(decidedAt.Add(d))}
	}
	state := func(change func(*StateSecretMeta)) *StateSecretMeta {
		m := &StateSecretMeta{Kind: "tm", ObjectName: "m", NamesObject: true, HasState: true, Protected: true}
		if change != nil {
			change(m)
		}
		return m
	}
	facts := func(change func(*startFacts)) startFacts {
		f := startFacts{State: stateFacts{Kind: "TerraformMachine", Label: "tm", Namespace: "ns", Name: "m", State: "captf-tm-m-state"}}
		change(&f)
		return f
	}
	tests := map[string]struct {
		f    startFacts
		want startDecision
	}{
		"a new object starts": {
			f: facts(func(*startFacts) {}),
		},
		"an applied object with its state starts, and expects it": {
			f:    facts(func(f *startFacts) { f.State.Applied, f.State.Head = true, state(nil) }),
			want: startDecision{ExpectState: true},
		},
		"a state back clears StateMissing": {
			f:    facts(func(f *startFacts) { f.State.Applied, f.State.Head, f.State.MissingReported = true, state(nil), true }),
			want: startDecision{ExpectState: true, StatePresent: true},
		},
		"a rescued state waits": {
			f:    facts(func(f *startFacts) { f.Rescued = rescued }),
			want: startDecision{Stop: startRescueWaits, Reason: ReasonStateRescued, Message: "rescued into b-3"},
		},
		"a restore before the rescue lets nothing go": {
			f:    facts(func(f *startFacts) { f.Rescued, f.LastRestore = rescued, restored(-time.Second) }),
			want: startDecision{Stop: startRescueWaits, Reason: ReasonStateRescued, Message: "rescued into b-3"},
		},
		"a restore after the rescue lets the Job start": {
			f:    facts(func(f *startFacts) { f.Rescued, f.LastRestore = rescued, restored(time.Second) }),
			want: startDecision{RescueRestored: "Backup b-3 was restored after the state was rescued"},
		},
		"a rescue's end is reported though the pod is refused": {
			f: facts(func(f *startFacts) {
				f.Rescued, f.LastRestore, f.PodRules = rescued, restored(time.Second), "no hostPath"
			}),
			want: startDecision{Stop: startInputError, Reason: ReasonRunnerPodNotAllowed, RescueRestored: "Backup b-3 was restored after the state was rescued",
				Message: "The runner pod would break the operator's rules (with spec.defaults.jobs of the cluster merged in): no hostPath"},
		},
		"a refused ServiceAccount stops the Job before the state is looked at": {
			f: facts(func(f *startFacts) {
				f.Account = &InputError{Reason: ReasonRunnerServiceAccountNotAllowed, Message: "unlabelled"}
				f.State.Applied = true
			}),
			want: startDecision{Stop: startInputError, Reason: ReasonRunnerServiceAccountNotAllowed, Message: "unlabelled"},
		},
		"a state that names another object is refused": {
			f: facts(func(f *startFacts) {
				f.State.Head = state(func(m *StateSecretMeta) { m.ObjectName, m.Owned = "other", true })
			}),
			want: startDecision{Stop: startStateRefused, Reason: ReasonStateOwnedByOther},
		},
		"a state that names another kind is refused": {
			f:    facts(func(f *startFacts) { f.State.Head = state(func(m *StateSecretMeta) { m.Kind = "tc" }) }),
			want: startDecision{Stop: startStateRefused, Reason: ReasonStateOwnedByOther},
		},
		"a state that names nothing is this object's": {
			f: facts(func(f *startFacts) {
				f.State.Head = state(func(m *StateSecretMeta) { m.NamesObject, m.ObjectName = false, "" })
			}),
			want: startDecision{},
		},
		"an abandoned state is refused": {
			f:    facts(func(f *startFacts) { f.State.Head = state(func(m *StateSecretMeta) { m.Abandoned = true }) }),
			want: startDecision{Stop: startStateRefused, Reason: ReasonStateAbandoned},
		},
		"an unprotected state is protected again": {
			f:    facts(func(f *startFacts) { f.State.Head = state(func(m *StateSecretMeta) { m.Protected = false }) }),
			want: startDecision{ProtectState: true},
		},
		"an owned state is protected again": {
			f: facts(func(f *startFacts) {
				f.State.Applied, f.State.Head = true, state(func(m *StateSecretMeta) { m.Owned = true })
			}),
			want: startDecision{ProtectState: true, ExpectState: true},
		},
		"an applied object without a state stops": {
			f:    facts(func(f *startFacts) { f.State.Applied = true }),
			want: startDecision{Stop: startStateMissing},
		},
		"an applied object whose state is empty stops, its Secrets protected": {
			f: facts(func(f *startFacts) {
				f.State.Applied, f.State.Head = true, state(func(m *StateSecretMeta) { m.HasState, m.Protected = false, false })
			}),
			want: startDecision{Stop: startStateMissing, ProtectState: true},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := decideStart(tc.f)
			if tc.want.Stop == startStateRefused {
				// The message names the Secret and what to do: checked
				// for the Secret's name only.
				if !strings.Contains(got.Message, "captf-tm-m-state") {
					t.Errorf("message %q does not name the state Secret", got.Message)
				}
				got.Message = ""
			}
			if got != tc.want {
				t.Errorf("decideStart() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
