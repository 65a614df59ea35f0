package terraformcluster

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runner"
)

// finishJob plays the Job controller and the runner: the newest Job this
// fixture's controller created ends with res, and the informers see it
// and the object's last status.
func (f *fixture) finishJob(res runner.Result) *batchv1.Job {
	f.t.Helper()
	ctx := context.Background()
	jobs, err := f.kube.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(jobs.Items) == 0 {
		f.t.Fatalf("no Job to finish (%v)", err)
	}
	slices.SortFunc(jobs.Items, func(a, b batchv1.Job) int {
		return strings.Compare(a.Labels[names.LabelAttempt], b.Labels[names.LabelAttempt])
	})
	job := jobs.Items[len(jobs.Items)-1].DeepCopy()
	now := metav1.Now()
	job.Status.CompletionTime = &now
	job.Status.Succeeded = 1
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if _, err := f.kube.BatchV1().Jobs("ns").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	// The runner's state, as it writes it.
	store := &runner.StateStore{Client: f.kube, Namespace: "ns", Object: names.Object{Kind: "tfc", Name: "prod"}}
	if err := store.Write(ctx, []byte(`{"serial":1}`)); err != nil {
		f.t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	result := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-result", Namespace: "ns"}, Data: map[string][]byte{runner.KeyResult: b}}
	if _, err := f.kube.CoreV1().Secrets("ns").Create(ctx, result, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.observe(job)
	return job
}

// observe puts job and the object as the API holds it into the informers.
func (f *fixture) observe(jobs ...*batchv1.Job) {
	f.t.Helper()
	key := cache.ObjectName{Namespace: "ns", Name: "prod"}
	for _, job := range jobs {
		if err := f.c.engine.JobIndex.Update(job); err != nil {
			f.t.Fatal(err)
		}
		f.c.expectations.JobObserved(key, job.Name)
	}
	tc, err := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.setCached(tc)
	f.kube.ClearActions()
}

func (f *fixture) annotate(key, value string) {
	f.t.Helper()
	tc, err := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	tc.Annotations = map[string]string{key: value}
	if tc, err = f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Update(context.Background(), tc, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.setCached(tc)
}

func (f *fixture) condition(t string) *metav1.Condition {
	f.t.Helper()
	tc, err := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return meta.FindStatusCondition(tc.Status.Conditions, t)
}

func (f *fixture) createdJobs() []string {
	var out []string
	for _, w := range writes(f.kube.Actions()) {
		if name, ok := strings.CutPrefix(w, "create jobs "); ok {
			out = append(out, name)
		}
	}
	return out
}

// TestGateSequence walks a destructive plan through the gate: blocked,
// a stale approval (nothing runs), the right approval (attempt 1 with the
// approval), a plan that changed meanwhile (re-armed), then applied.
func TestGateSequence(t *testing.T) {
	f := newFixture(t, newTC(func(tc *infrav1.TerraformCluster) { tc.Finalizers = []string{infrav1.TerraformClusterFinalizer} }), newCluster(false))
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 1 {
		t.Fatalf("first sync created %v", jobs)
	}
	destroyOne := infrav1.PlanSummary{Destroy: 1, Resources: []infrav1.PlannedResource{{Address: "terraform_data.instance[1]", Action: "destroy"}}}
	first := f.finishJob(runner.Result{Operation: infrav1.OperationApply, Outcome: runner.OutcomeBlocked, Stage: "gate",
		Plan: &runner.Plan{Hash: "1111111111111111", Summary: destroyOne}})

	f.sync()
	c := f.condition(infrav1.ConditionDestructivePlanBlocked)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != workspace.ReasonAwaitingApproval ||
		!strings.Contains(c.Message, "kubectl annotate terraformcluster -n ns prod captf.io/approve-destructive-plan=1111111111111111 --overwrite") {
		t.Fatalf("blocked: DestructivePlanBlocked = %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("a blocked plan started %v", jobs)
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "2222222222222222")
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Reason != workspace.ReasonApprovalForAnotherPlan {
		t.Errorf("approval of another plan: %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("an approval of another plan started %v", jobs)
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "1111111111111111")
	f.sync()
	jobs := f.createdJobs()
	if len(jobs) != 1 || !strings.HasSuffix(jobs[0], "-1") || strings.TrimSuffix(jobs[0], "-1") != strings.TrimSuffix(first.Name, "-0") {
		t.Fatalf("the approval started %v, want attempt 1 of %s", jobs, first.Name)
	}
	approved, _ := f.kube.BatchV1().Jobs("ns").Get(context.Background(), jobs[0], metav1.GetOptions{})
	if approved.Labels[names.LabelApprovedPlan] != "1111111111111111" ||
		!slices.Contains(approved.Spec.Template.Spec.Containers[0].Args, "--approved-destructive-plan=1111111111111111") {
		t.Errorf("approved Job labels %v args %v", approved.Labels, approved.Spec.Template.Spec.Containers[0].Args)
	}

	// Meanwhile the plan changed: the gate re-arms with the new hash.
	f.finishJob(runner.Result{Operation: infrav1.OperationApply, Outcome: runner.OutcomeBlocked, Stage: "gate",
		Plan: &runner.Plan{Hash: "3333333333333333", Summary: destroyOne}})
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Reason != workspace.ReasonPlanChanged ||
		!strings.Contains(c.Message, "The approved plan 1111111111111111 is no longer what terraform plans") || !strings.Contains(c.Message, "=3333333333333333") {
		t.Errorf("changed plan: %+v", c)
	}
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("a changed plan started %v", jobs)
	}

	f.observe()
	f.annotate(infrav1.AnnotationApproveDestructivePlan, "3333333333333333")
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 1 || !strings.HasSuffix(jobs[0], "-2") {
		t.Fatalf("the second approval started %v, want attempt 2", jobs)
	}
	f.finishJob(runner.Result{Operation: infrav1.OperationApply, Outcome: runner.OutcomeSucceeded,
		Plan:    &runner.Plan{Hash: "3333333333333333", Summary: destroyOne},
		Outputs: map[string]runner.Output{"x": {Value: json.RawMessage("1")}}})
	f.sync()
	if c := f.condition(infrav1.ConditionDestructivePlanBlocked); c.Status != metav1.ConditionFalse {
		t.Errorf("after the apply: %+v", c)
	}
	if r := readyReason(t, f); r != workspace.ReasonApplied {
		t.Errorf("Ready reason %q after the apply", r)
	}
	// Applied once: the approval stays on the object but starts nothing.
	f.observe()
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Errorf("an applied approval started %v", jobs)
	}
}

// setCached puts tc into the informer's cache as the API returned it.
func (f *fixture) setCached(tc *infrav1.TerraformCluster) {
	f.t.Helper()
	if err := f.tcs.Update(tc); err != nil {
		f.t.Fatal(err)
	}
}

// TestDriftNeverHoldsUpAnApply: a drift check is due after the interval
// and plans with the durable inputs; a spec change while it runs stops it
// and the apply follows.
func TestDriftNeverHoldsUpAnApply(t *testing.T) {
	f := newFixture(t, newTC(func(tc *infrav1.TerraformCluster) {
		tc.Finalizers = []string{infrav1.TerraformClusterFinalizer}
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
	}), newCluster(false))
	f.sync()
	f.finishJob(runner.Result{Operation: infrav1.OperationApply, Outcome: runner.OutcomeSucceeded, Plan: &runner.Plan{Hash: "1111111111111111"},
		Outputs: map[string]runner.Output{"x": {Value: json.RawMessage("1")}}})
	f.sync()
	f.observe()
	if r := readyReason(t, f); r != workspace.ReasonApplied {
		t.Fatalf("Ready reason %q", r)
	}
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 0 {
		t.Fatalf("a drift check before its time: %v", jobs)
	}
	later := time.Now().Add(2 * time.Minute) // past the interval and its jitter
	f.c.engine.Now = func() time.Time { return later }
	f.sync()
	jobs := f.createdJobs()
	if len(jobs) != 1 || !strings.Contains(jobs[0], "-drift-") {
		t.Fatalf("due: created %v, want a drift check", jobs)
	}
	drift, _ := f.kube.BatchV1().Jobs("ns").Get(context.Background(), jobs[0], metav1.GetOptions{})
	if !slices.Contains(drift.Spec.Template.Spec.Containers[0].Args, "--durable-inputs") {
		t.Errorf("the drift check does not plan with the durable inputs: %v", drift.Spec.Template.Spec.Containers[0].Args)
	}
	f.observe(drift)

	// The spec changes while the check runs: the check is stopped.
	tc, _ := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	tc.Spec.Module.Inline += "\n# changed"
	tc.Generation++
	tc, _ = f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Update(context.Background(), tc, metav1.UpdateOptions{})
	f.setCached(tc)
	f.sync()
	if got := writes(f.kube.Actions()); !slices.Contains(got, "delete jobs "+drift.Name) || len(f.createdJobs()) != 0 {
		t.Fatalf("with a check running and the spec changed: %v, want the check deleted and no Job yet", got)
	}
	if err := f.c.engine.JobIndex.Delete(drift); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	f.sync()
	if jobs := f.createdJobs(); len(jobs) != 1 || !strings.Contains(jobs[0], "-apply-") {
		t.Fatalf("after the check went: created %v, want the apply", jobs)
	}
}

// TestClusterRemediationIsGated: a drifted cluster whose policy remediates
// applies again, and that apply goes through the cluster's gate.
func TestClusterRemediationIsGated(t *testing.T) {
	f := newFixture(t, newTC(func(tc *infrav1.TerraformCluster) {
		tc.Finalizers = []string{infrav1.TerraformClusterFinalizer}
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Hour}, Remediation: infrav1.DriftRemediationApply}
	}), newCluster(false))
	f.sync()
	f.finishJob(runner.Result{Operation: infrav1.OperationApply, Outcome: runner.OutcomeSucceeded, Plan: &runner.Plan{Hash: "1111111111111111"},
		Outputs: map[string]runner.Output{"x": {Value: json.RawMessage("1")}}})
	f.sync()
	f.observe()

	// A drift check after the apply found a replacement.
	tc, _ := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	checked := metav1.NewTime(time.Now().Add(time.Minute)) // after the apply Job
	tc.Status.LastDriftCheckTime = &checked
	meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{Type: infrav1.ConditionDrifted, Status: metav1.ConditionTrue, Reason: workspace.ReasonDriftDetected})
	tc, _ = f.captf.InfrastructureV1alpha1().TerraformClusters("ns").UpdateStatus(context.Background(), tc, metav1.UpdateOptions{})
	f.setCached(tc)
	f.sync()
	jobs := f.createdJobs()
	if len(jobs) != 1 || !strings.HasSuffix(jobs[0], "-1") {
		t.Fatalf("remediation created %v, want attempt 1 of the apply", jobs)
	}
	job, _ := f.kube.BatchV1().Jobs("ns").Get(context.Background(), jobs[0], metav1.GetOptions{})
	if !slices.Contains(job.Spec.Template.Spec.Containers[0].Args, "--gate=Destructive") {
		t.Errorf("the remediation runs without the cluster's gate: %v", job.Spec.Template.Spec.Containers[0].Args)
	}
}
