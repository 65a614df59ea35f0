package workspace

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// start creates the run-inputs Secret (unless data is nil: destroy with the
// durable inputs) and the Job of one attempt, in three steps: the checks a
// Job must pass, the Job, and its creation (with its slot and its inputs).
func (e *engine) start(ctx context.Context, r *Sync, op infrav1.Operation, hash string, attempt int, data map[string][]byte) error {
	var policy *planpolicy.Input
	if op == infrav1.OperationApply {
		var err error
		if policy, err = e.gatherPlanPolicy(ctx, r); err != nil {
			return err
		}
	}
	expectState, ok, err := e.mayStart(ctx, r, op, policy)
	if err != nil || !ok {
		return err
	}
	job, err := e.buildJob(r, op, hash, attempt, data, expectState, policy)
	if err != nil {
		return err
	}
	return e.createJob(ctx, r, op, job, data)
}

// mayStart makes the checks every Job passes before it is created
// (decideStart), and reports in the status a check that fails (ok false).
// expectState: the object was applied, its runner must find a state.
func (e *engine) mayStart(ctx context.Context, r *Sync, op infrav1.Operation, policy *planpolicy.Input) (expectState, ok bool, err error) {
	f, err := e.gatherStart(ctx, r, op, policy)
	d := decideStart(f)
	if err != nil {
		// What the checks before the failed read found stands: a
		// restore after a rescue ends it.
		_, _ = e.actOnStart(ctx, r, startDecision{RescueRestored: d.RescueRestored})
		return false, false, err
	}
	ok, err = e.actOnStart(ctx, r, d)
	return d.ExpectState, ok, err
}

// checkState makes the check of the state alone (decideState): a destroy's
// before it reads its inputs.
func (e *engine) checkState(ctx context.Context, r *Sync) (ok, expectState bool, err error) {
	f, err := e.gatherState(ctx, r)
	if err != nil {
		return false, false, err
	}
	d := decideState(f)
	ok, err = e.actOnStart(ctx, r, d)
	return ok, d.ExpectState, err
}

// actOnStart does what the checks before a Job decided, and says whether
// the Job may start.
func (e *engine) actOnStart(ctx context.Context, r *Sync, d startDecision) (bool, error) {
	if d.RescueRestored != "" {
		SetCondition(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionFalse, ReasonRestored, d.RescueRestored)
	}
	if d.ProtectState {
		if err := e.protectState(ctx, r.Obj, ""); err != nil {
			return false, err
		}
	}
	switch d.Stop {
	case startRescueWaits:
		e.SetReady(r, metav1.ConditionFalse, d.Reason, d.Message)
	case startInputError:
		e.InputError(r, &InputError{Reason: d.Reason, Message: d.Message})
	case startStateRefused:
		e.stopped(r, d.Reason, d.Message)
	case startStateMissing:
		return false, e.reportStateMissing(ctx, r)
	default:
		if d.StatePresent {
			SetCondition(r.Obj, infrav1.ConditionStateMissing, metav1.ConditionFalse, ReasonStatePresent, "")
		}
		return true, nil
	}
	return false, nil
}

// buildJob is the Job of one attempt of op, with the approvals and plan
// policy of an apply.
func (e *engine) buildJob(r *Sync, op infrav1.Operation, hash string, attempt int, data map[string][]byte, expectState bool, policy *planpolicy.Input) (*batchv1.Job, error) {
	ca, err := e.RunnerAPI.CA()
	if err != nil {
		return nil, err
	}
	spec := runnerjob.Spec{Owner: r.Obj, OwnerGVK: e.GVK, Operation: op, InputsHash: hash, InputsBytes: secretSize(data), Attempt: attempt,
		Image: e.RunnerImage, ProviderMirrorImage: e.ProviderMirrorImage, Policy: r.Policy, Backups: e.StateBackups, DurableOnly: data == nil,
		ExpectState: expectState, MaxStateBytes: e.MaxStateBytes, RunnerAPI: e.RunnerAPI.URL, RunnerAPICA: ca, RunnerPods: e.RunnerPods,
		WriteKey: run.NewWriteKey(), PlanPolicy: policy}
	if g := r.Gate; g != nil && op == infrav1.OperationApply {
		spec.Gate, spec.ApprovedPlan, spec.ApprovedDestructivePlan = g.Policy, g.ApprovedPlan, g.ApprovedDestructivePlan
	}
	if g := r.Gate; g != nil && (op == infrav1.OperationApply || op == infrav1.OperationDestroy) {
		spec.Protect = g.Protect
	}
	// Code applied before CAPTF recorded its digest is known only by the
	// inputs it ran with: a run of those inputs runs (and records it).
	if g := r.Gate; g != nil && !(g.Unrecorded() && (data == nil || hash == r.Obj.WorkspaceStatus().AppliedInputsHash)) {
		spec.ApprovedModules = g.RunnableModules()
		// A catalog version is code the platform team approved: its runs
		// need no approval of the object's (and run no other code).
		if d := catalogDigest(data); d != "" && spec.ApprovedModules != nil && !slices.Contains(spec.ApprovedModules, d) {
			spec.ApprovedModules = append(spec.ApprovedModules, d)
		}
	}
	return runnerjob.Build(spec), nil
}

// createJob takes a slot for job, blocks clusterctl move, writes the run's
// inputs and then creates job, expected before it is created so that a sync
// on a cache that has not seen it yet creates nothing twice.
func (e *engine) createJob(ctx context.Context, r *Sync, op infrav1.Operation, job *batchv1.Job, data map[string][]byte) error {
	created := false // the Job exists: its slot is taken until it finishes
	if e.Slots != nil {
		key := cache.MetaObjectToName(job)
		ok, why := e.Slots.Take(r.Key, key, e.GVK.Kind, op, e.Clock.Now())
		if !ok {
			e.waitForSlot(r, op, why)
			return nil
		}
		defer func() {
			if !created {
				e.Slots.Release(key)
			}
		}()
	}
	if err := e.blockMove(ctx, r); err != nil {
		return err
	}
	if data != nil {
		if err := e.createRunInputs(ctx, r, job, data); err != nil {
			if e.refusedByQuota(r, op, "inputs Secret", err) {
				return nil
			}
			return e.terminating(r, err)
		}
	}
	if err := e.Access.Ensure(ctx, job.Namespace); err != nil {
		return e.terminating(r, err)
	}
	e.Expectations.ExpectJob(r.Key, job.Name)
	err := e.JobControl.Create(ctx, job)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		e.Expectations.JobObserved(r.Key, job.Name)
		return e.terminating(r, err)
	}
	made := runnerjob.CachedFrom(job)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Ours: the name is deterministic. The informer will show it.
	case err != nil:
		e.Expectations.JobObserved(r.Key, job.Name)
		if e.refusedByQuota(r, op, "Job", err) {
			return nil
		}
		return fmt.Errorf("creating Job %s: %w", job.Name, err)
	default:
		klog.FromContext(ctx).V(2).Info("Created Job", "job", klog.KObj(job))
		e.deletePreviousRunSecrets(ctx, r, made)
	}
	created = true
	e.reportStarted(r, made)
	return nil
}

// waitForSlot retries the Job later: an apply or destroy says so in Ready;
// a drift check or refresh waits without a word (the object is as Ready as
// it was).
func (e *engine) waitForSlot(r *Sync, op infrav1.Operation, why string) {
	r.Requeue = runnerjob.SlotRetry
	if op == infrav1.OperationApply || op == infrav1.OperationDestroy {
		e.SetReady(r, metav1.ConditionFalse, runnerjob.ReasonWaitingForJobSlot, fmt.Sprintf("The %s Job waits for a slot: %s", op, why))
	}
}

// terminating turns the API server's refusal to create anything in a
// namespace being deleted into a condition; other errors pass through.
func (e *engine) terminating(r *Sync, err error) error {
	if !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return err
	}
	obj := r.Obj
	ns, kind := obj.GetNamespace(), strings.ToLower(e.GVK.Kind)
	msg := fmt.Sprintf("Namespace %s is being deleted and Kubernetes creates no Job in it, so CAPTF cannot run terraform for this object. "+
		"Its state and backups stay (finalizer %s), and so does the namespace, until you decide: "+
		"to keep the infrastructure, save the state (kubectl get secrets -n %s -l %s=%s,%s=%s -o yaml > %s-state.yaml), then kubectl annotate %s -n %s %s %s=true; "+
		"to destroy it, see \"NamespaceTerminating\" in CAPTF's troubleshooting guide.",
		ns, names.StateFinalizer, ns, names.LabelKind, r.Names.Kind, names.LabelObjectName, names.LabelValue(obj.GetName()), obj.GetName(),
		kind, ns, obj.GetName(), infrav1.AnnotationAbandonInfrastructure)
	e.stopped(r, ReasonNamespaceTerminating, msg)
	r.Requeue = time.Minute
	return nil
}

// secretSize is the size of a Secret's data.
func secretSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

func (e *engine) createRunInputs(ctx context.Context, r *Sync, job *batchv1.Job, data map[string][]byte) error {
	obj := r.Obj
	labels := names.ObjectLabels(e.GVK.Kind, obj.GetName(), obj.GetUID())
	labels[names.LabelSecretType] = names.SecretTypeRunInputs
	labels[names.LabelOperation] = job.Labels[names.LabelOperation]
	// No owner: clusterctl move copies what the objects it moves own, and
	// would fail when the runner deletes these during the move. The runner
	// deletes them when it is done, the next Job of the operation does
	// otherwise, and releasing or abandoning the state does last.
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: r.Names.RunInputs(job.Name), Namespace: obj.GetNamespace(), Labels: labels},
		Data:       data,
	}
	created, err := e.Kube.CoreV1().Secrets(obj.GetNamespace()).Create(ctx, sec, metav1.CreateOptions{FieldManager: e.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil // same name, same hash: the same inputs
	}
	if err == nil {
		e.RunInputs.Created(created)
	}
	return err
}

// blockMove sets clusterctl's block-move annotation before a Job is
// created (Reconcile removes it once no Job of the object may still run): a
// move copies the state Secrets, and must not copy a state a Job is still
// changing.
func (e *engine) blockMove(ctx context.Context, r *Sync) error {
	if !addBlockMove(r.Obj) {
		return nil
	}
	return r.Update(ctx)
}

// addBlockMove puts clusterctl's block-move annotation on obj, and tells
// whether it was missing.
func addBlockMove(obj Object) bool {
	if _, ok := obj.GetAnnotations()[capi.BlockMoveAnnotation]; ok {
		return false
	}
	annotations := maps.Clone(obj.GetAnnotations())
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[capi.BlockMoveAnnotation] = "captf: a Job may change the state"
	obj.SetAnnotations(annotations)
	return true
}

// RunnerAPI is where runner pods reach their object's state, lock and
// result: the manager's runner API (package runnerapi).
type RunnerAPI struct {
	URL string
	// CAFile holds the CA bundle runners trust the API's certificate by
	// (cert-manager's ca.crt); empty: the system's roots.
	CAFile string
}

// CA reads the CA bundle now: a renewed one reaches the next Job.
func (a RunnerAPI) CA() (string, error) {
	if a.CAFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(a.CAFile)
	if err != nil {
		return "", fmt.Errorf("the runner API's CA bundle, which runner pods need: %w", err)
	}
	return string(b), nil
}

// deletePreviousRunSecrets deletes the run Secrets of the Job that ran op
// before job: once a newer Job of the operation runs, nothing reads them
// again. (The runner deletes its inputs itself when it is done; these are
// what a killed runner left.) Each object so keeps at most the result of the
// latest Job of each operation, not two Secrets per Job of its history.
func (e *engine) deletePreviousRunSecrets(ctx context.Context, r *Sync, job *runnerjob.Cached) {
	for _, prev := range r.Jobs { // newest first
		if prev.Name == job.Name || prev.Operation != job.Operation {
			continue
		}
		e.deleteRunSecrets(ctx, r, prev)
		return
	}
}

// deleteRunSecrets deletes the run inputs and the result of job.
func (e *engine) deleteRunSecrets(ctx context.Context, r *Sync, job *runnerjob.Cached) {
	n := r.Names
	e.RunInputs.Forget(job.Namespace, n.RunInputs(job.Name))
	for _, name := range []string{n.RunInputs(job.Name), n.Result(job.Name)} {
		if err := e.Kube.CoreV1().Secrets(job.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Deleting a run Secret of an earlier Job", "secret", klog.KRef(job.Namespace, name))
		}
	}
}
