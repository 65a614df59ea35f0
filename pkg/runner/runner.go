// Package runner is `captf runner`: inside a Job it prepares the workspace,
// holds the object's state lock, serves Terraform's http backend over the
// state Secrets, runs terraform and reports the result to the manager.
package runner

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/cgroup"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/retry"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// Config is what a runner is told by its Job (run.Spec) and its pod.
type Config struct {
	run.Spec
	// Pod and PodUID identify the lock holder.
	Pod    string
	PodUID types.UID
}

// Runner runs one operation.
type Runner struct {
	Config Config
	Client kubernetes.Interface
	// Log receives terraform's output.
	Log io.Writer

	obj    names.Object
	redact *Redactor // nil until the inputs are read
	env    []string  // terraform's environment, before the backend's
	module run.Module
	// registryToken is the catalog entry's registry token while the
	// module is fetched.
	registryToken string
	// ociCreds are the catalog entry's OCI registry users and passwords,
	// by host, while the module is fetched.
	ociCreds map[string]ociCredential
	// heldEnv is the environment held back while credentials are used.
	heldEnv []string
	mu      sync.Mutex
	child   *exec.Cmd
	// interrupted is the child already sent its one SIGTERM.
	interrupted *exec.Cmd
	signal      bool
	lockLost    error
	// readFile reads the container's cgroup files (nil: os.ReadFile).
	readFile cgroup.ReadFile
	// Clock times the terraform commands (nil: the real clock).
	Clock clock.PassiveClock
	// terraformTime is how long the terraform commands took, in all: the
	// rest of a run is the runner's own.
	terraformTime time.Duration
	terraformRuns int
	// terraformCPU is the CPU time (user and system) of the terraform
	// commands and their children, the providers.
	terraformCPU time.Duration
	// What the run record keeps: the plan's text (redacted), its JSON
	// (raw: redacted when the record is made), the log's tail.
	planText string
	planJSON []byte
	planSum  [sha256.Size]byte // of the plan file terraform wrote
	tail     *tailBuffer
}

// TerraformTime is how long the run's terraform commands took in all, and
// how many there were.
func (r *Runner) TerraformTime() (time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.terraformTime, r.terraformRuns
}

// TerraformCPU is the CPU time the run's terraform commands used in all.
func (r *Runner) TerraformCPU() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.terraformCPU
}

func (r *Runner) clock() clock.PassiveClock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// errOutOfMemory: the kernel killed a process of the runner's container
// (terraform, a provider, a provisioner's command) at the pod's memory
// limit.
var errOutOfMemory = errors.New("out of memory")

// errModuleNotApproved: the module's code is not code an approver accepted.
var errModuleNotApproved = errors.New("the module's code waits for approval")

// errProtected: the plan changes what spec.protect covers.
var errProtected = errors.New("protected resources")

// outOfMemory explains a failed terraform command when the kernel killed a
// process of the container for want of memory: a limit too low for the
// module is the user's to raise, and "signal: killed" or a provider's lost
// connection do not say so.
func (r *Runner) outOfMemory(command string) error {
	read := r.readFile
	if read == nil {
		read = os.ReadFile
	}
	if cgroup.OOMKills(read) == 0 {
		return nil
	}
	limit := "its limit"
	if n, ok := cgroup.MemoryLimit(read); ok {
		limit = resource.NewQuantity(n, resource.BinarySI).String()
	}
	return fmt.Errorf("%w: the kernel killed a process of terraform %s (terraform, a provider or a provisioner's command) at the runner pod's memory limit (%s): raise spec.jobs.resources.limits.memory (or the cluster's spec.defaults.jobs)", errOutOfMemory, command, limit)
}

// Run performs the operation and always tries to write a result. It returns
// the result; err is set when the run failed.
func (r *Runner) Run(ctx context.Context) (*run.Result, error) {
	r.obj = names.ObjectOf(r.Config.ObjectKind, r.Config.ObjectName)
	started := metav1.Now()
	r.tail = &tailBuffer{max: run.MaxLogTail}
	if r.Log != nil {
		r.Log = io.MultiWriter(r.Log, r.tail)
	} else {
		r.Log = r.tail
	}
	res := &run.Result{Operation: r.Config.Operation, Outcome: run.OutcomeFailed, Started: &started}

	// SIGTERM goes to terraform, which stops gracefully and writes its state
	// through the backend; the runner keeps serving until terraform exits.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	go func() {
		for range sigs {
			r.mu.Lock()
			r.signal = true
			r.interruptLocked()
			r.mu.Unlock()
		}
	}()

	var err error
	if r.Config.Operation == infrav1.OperationResolve {
		err = r.resolve(ctx, res)
	} else {
		err = r.run(ctx, res)
	}
	r.mu.Lock()
	if r.lockLost != nil {
		err = errors.Join(r.lockLost, err)
		res.Stage = run.StageLock
	}
	r.mu.Unlock()
	if err != nil || res.Reason == "" {
		res.Reason = failureReason(err)
	}
	if err != nil {
		// terraform's messages may quote a sensitive value: the error goes
		// to the pod's log and, excerpted, to conditions and events.
		err = errors.New(r.redact.String(err.Error()))
	}
	switch {
	case err != nil:
		res.Error = excerpt(err.Error())
	case res.Outcome != run.OutcomeBlocked:
		res.Outcome = run.OutcomeSucceeded
	}
	r.mu.Lock()
	res.Interrupted = r.signal
	r.mu.Unlock()
	// Before the result: the manager reports what the result says, and a
	// user who reads that finds the record. A resolve has the catalog's
	// status for a record.
	if r.Config.Operation != infrav1.OperationResolve {
		r.writeRecord(context.WithoutCancel(ctx), res, metav1.NewTime(r.clock().Now()))
	}
	if werr := r.writeResult(context.WithoutCancel(ctx), res); werr != nil {
		return res, errors.Join(err, fmt.Errorf("writing the result: %w", werr))
	}
	r.deleteRunInputs(context.WithoutCancel(ctx))
	return res, err
}

// deleteRunInputs deletes this run's inputs once its result is written: they
// hold the run's credentials, and the Job runs no second pod. Failing to
// delete them costs nothing but time: the manager deletes them with the
// Job's history.
func (r *Runner) deleteRunInputs(ctx context.Context) {
	if r.Config.UseDurableInputs {
		return
	}
	name := r.obj.RunInputs(r.Config.Job)
	err := retry.Transiently(ctx, func() error {
		return r.Client.CoreV1().Secrets(r.Config.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Deleting the run's inputs", "secret", klog.KRef(r.Config.Namespace, name))
	}
}

func (r *Runner) run(ctx context.Context, res *run.Result) error {
	labels := names.ObjectLabels(r.Config.ObjectKind, r.Config.ObjectName, r.Config.ObjectUID)
	res.Stage = run.StageWorkspace
	inputs, tf, err := r.workspace(ctx)
	if err != nil {
		return err
	}
	res.Stage = run.StageLock
	unlock, err := r.lock(ctx, labels, res)
	if err != nil {
		return err
	}
	defer unlock()
	res.Stage = run.StageState
	store, env, closeState, err := r.openState(ctx, labels, res)
	if err != nil {
		return err
	}
	defer closeState()
	res.Stage = run.StageInit
	if _, err := r.exec(ctx, tf, r.Config.WorkDir, env, "init", "-input=false", "-no-color"); err != nil {
		return err
	}
	// Fetching is done: no code of the module may read what fetched it.
	held, err := r.dropCredentials()
	if err != nil {
		return err
	}
	env = append(withoutCredentials(env), held...)
	// Before terraform plans, no code of the module has run: stop here
	// when it is not code an approver accepted for the object.
	res.Stage = run.StageModule
	if err := dropGitMetadata(r.Config.WorkDir); err != nil {
		return fmt.Errorf("removing the modules' git metadata: %w", err)
	}
	if res.Module, err = moduleCode(r.Config.WorkDir); err != nil {
		return fmt.Errorf("hashing the module's code: %w", err)
	}
	if want := r.module.Digest; want != "" && res.Module.Digest != want {
		return fmt.Errorf("%w: its digest is %s, the catalog's %s (its source changed since the catalog resolved it); none of it ran",
			errCatalogDigest, res.Module.Digest, want)
	}
	if mods := r.Config.ApprovedModules; len(mods) > 0 && !slices.Contains(mods, res.Module.Digest) {
		if r.Config.Operation != infrav1.OperationApply {
			// A failure: a destroy that stopped here destroyed nothing.
			return fmt.Errorf("%w: digest %s is not code an approver accepted for the object, and none of it ran (%s names the digest that may run)",
				errModuleNotApproved, res.Module.Digest, infrav1.AnnotationApproveModule)
		}
		klog.FromContext(ctx).Info("The module's code waits for approval", "digest", res.Module.Digest, "approved", mods)
		res.Outcome, res.Reason = run.OutcomeBlocked, run.ReasonModuleAwaitingApproval
		return nil
	}
	res.Stage = run.StagePlan
	if res.Plan, err = r.plan(ctx, tf, env, res.Module.Digest); err != nil {
		return err
	}
	if r.Config.Operation == infrav1.OperationDrift {
		return nil
	}
	gate := approval.Gate{Policy: r.Config.Gate, ApprovedPlan: r.Config.ApprovedPlan, ApprovedDestructivePlan: r.Config.ApprovedDestructivePlan, Protect: r.Config.Protect}
	if protected := gate.Protected(res.Plan); len(protected) > 0 {
		// A failure, not a wait: a destroy Job that succeeded would let
		// the object go, and no annotation can free it.
		res.Stage = run.StageGate
		return fmt.Errorf("%w: plan %s destroys, replaces or forgets %s, which spec.protect covers: no approval applies it; remove the pattern from spec.protect to let it",
			errProtected, res.Plan.Hash, strings.Join(protected, ", "))
	}
	if r.Config.Operation == infrav1.OperationApply {
		if res.Plan.Verdict = r.judge(ctx, res.Plan); res.Plan.Denied() {
			klog.FromContext(ctx).Info("A plan policy denies the plan", "hash", res.Plan.Hash, "verdict", res.Plan.Verdict.String())
			res.Outcome, res.Stage, res.Reason = run.OutcomeBlocked, run.StageGate, run.ReasonPlanDenied
			return nil
		}
		if needed := gate.Needed(res.Plan); needed != "" {
			klog.FromContext(ctx).Info("The plan waits for approval", "hash", res.Plan.Hash, "annotation", needed)
			res.Outcome, res.Stage = run.OutcomeBlocked, run.StageGate
			return nil
		}
	}
	// The plan applied is the one judged: a program of the module's code
	// may have outlived terraform and rewritten the file since.
	if sum, err := fileSum(filepath.Join(r.Config.WorkDir, planFile)); err != nil {
		res.Stage = run.StageGate
		return fmt.Errorf("%w: %v: nothing was applied", errPlanChanged, err)
	} else if sum != r.planSum {
		res.Stage = run.StageGate
		return fmt.Errorf("%w: nothing was applied", errPlanChanged)
	}
	if r.plansFirst() {
		res.Stage = run.StageState
		if err := retry.Transiently(ctx, func() error { return store.ClaimPlanned(ctx, string(r.Config.PodUID)) }); err != nil {
			return err
		}
	}
	res.Stage = string(r.Config.Operation)
	if _, err := r.exec(ctx, tf, r.Config.WorkDir, env, "apply", "-input=false", "-no-color", "-lock=false", "-auto-approve", planFile); err != nil {
		return errors.Join(err, r.rescue(ctx, store, r.Config.WorkDir, res))
	}
	if err := store.MarkApplied(ctx); err != nil {
		return fmt.Errorf("marking the state applied: %w", err)
	}
	res.Stage = run.StageOutputs
	if res.Outputs, err = r.outputs(ctx, tf, env, store); err != nil {
		return err
	}
	if r.Config.Operation == infrav1.OperationApply {
		// Destroy must work with these inputs after the spec, or a Secret it
		// read from, has changed.
		res.Stage = run.StageDurableInputs
		if err := r.saveDurableInputs(ctx, inputs, labels); err != nil {
			return err
		}
	}
	res.Stage = ""
	return nil
}

// judge is what the plan policy rules of the Job say of plan, nil when
// none select the object. A kind that takes no approvals (machines,
// pools) cannot wait for one: a plan a rule would have wait is denied.
func (r *Runner) judge(ctx context.Context, plan *run.Plan) *planpolicy.Verdict {
	in := r.Config.PlanPolicy
	if in == nil || len(in.Rules) == 0 {
		return nil
	}
	failed := func(rule planpolicy.Rule, err error) {
		// The error may quote the plan's values: redacted, and only here.
		klog.FromContext(ctx).Info("A plan policy rule could not be evaluated", "policy", rule.Policy, "rule", rule.Name, "err", r.redact.String(err.Error()))
	}
	v := planpolicy.Judge(ctx, in.Rules, r.planJSON, planpolicy.Summary{PlanSummary: plan.Summary, Protected: plan.Protected}, in.Object, failed)
	if v.Action == infrav1.PlanActionRequireApproval && r.Config.Gate == "" {
		v.Action = infrav1.PlanActionDeny
		v.Message += fmt.Sprintf(" (the rule requires an approval, and a %s takes none)", r.Config.ObjectKind)
	}
	return v
}

// workspace reads the run's inputs, finds terraform and prepares the
// working directory. It returns the inputs Secret's data.
func (r *Runner) workspace(ctx context.Context) (map[string][]byte, string, error) {
	inputsName := r.obj.RunInputs(r.Config.Job)
	if r.Config.UseDurableInputs {
		inputsName = r.obj.DurableInputs()
	}
	inputs, err := r.readInputs(ctx, inputsName)
	if err != nil {
		return nil, "", fmt.Errorf("reading inputs secret %s: %w", inputsName, err)
	}
	env := SensitiveEnv(os.Environ(), r.Config.SensitiveEnv, r.Config.PlainEnv)
	if r.redact, err = NewRedactor(inputs.Data[run.KeyVariables], inputs.Data[run.KeySensitive], env...); err != nil {
		return nil, "", fmt.Errorf("inputs secret %s: %s: %w", inputsName, run.KeySensitive, err)
	}
	var module run.Module
	if err := json.Unmarshal(inputs.Data[run.KeyModule], &module); err != nil {
		return nil, "", fmt.Errorf("inputs secret %s: %s: %w", inputsName, run.KeyModule, err)
	}
	r.module = module
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		if why := run.ForbiddenEnv(name, value, r.Config.WorkDir); why != "" {
			return nil, "", fmt.Errorf("the runner's environment sets %s (spec.jobs.env or envFrom, or the image): %s", name, why)
		}
	}
	tf, err := r.terraform()
	if err != nil {
		return nil, "", err
	}
	if r.env, err = r.providerInstallation(ctx); err != nil {
		return nil, "", err
	}
	secrets, err := r.withCredentials(ctx, module.Credentials, "")
	if err != nil {
		return nil, "", err
	}
	if len(secrets) > 0 {
		// Never in the log: git and terraform may quote what they got.
		if r.redact, err = NewRedactor(inputs.Data[run.KeyVariables], inputs.Data[run.KeySensitive], append(env, secrets...)...); err != nil {
			return nil, "", err
		}
	}
	if reg := module.Registry; reg != nil {
		// A catalog version of a registry: where its code is now (the
		// digest checks it is the code the catalog resolved).
		if module.Source, err = registrySource(ctx, fetchClient(), reg, r.registryToken); err != nil {
			return nil, "", err
		}
	}
	if err := r.prepare(ctx, tf, r.Config.WorkDir, module, inputs.Data[run.KeyVariables]); err != nil {
		return nil, "", err
	}
	return inputs.Data, tf, nil
}

// readInputs reads the inputs Secret name: the run's first request to the
// runner API. A manager restarting, or its budget of new tokens spent, is
// waited out as for every later request; failing here would cost a new
// attempt many seconds later.
func (r *Runner) readInputs(ctx context.Context, name string) (*corev1.Secret, error) {
	var inputs *corev1.Secret
	err := retry.Transiently(ctx, func() (err error) {
		inputs, err = r.Client.CoreV1().Secrets(r.Config.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return inputs, err
}

// lock takes the object's state lock and keeps it renewed; losing it stops
// terraform. The returned func releases it.
func (r *Runner) lock(ctx context.Context, labels map[string]string, res *run.Result) (func(), error) {
	logger := klog.FromContext(ctx)
	lock := &statestore.Lock{Client: r.Client, Namespace: r.Config.Namespace, Name: r.obj.Lock(), Holder: r.Config.Pod, HolderUID: r.Config.PodUID,
		Labels: labels, New: !r.Config.ExpectState}
	err := lock.Acquire(ctx, r.Config.LockTimeout)
	res.LockWaits, res.ForceUnlocked = lock.Waits, lock.ForceUnlocked
	if err != nil {
		return nil, err
	}
	renewCtx, stopRenew := context.WithCancel(ctx)
	go lock.KeepRenewed(renewCtx, func(err error) {
		// Another run may hold the lock now: stop terraform. The state
		// is fenced as well: no write of this run reaches it.
		logger.Error(err, "Stopping terraform")
		r.mu.Lock()
		r.lockLost = err
		r.interruptLocked()
		r.mu.Unlock()
	})
	return func() {
		stopRenew()
		if err := lock.Release(context.WithoutCancel(ctx)); err != nil {
			logger.Error(err, "Releasing the state lock")
		}
	}, nil
}

// openState claims the state (a drift check only reads it) and serves it to
// terraform's http backend. It returns terraform's environment, and a func
// that stops the backend and reports what it wrote.
func (r *Runner) openState(ctx context.Context, labels map[string]string, res *run.Result) (*statestore.StateStore, []string, func(), error) {
	store := &statestore.StateStore{Client: r.Client, Namespace: r.Config.Namespace, Object: r.obj, Labels: labels, Backups: r.Config.StateBackups,
		MaxBytes: r.Config.MaxStateBytes, New: !r.Config.ExpectState}
	claim := store.Claim
	if r.plansFirst() {
		// A plan only, or one that may wait for an approver: no write,
		// not even a claim (ClaimPlanned claims once it may apply).
		claim = store.CheckReadOnly
	}
	// A claim re-reads the state each time, so one whose answer was lost
	// can run again: it finds its own stamp.
	if err := retry.Transiently(ctx, func() error { return claim(ctx, string(r.Config.PodUID), r.Config.ExpectState) }); err != nil {
		return nil, nil, nil, err
	}
	backend := &Backend{Store: store}
	if err := backend.Start(ctx); err != nil {
		return nil, nil, nil, err
	}
	env := append(slices.Clone(r.env), backend.Env()...)
	env = append(env, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1")
	return store, env, func() {
		backend.Stop()
		res.StateBytes, res.BackupsMade = backend.LastStateBytes, store.BackupsMade
	}, nil
}

// errPlanChanged: the plan file is not the one terraform wrote and the
// gate judged.
var errPlanChanged = errors.New("the plan file changed after terraform wrote it")

// fileSum is the sha256 of a file.
func fileSum(path string) ([sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// plansFirst tells whether the run opens the state read-only: a drift check
// never writes it, and an apply writes it only once its plan may apply.
func (r *Runner) plansFirst() bool {
	return r.Config.Operation == infrav1.OperationDrift || r.Config.Operation == infrav1.OperationApply
}

// plan plans the operation into captf.tfplan and summarizes it.
func (r *Runner) plan(ctx context.Context, tf string, env []string, module string) (*run.Plan, error) {
	dir := r.Config.WorkDir
	planArgs := []string{"plan", "-input=false", "-no-color", "-lock=false", "-out=" + planFile}
	switch r.Config.Operation {
	case infrav1.OperationDestroy:
		planArgs = append(planArgs, "-destroy")
	case infrav1.OperationRefresh:
		planArgs = append(planArgs, "-refresh-only")
	}
	text, err := r.exec(ctx, tf, dir, env, planArgs...)
	if err != nil {
		return nil, err
	}
	r.planText = r.redact.String(string(text))
	if r.planSum, err = fileSum(filepath.Join(dir, planFile)); err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	shown, err := r.exec(ctx, tf, dir, env, "show", "-json", planFile)
	if err != nil {
		return nil, err
	}
	r.planJSON = shown
	var tfplan tfjson.Plan
	if err := json.Unmarshal(shown, &tfplan); err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	plan, err := run.SummarizePlan(&tfplan, r.Config.Protect, module)
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Planned", "hash", plan.Hash, "add", plan.Summary.Add, "change", plan.Summary.Change,
		"destroy", plan.Summary.Destroy, "replace", plan.Summary.Replace, "forget", plan.Summary.Forget, "import", plan.Summary.Import)
	return plan, nil
}

// outputs reads the module's outputs after an apply from the state the run
// holds, as terraform output would: no terraform process, no request. Only
// a state CAPTF cannot read (OpenTofu's state encryption) is left to
// terraform output.
func (r *Runner) outputs(ctx context.Context, tf string, env []string, store *statestore.StateStore) (map[string]run.Output, error) {
	state, err := store.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading outputs from the state: %w", err)
	}
	var plain struct {
		Version int                            `json:"version"`
		Outputs map[string]*tfjson.StateOutput `json:"outputs"`
	}
	if state != nil {
		if err := json.Unmarshal(state, &plain); err != nil || plain.Version != 4 {
			return r.outputsOfTerraform(ctx, tf, env)
		}
	}
	return r.publishable(plain.Outputs)
}

// outputsOfTerraform asks terraform output for the outputs.
func (r *Runner) outputsOfTerraform(ctx context.Context, tf string, env []string) (map[string]run.Output, error) {
	out, err := r.exec(ctx, tf, r.Config.WorkDir, env, "output", "-json", "-no-color")
	if err != nil {
		return nil, err
	}
	var outputs map[string]*tfjson.StateOutput
	if err := json.Unmarshal(out, &outputs); err != nil {
		return nil, fmt.Errorf("reading outputs: %w", err)
	}
	return r.publishable(outputs)
}

// publishable marks an output sensitive when the module does, or when it
// shows a sensitive input.
func (r *Runner) publishable(outputs map[string]*tfjson.StateOutput) (map[string]run.Output, error) {
	result := map[string]run.Output{}
	for k, o := range outputs {
		v, err := json.Marshal(o.Value)
		if err != nil {
			return nil, err
		}
		// An output that shows a sensitive input is sensitive, whatever
		// the module says.
		result[k] = run.Output{Sensitive: o.Sensitive || r.redact.Contains(string(v)), Value: v}
	}
	return result, nil
}

// rescue keeps the state terraform could not save (errored.tfstate): a
// backup of its own, named in the result, restorable like any backup.
func (r *Runner) rescue(ctx context.Context, store *statestore.StateStore, dir string, res *run.Result) error {
	state, err := os.ReadFile(filepath.Join(dir, "errored.tfstate"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading errored.tfstate: %w", err)
	}
	// Not cancelled by the SIGTERM that stopped terraform.
	ctx = context.WithoutCancel(ctx)
	var name string
	err = retry.Transiently(ctx, func() (err error) {
		name, err = store.SaveRescue(ctx, state)
		return err
	})
	if err != nil {
		return fmt.Errorf("terraform could not save its state, and neither could CAPTF (errored.tfstate, %d bytes, is lost with the pod): %w", len(state), err)
	}
	klog.FromContext(ctx).Info("Terraform could not save its state: rescued it", "secret", name)
	res.RescuedState = name
	return nil
}

// saveDurableInputs keeps the inputs destroy runs with; like the state, they
// outlive the object until its infrastructure is destroyed.
func (r *Runner) saveDurableInputs(ctx context.Context, data map[string][]byte, labels map[string]string) error {
	return retry.Transiently(ctx, func() error { return r.saveDurableInputsOnce(ctx, data, labels) })
}

func (r *Runner) saveDurableInputsOnce(ctx context.Context, data map[string][]byte, labels map[string]string) error {
	secrets := r.Client.CoreV1().Secrets(r.Config.Namespace)
	sec := statestore.NewStateSecret(r.Config.Namespace, r.obj.DurableInputs(), r.obj, names.SecretTypeDurableInput, labels)
	sec.Data = map[string][]byte{run.KeyModule: data[run.KeyModule], run.KeyVariables: data[run.KeyVariables]}
	if s, ok := data[run.KeySensitive]; ok {
		sec.Data[run.KeySensitive] = s
	}
	_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	current, err := secrets.Get(ctx, sec.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	current.Data, current.Labels, current.OwnerReferences = sec.Data, sec.Labels, nil
	current.Annotations = sec.Annotations
	if !slices.Contains(current.Finalizers, names.StateFinalizer) {
		current.Finalizers = append(current.Finalizers, names.StateFinalizer)
	}
	_, err = secrets.Update(ctx, current, metav1.UpdateOptions{})
	return err
}

func (r *Runner) writeResult(ctx context.Context, res *run.Result) error {
	data, err := run.ResultData(res)
	if err != nil {
		return err
	}
	return retry.Transiently(ctx, func() error { return r.writeResultOnce(ctx, data) })
}

func (r *Runner) writeResultOnce(ctx context.Context, data map[string][]byte) error {
	labels := withType(names.ObjectLabels(r.Config.ObjectKind, r.Config.ObjectName, r.Config.ObjectUID), names.SecretTypeResult)
	owner := metav1.OwnerReference{APIVersion: r.Config.ObjectAPIVersion, Kind: r.Config.ObjectKind, Name: r.Config.ObjectName, UID: r.Config.ObjectUID}
	secrets := r.Client.CoreV1().Secrets(r.Config.Namespace)
	name := r.obj.Result(r.Config.Job)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Config.Namespace, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
		Data:       data,
	}
	_, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		current, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		current.Data = data
		_, err = secrets.Update(ctx, current, metav1.UpdateOptions{})
	}
	return err
}

// failureReasons name the state failures a person must act on; the
// manager takes them as Ready's reason.
var failureReasons = []struct {
	err    error
	reason string
}{{statestore.ErrStateMissing, "StateMissing"}, {statestore.ErrOtherOwner, "StateOwnedByOther"}, {statestore.ErrStateTooLarge, "StateTooLarge"}, {statestore.ErrLockLost, "LockLost"}, {statestore.ErrFenced, "LockLost"}, {statestore.ErrChangedSincePlan, "StateChangedSincePlan"}, {errOutOfMemory, "RunnerOutOfMemory"}, {errProtected, run.ReasonProtectedResourceChange}, {errModuleNotApproved, run.ReasonModuleAwaitingApproval}, {errCatalogDigest, run.ReasonCatalogDigestMismatch}}

// ReasonCloudQuotaExceeded: the cloud refused to make a resource for
// want of quota (terraform's error says so, in the words of the clouds'
// APIs): the cloud account's quota is to raise, not the module to fix.
const ReasonCloudQuotaExceeded = "CloudQuotaExceeded"

// cloudQuota matches the quota errors of the clouds' APIs: QuotaExceeded
// (Azure, GCP's QUOTA_EXCEEDED, the local cloud), GCP's "Quota 'CPUS'
// exceeded", AWS's limits of what an account holds (InstanceLimitExceeded,
// VcpuLimitExceeded, ...), not its request rates (RequestLimitExceeded,
// rateLimitExceeded: throttling, which a provider waits out).
var cloudQuota = regexp.MustCompile(`(?i)\bquota[ _-]?exceeded\b|\bquota '[^']+' exceeded|\b(instance|vcpu|address|volume|snapshot|core|network|vpc|subnet|gateway|ip)s?limitexceeded\b|exceeded[a-z ]{0,20} quota`)

func failureReason(err error) string {
	for _, r := range failureReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	// Only terraform's own words: a ResourceQuota of the namespace that
	// refuses the runner's Secrets says "exceeded quota" too.
	if te := (*terraformError)(nil); errors.As(err, &te) && cloudQuota.MatchString(te.message) {
		return ReasonCloudQuotaExceeded
	}
	return ""
}

func withType(labels map[string]string, t string) map[string]string {
	out := map[string]string{names.LabelSecretType: t}
	for k, v := range labels {
		out[k] = v
	}
	return out
}
