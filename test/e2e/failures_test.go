package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// runningPod waits for the pod of a running apply Job and returns its name.
func (e *env) runningPod(op string, timeout time.Duration) (job, pod string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelOperation + "=" + op})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				job, pod = p.Labels["batch.kubernetes.io/job-name"], p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no running %s pod: %v", op, err)
	}
	return job, pod
}

// waitRunnerStarted waits until the runner holds the state lock: terraform runs.
func (e *env) waitLockHeld(lease string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(ctx, lease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		e.t.Fatalf("the state lock %s was never taken", lease)
	}
}

// waitStateClaimed waits until a run claimed the state Secret state: an
// apply does once its plan may apply, and then applies.
func (e *env) waitStateClaimed(state string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, state, metav1.GetOptions{})
		return err == nil && s.Annotations[statestore.AnnotationHolder] != "", nil
	})
	if err != nil {
		e.t.Fatalf("the state %s was never claimed", state)
	}
}

func (e *env) result(job string) *run.Result {
	e.t.Helper()
	sec, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), job+"-result", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("result of %s: %v", job, err)
	}
	var r run.Result
	if err := json.Unmarshal(sec.Data[run.KeyResult], &r); err != nil {
		e.t.Fatal(err)
	}
	return &r
}

// TestManagerKilledMidApply: a SIGKILLed manager, restarted, finds the Job
// it made and makes no second one.
func TestManagerKilledMidApply(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	e.create(e.localCloud("crash", e.newCluster("crash", false), map[string]any{"sleep_seconds": 6}))
	job, _ := e.runningPod("apply", time.Minute)
	m.Kill()
	e.startManager()
	tc := e.waitFor("crash", 2*time.Minute, "Ready", isReady)
	jobs := e.jobs("apply")
	if len(jobs) != 1 || jobs[0].Name != job {
		var n []string
		for _, j := range jobs {
			n = append(n, j.Name)
		}
		t.Fatalf("apply Jobs = %v, want only %s", n, job)
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instance files = %v, want 1", files)
	}
	if tc.Status.AppliedInputsHash != jobs[0].Labels[names.LabelInputsHash] {
		t.Errorf("applied hash %s, Job's %s", tc.Status.AppliedInputsHash, jobs[0].Labels[names.LabelInputsHash])
	}
}

// TestRunnerKilled: a SIGKILLed runner leaves its lock behind; the next run
// force-unlocks it (its pod has finished) and converges.
func TestRunnerKilled(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("oom", e.newCluster("oom", false), map[string]any{"sleep_seconds": 4}))
	job, pod := e.runningPod("apply", time.Minute)
	e.waitLockHeld("tfc-oom-lock")
	if err := executor.Signal(e.ns, pod, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitFor("oom", 2*time.Minute, "failed", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "ApplyFailed" && strings.Contains(c.Message, job)
	})
	e.waitFor("oom", 2*time.Minute, "Ready", isReady)
	lease, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(context.Background(), "tfc-oom-lock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Annotations["captf.io/force-unlocks"] != "1" {
		t.Errorf("lease annotations %v, want one force unlock", lease.Annotations)
	}
	if lease.Spec.HolderIdentity != nil {
		t.Errorf("lock still held by %s after the run", *lease.Spec.HolderIdentity)
	}
	var retry string
	for _, j := range e.jobs("apply") {
		if j.Name != job {
			retry = j.Name
		}
	}
	if r := e.result(retry); !r.ForceUnlocked {
		t.Errorf("the retry's result does not report the force unlock: %+v", r)
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instance files = %v, want 1", files)
	}
}

// TestRunnerTerminated: SIGTERM reaches terraform, which stops; the state
// is written and the lock released before the runner exits.
func TestRunnerTerminated(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("term", e.newCluster("term", false), map[string]any{"sleep_seconds": 3, "instances": 3})
	// One instance at a time: the SIGTERM surely lands mid-apply.
	tc.Spec.Jobs.Env = []corev1.EnvVar{{Name: "TF_CLI_ARGS_apply", Value: "-parallelism=1"}}
	e.create(tc)
	job, pod := e.runningPod("apply", time.Minute)
	e.waitLockHeld("tfc-term-lock")
	// Let the first instance be created, so there is state to save.
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(e.instanceFiles()) >= 1, nil
	})
	if err != nil {
		t.Fatal("no instance was created")
	}
	if err := executor.Signal(e.ns, pod, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := plane.Kube.BatchV1().Jobs(e.ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the terminated Job never failed")
	}
	// terraform stopped: the in-flight instance finishes, the last is never
	// started (one at a time, 3 s each).
	if n := len(e.instanceFiles()); n >= 3 {
		t.Errorf("%d instances when the terminated Job ended: terraform ran to the end after SIGTERM", n)
	}
	r := e.result(job)
	if !r.Interrupted || r.Outcome != run.OutcomeFailed {
		t.Errorf("result = %+v, want an interrupted failure", r)
	}
	lease, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(context.Background(), "tfc-term-lock", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity != nil {
		t.Errorf("lock after SIGTERM: %v %+v, want released", err, lease.Spec)
	}
	if lease.Annotations["captf.io/force-unlocks"] != "" {
		t.Errorf("the terminated run needed a force unlock")
	}
	state, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), "tfc-term-state", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no state written on SIGTERM: %v", err)
	}
	if state.Annotations["captf.io/uncompressed-bytes"] == "" {
		t.Errorf("state secret has no size: %v", state.Annotations)
	}
	// The retry converges from the saved state. An instance whose
	// provisioner the interrupt stopped is tainted: its replacement is a
	// destructive plan, which the cluster's gate holds for approval.
	got := e.waitFor("term", 2*time.Minute, "Ready or a replacement to approve", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDestructivePlanBlocked)
		return isReady(tc) && (c == nil || c.Status != metav1.ConditionTrue) || c != nil && c.Status == metav1.ConditionTrue
	})
	if c := condition(got, infrav1.ConditionDestructivePlanBlocked); c != nil && c.Status == metav1.ConditionTrue {
		e.annotate("term", infrav1.AnnotationApproveDestructivePlan, got.Status.LastPlan.Hash)
	}
	e.waitFor("term", 2*time.Minute, "Ready", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDestructivePlanBlocked)
		return isReady(tc) && (c == nil || c.Status != metav1.ConditionTrue)
	})
	if files := e.instanceFiles(); len(files) != 3 {
		t.Errorf("instance files = %v, want 3", files)
	}
}

// TestBadModuleSource: terraform's message reaches the condition, and the
// apply is retried after a backoff, not in a hot loop.
func TestBadModuleSource(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("broken", e.newCluster("broken", false), map[string]any{})
	tc.Spec.Module = infrav1.Module{Source: "git::https://127.0.0.1:1/nothing.git"}
	e.create(tc)
	got := e.waitFor("broken", 2*time.Minute, "failed", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "ApplyFailed"
	})
	msg := condition(got, infrav1.ConditionReady).Message
	if !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "workspace") {
		t.Errorf("Ready message %q does not carry terraform's error", msg)
	}
	// The second attempt comes after the first backoff (10s).
	var jobs []batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		jobs = e.jobs("apply")
		return len(jobs) >= 2, nil
	})
	if err != nil {
		t.Fatal("no retry")
	}
	first, second := jobs[0], jobs[1]
	if first.Labels[names.LabelAttempt] != "0" {
		first, second = second, first
	}
	gap := second.CreationTimestamp.Sub(failedAt(first))
	if gap < 9*time.Second {
		t.Errorf("retried %s after the failure, want a backoff of about 10s", gap)
	}
	e.never(5*time.Second, func() error {
		if n := len(e.jobs("apply")); n > 2 {
			return fmt.Errorf("%d attempts within 20s: a hot loop", n)
		}
		return nil
	})
}

func failedAt(j batchv1.Job) time.Time {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// TestTerraformGetsOneInterrupt (issue 31, item 5): where SIGTERM reaches
// the pod's whole process group (an init that signals groups, tini -g),
// terraform and the commands it runs got it too: terraform, twice (from
// the group and from the runner), printed "Two interrupts received.
// Exiting immediately." and lost what the apply had made, when the second
// came apart from the first; the provisioner's command was killed, its
// instance left tainted. In a process group of its own terraform gets the
// runner's one interrupt, lets what it is doing finish, and the state
// keeps every instance that exists.
func TestTerraformGetsOneInterrupt(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("group", e.newCluster("group", false), map[string]any{"sleep_seconds": 3, "instances": 3})
	tc.Spec.Jobs.Env = []corev1.EnvVar{{Name: "TF_CLI_ARGS_apply", Value: "-parallelism=1"}}
	e.create(tc)
	job, pod := e.runningPod("apply", time.Minute)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(e.instanceFiles()) >= 1, nil
	})
	if err != nil {
		t.Fatal("no instance was created")
	}
	if err := executor.SignalGroup(e.ns, pod, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		j, err := plane.Kube.BatchV1().Jobs(e.ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return j.Status.Failed > 0 || j.Status.Succeeded > 0, nil
	})
	if err != nil {
		t.Fatal("the Job never ended")
	}
	if logs, err := executor.Logs(e.ns, pod); err != nil {
		t.Error(err)
	} else if strings.Contains(logs, "Two interrupts received") {
		t.Errorf("terraform was interrupted twice:\n%s", tail(logs, 15))
	} else if strings.Contains(logs, "signal: terminated") {
		// The group's signal reached the provisioner's command too: the
		// instance it was making is left tainted, to be replaced.
		t.Errorf("the SIGTERM to the runner's group killed a command terraform runs:\n%s", tail(logs, 15))
	}
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: names.Object{Kind: "tfc", Name: "group"}}
	state, err := store.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	files := e.instanceFiles()
	for _, f := range files {
		if !strings.Contains(string(state), filepath.Join(e.instances, f)+`"`) {
			t.Errorf("instance %s exists, and the state does not hold it (%d instance files, state of %d bytes)", f, len(files), len(state))
		}
	}
}
