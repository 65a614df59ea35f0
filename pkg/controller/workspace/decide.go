package workspace

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// What a sync decides, from what it gathered, before it writes anything.
// The functions here read no cache and no API and write nothing: each
// returns what to do, and the engine does it.

// applyAction is what a sync does about the inputs it would apply.
type applyAction int

const (
	// applyStopDrift deletes the running drift check: the inputs changed,
	// and their apply does not wait for it.
	applyStopDrift applyAction = iota
	// applyReportRunning reports the Job that runs.
	applyReportRunning
	// applyStart starts an apply Job (applyDecision.Attempt).
	applyStart
	// applyUpToDate reports the inputs applied, and checks for drift when
	// due.
	applyUpToDate
	// applyRecordUpToDate records the newest apply Job, which applied
	// what the status holds already, then is applyUpToDate.
	applyRecordUpToDate
	// applyFailed reports the newest apply Job's failure and retries it
	// after its backoff.
	applyFailed
	// applySucceeded reads the newest apply Job's result: outputs, or a
	// plan or code that waits for an approver.
	applySucceeded
)

// applyFacts is what the apply decision reads: the object's Jobs and what
// its status says is applied.
type applyFacts struct {
	Hash string // of the inputs to apply
	// Applied and LastApplied: status.appliedInputsHash and
	// status.lastAppliedTime.
	Applied     string
	LastApplied *time.Time
	// StateChanged is when the state last changed under the applied
	// inputs: a restore, or drift to remediate.
	StateChanged time.Time
	Active       *runnerjob.Cached // the Job that runs, if one does
	Latest       *runnerjob.Cached // the newest apply Job of Hash
}

// applyDecision is what to do, and, for applyStart, which attempt.
type applyDecision struct {
	Action  applyAction
	Attempt int
	// ReadRefresh: the inputs are the applied ones, and a refresh that
	// finished since the last one recorded is read before Action: its
	// outputs, when there are any, are recorded instead.
	ReadRefresh bool
}

// decideApply decides what a sync does about the inputs f.Hash.
func decideApply(f applyFacts) applyDecision {
	if f.Active != nil {
		if f.Active.Operation == infrav1.OperationDrift && f.Applied != f.Hash {
			return applyDecision{Action: applyStopDrift}
		}
		return applyDecision{Action: applyReportRunning}
	}
	latest := f.Latest
	next := 0
	if latest != nil {
		next = latest.Attempt + 1
		// The state changed under the last apply: plan and apply again.
		if _, succeeded := runnerjob.Finished(latest); succeeded && latest.CreationTimestamp.Time.Before(f.StateChanged) {
			return applyDecision{Action: applyStart, Attempt: next}
		}
		// Other inputs were applied after the last Job of these (the spec
		// went back to earlier inputs): that Job's plan and outputs are of
		// another infrastructure than today's.
		if f.Applied != f.Hash && f.LastApplied != nil && !runnerjob.FinishTime(latest).After(*f.LastApplied) {
			return applyDecision{Action: applyStart, Attempt: next}
		}
	}
	d := applyDecision{ReadRefresh: f.Applied == f.Hash}
	switch {
	case latest == nil && (f.Applied != f.Hash || (f.LastApplied != nil && f.LastApplied.Before(f.StateChanged))):
		d.Action = applyStart
	case latest == nil:
		// Applied, and its Jobs are gone from history (or the status came
		// back with a restore).
		d.Action = applyUpToDate
	case !succeeded(latest):
		d.Action = applyFailed
	case f.Applied == f.Hash && f.LastApplied != nil && !runnerjob.FinishTime(latest).After(*f.LastApplied):
		// A re-apply of applied inputs is new only when it finished after
		// the applied time the status holds.
		d.Action = applyRecordUpToDate
	default:
		d.Action = applySucceeded
	}
	return d
}

func succeeded(job *runnerjob.Cached) bool {
	_, ok := runnerjob.Finished(job)
	return ok
}

// resultAction is what a sync does with the result of an apply Job that
// succeeded.
type resultAction int

const (
	// resultOutputs: the apply applied; its outputs are the kind's.
	resultOutputs resultAction = iota
	// resultModuleApproved: the module's code that waited is approved
	// since: plan with it.
	resultModuleApproved
	// resultPlanApproved: the plan that waited is approved since: plan
	// again, and apply only if the plan is still the approved one.
	resultPlanApproved
	// resultModuleWaits: the module's code waits for an approver.
	resultModuleWaits
	// resultPlanWaits: the plan waits for an approver.
	resultPlanWaits
	// resultPlanDenied: a plan policy denied the plan, and its rules are
	// today's: it waits for a new plan.
	resultPlanDenied
	// resultPolicyChanged: a plan policy denied the plan under rules that
	// changed since: plan again.
	resultPolicyChanged
)

// decideResult decides what res, the result of an apply Job that
// succeeded, asks for under gate (nil: the object is never gated) and
// the plan policy rules that select the object today (their
// planpolicy.Digest).
func decideResult(res *run.Result, gate *approval.Gate, rules string) resultAction {
	if res.Outcome == run.OutcomeBlocked && res.Plan != nil && res.Plan.Denied() {
		if res.Plan.Verdict.Rules != rules {
			return resultPolicyChanged
		}
		return resultPlanDenied
	}
	if res.Outcome == run.OutcomeBlocked && res.Reason == run.ReasonModuleAwaitingApproval && res.Module != nil {
		if gate == nil || gate.ModuleRunnable(res.Module.Digest) {
			return resultModuleApproved
		}
		return resultModuleWaits
	}
	if res.Outcome != run.OutcomeBlocked || res.Plan == nil {
		return resultOutputs
	}
	if gate != nil && gate.Needed(res.Plan) == "" {
		return resultPlanApproved
	}
	return resultPlanWaits
}

// lifecycleFacts is what the shared part of a sync decides on, in Cluster
// API's order: the owner, the finalizer, pause, deletion.
type lifecycleFacts struct {
	Deleting     bool
	OwnerMissing bool
	// Age is the object's, on the manager's clock; Reported: its status
	// has conditions already.
	Age      time.Duration
	Reported bool
	// HasFinalizer: the object carries the kind's finalizer.
	HasFinalizer bool
	Paused       bool
	// JobMayRun: a Job of the object may still change the state.
	JobMayRun bool
	// MoveBlocked: the object carries clusterctl's block-move annotation.
	MoveBlocked bool
	// RestoreAsked: the object carries captf.io/restore-state.
	RestoreAsked bool
}

// lifecycleDecision is what the shared part of a sync does; Go: the kind's
// own work (the apply) follows.
type lifecycleDecision struct {
	// QuietFor, when set, is how long a new object waits for its owner
	// before its status says so.
	QuietFor time.Duration
	// OwnerMissing: the object waits for its owner, and says so.
	OwnerMissing bool
	// AddFinalizer adds the finalizer, blocking clusterctl move in the
	// same write when BlockMove.
	AddFinalizer, BlockMove bool
	// UnblockMove lets clusterctl move again: no Job may run.
	UnblockMove bool
	Paused      bool
	// Destroy: the object is being deleted and holds its finalizer.
	Destroy bool
	// Go: the kind's own work follows.
	Go bool
	// Restore: the asked restore comes first (before the kind's work, or
	// the destroy: a state restored while deleting is what the destroy
	// needs when the state went missing).
	Restore bool
}

// ownerGrace is how long a new object waits for its owner before its
// status says so.
const ownerGrace = 10 * time.Second

// decideLifecycle decides the shared part of a sync.
func decideLifecycle(f lifecycleFacts) lifecycleDecision {
	var d lifecycleDecision
	if f.OwnerMissing && !f.Deleting {
		// Cluster API makes a machine, then its Machine, which takes it
		// as its own at once: a new machine's wait is not reported (a
		// status write each) unless it lasts.
		if f.Age < ownerGrace && !f.Reported {
			d.QuietFor = min(ownerGrace-f.Age, ownerGrace) // a clock behind the API server's: age < 0
			return d
		}
		d.OwnerMissing = true
		return d
	}
	if !f.Deleting && !f.HasFinalizer {
		// A first apply follows, unless paused: block clusterctl move in
		// the same write.
		d.AddFinalizer, d.BlockMove = true, !f.Paused
	} else if !f.JobMayRun && f.MoveBlocked {
		// clusterctl move, paused, waits for this: it runs even when
		// paused.
		d.UnblockMove = true
	}
	// Pause comes before deletion: clusterctl move pauses, then deletes
	// and strips finalizers; that must never destroy anything.
	switch {
	case f.Paused:
		d.Paused = true
	case !f.Deleting:
		d.Go = true
	case f.HasFinalizer:
		d.Destroy = true
	}
	d.Restore = f.RestoreAsked && (d.Go || d.Destroy)
	return d
}

// stateFacts is what the state check before every Job decides on.
type stateFacts struct {
	// Kind, Namespace and Name are the object's; Label its kind as the
	// state's labels write it; State the name of its state's head.
	Kind, Label, Namespace, Name, State string
	// Applied: the object's infrastructure may exist.
	Applied bool
	// Head is the metadata of the state's head Secret; nil: there is none.
	Head *StateSecretMeta
	// MissingReported: StateMissing is in the status and not False.
	MissingReported bool
}

// startFacts is what decides whether a Job may start: the checks every
// Job passes, in this order.
type startFacts struct {
	// Rescued is StateRescued when True: a rescued state waits for a
	// restore. LastRestore: the status's.
	Rescued     *metav1.Condition
	LastRestore *infrav1.StateRestore
	// PodRules: how the runner pod breaks the operator's rules, if it does.
	PodRules string
	// Account: why the runner's ServiceAccount may not run it, if not.
	Account *InputError
	State   stateFacts
}

// startStop is what keeps a Job from starting.
type startStop int

const (
	startGo startStop = iota
	// startRescueWaits: Ready says the rescue's message, no new event.
	startRescueWaits
	// startInputError: the user must fix an input (Reason, Message).
	startInputError
	// startStateRefused: the state is another object's, or abandoned:
	// a warning (Reason, Message), and nothing runs until a person acts.
	startStateRefused
	// startStateMissing: the object was applied and its state is gone.
	startStateMissing
)

// startDecision is what the checks before a Job found.
type startDecision struct {
	Stop            startStop
	Reason, Message string
	// RescueRestored, when set, is StateRescued's message once a restore
	// came after the rescue: the Job may start.
	RescueRestored string
	// ProtectState: the state's Secrets lack CAPTF's protection (written
	// by a release that let garbage collection take them, or restored by
	// a tool that reset their metadata); put it back first.
	ProtectState bool
	// StatePresent: StateMissing goes False.
	StatePresent bool
	// ExpectState: the runner must find a state (the object was applied).
	ExpectState bool
}

// decideStart makes the checks every Job passes before it is created: no
// rescued state waits, the runner pod keeps the operator's rules, its
// ServiceAccount may run it, the state is as the object expects.
func decideStart(f startFacts) startDecision {
	var d startDecision
	if c := f.Rescued; c != nil {
		if lr := f.LastRestore; lr != nil && lr.Time.After(c.LastTransitionTime.Time) {
			d.RescueRestored = fmt.Sprintf("Backup %s was restored after the state was rescued", lr.Backup)
		} else {
			return startDecision{Stop: startRescueWaits, Reason: ReasonStateRescued, Message: c.Message}
		}
	}
	if f.PodRules != "" {
		d.Stop, d.Reason = startInputError, ReasonRunnerPodNotAllowed
		d.Message = "The runner pod would break the operator's rules (with spec.defaults.jobs of the cluster merged in): " + f.PodRules
		return d
	}
	if f.Account != nil {
		d.Stop, d.Reason, d.Message = startInputError, f.Account.Reason, f.Account.Message
		return d
	}
	s := decideState(f.State)
	s.RescueRestored = d.RescueRestored
	return s
}

// decideState is the check of the state before every Job. A missing state
// of an applied object stops everything: an apply would create every
// resource a second time, a destroy would destroy nothing and drop the
// finalizer.
func decideState(f stateFacts) startDecision {
	if head := f.Head; head != nil {
		if head.NamesObject && (head.ObjectName != f.Name || head.Kind != f.Label) {
			return startDecision{Stop: startStateRefused, Reason: ReasonStateOwnedByOther, Message: fmt.Sprintf(
				"State Secret %s records %s %q as its owner: CAPTF neither reads nor writes it for this object. Rename this object, or delete or rename that Secret if it is not a state.",
				f.State, head.Kind, head.ObjectName)}
		}
		if head.Abandoned {
			return startDecision{Stop: startStateRefused, Reason: ReasonStateAbandoned, Message: fmt.Sprintf(
				"State Secret %s is the abandoned state of a former %s of this name: CAPTF does not take it up on its own, as it describes infrastructure left in place on purpose. "+
					"To manage that infrastructure with this object: kubectl label secrets -n %s -l %s=%s,%s=%s %s-. To start afresh instead, save and delete those Secrets.",
				f.State, f.Kind, f.Namespace, names.LabelKind, f.Label, names.LabelObjectName, names.LabelValue(f.Name), names.LabelAbandoned)}
		}
	}
	d := startDecision{ProtectState: f.Head != nil && (f.Head.Owned || !f.Head.Protected)}
	if f.Applied && (f.Head == nil || !f.Head.HasState) {
		d.Stop = startStateMissing
		return d
	}
	d.StatePresent, d.ExpectState = f.MissingReported, f.Applied
	return d
}
