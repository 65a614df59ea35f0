package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

// TestMaxConcurrentJobs: with --max-concurrent-jobs=1, three clusters
// created at once are applied one Job at a time: never two runner Jobs
// unfinished together, the waiting ones say WaitingForJobSlot and are
// counted by captf_jobs_waiting, and all become Ready with one apply each.
func TestMaxConcurrentJobs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.startManager("--max-concurrent-jobs=1")
	token, err := plane.MetricsReaderToken(ctx, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"one", "two", "three"}
	for _, name := range names {
		e.create(e.localCloud(name, e.newCluster(name, false), map[string]any{"instances": 1, "sleep_seconds": 2}))
	}
	maxActive, sawWaiting, sawMetric := 0, false, false
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		active := 0
		for _, j := range e.jobs("") {
			if finished, _ := runnerjob.Finished(runnerjob.CachedFrom(&j)); !finished {
				active++
			}
		}
		maxActive = max(maxActive, active)
		ready := 0
		for _, name := range names {
			tc := e.get(name)
			if c := condition(tc, infrav1.ConditionReady); c != nil && c.Reason == runnerjob.ReasonWaitingForJobSlot {
				sawWaiting = true
			}
			if isReady(tc) {
				ready++
			}
		}
		if !sawMetric {
			if _, body, err := m.Scrape(token); err == nil && strings.Contains(body, `captf_jobs_waiting{kind="TerraformCluster",operation="apply"} `) &&
				!strings.Contains(body, `captf_jobs_waiting{kind="TerraformCluster",operation="apply"} 0`) {
				sawMetric = true
			}
		}
		return ready == len(names), nil
	})
	if err != nil {
		t.Fatalf("not every cluster became Ready: %v", err)
	}
	if maxActive != 1 {
		t.Errorf("at most %d runner Jobs ran at once, want 1", maxActive)
	}
	if !sawWaiting {
		t.Error("no cluster said WaitingForJobSlot")
	}
	if !sawMetric {
		t.Error("captf_jobs_waiting never counted a waiting apply")
	}
	if n := len(e.jobs("apply")); n != len(names) {
		t.Errorf("%d apply Jobs, want %d", n, len(names))
	}
}

// TestDriftYieldsToApply: with --max-concurrent-jobs=1, drift checks that
// come due while an apply waits for the slot let it go first. Three
// clusters are checked every 10s; a fourth's apply takes the slot for 20s,
// a fifth's apply waits (WaitingForJobSlot) with the checks, and is the
// next Job made; the checks go on after it.
func TestDriftYieldsToApply(t *testing.T) {
	e := newEnv(t)
	e.startManager("--max-concurrent-jobs=1")
	keep := int32(50) // every drift Job stays to be looked at
	watched := []string{"watched-a", "watched-b", "watched-c"}
	for _, name := range watched {
		tc := e.localCloud(name, e.newCluster(name, false), map[string]any{"instances": 1})
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}}
		tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
		e.create(tc)
	}
	for _, name := range watched {
		e.waitFor(name, 2*time.Minute, "Ready and checked for drift", func(tc *infrav1.TerraformCluster) bool {
			return isReady(tc) && tc.Status.LastDriftCheckTime != nil
		})
	}
	e.create(e.localCloud("long", e.newCluster("long", false), map[string]any{"instances": 1, "sleep_seconds": 20}))
	e.waitFor("long", time.Minute, "applying", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == workspace.ReasonApplying
	})
	e.create(e.localCloud("late", e.newCluster("late", false), map[string]any{"instances": 1}))
	e.waitFor("late", 15*time.Second, "waiting for the slot", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == runnerjob.ReasonWaitingForJobSlot
	})
	if !isReady(e.get("long")) {
		e.waitFor("long", time.Minute, "Ready", isReady)
	}
	e.waitFor("late", time.Minute, "Ready", isReady)
	// The checks go on: one after late's apply.
	var lateApply *batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(context.Context) (bool, error) {
		jobs := e.jobs("")
		for i := range jobs {
			if jobs[i].Labels[names.LabelObjectName] == "late" {
				lateApply = &jobs[i]
			}
		}
		for _, j := range jobs {
			if j.Labels[names.LabelOperation] == "drift" && lateApply != nil && lateApply.CreationTimestamp.Before(&j.CreationTimestamp) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.dumpJobs()
		t.Fatalf("no drift check after late's apply: %v", err)
	}
	jobs := e.jobs("")
	noOverlap(t, jobs)
	var longApply *batchv1.Job
	for i := range jobs {
		if jobs[i].Labels[names.LabelObjectName] == "long" {
			longApply = &jobs[i]
		}
	}
	// The first Job made after long's: late's apply, though every watched
	// cluster's check was due before it.
	var next *batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		if longApply.CreationTimestamp.Before(&j.CreationTimestamp) && (next == nil || j.CreationTimestamp.Before(&next.CreationTimestamp)) {
			next = j
		}
	}
	if next == nil || next.Name != lateApply.Name {
		e.dumpJobs()
		t.Errorf("the first Job after %s is %s, want late's apply %s", longApply.Name, jobName(next), lateApply.Name)
	}
	if n := len(e.jobs("apply")); n != len(watched)+2 {
		t.Errorf("%d apply Jobs, want %d", n, len(watched)+2)
	}
}

// TestLateDriftCheckKeepsItsPace: a drift check held back past half its
// interval (here by another cluster's apply holding the only Job slot) does
// not push the next one a whole interval on: the next comes at the
// object's next slot, which has passed by then, so at once.
func TestLateDriftCheckKeepsItsPace(t *testing.T) {
	const interval = 20 * time.Second
	e := newEnv(t)
	e.startManager("--max-concurrent-jobs=1")
	keep := int32(50)
	tc := e.localCloud("watched", e.newCluster("watched", false), map[string]any{"instances": 1})
	tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: interval}}
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(tc)
	e.waitFor("watched", 2*time.Minute, "Ready and checked for drift", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.LastDriftCheckTime != nil
	})
	// The next check is due 10 to 30 s after that one: long's apply holds
	// the slot past it by 15 s at least.
	e.create(e.localCloud("long", e.newCluster("long", false), map[string]any{"instances": 1, "sleep_seconds": 45}))
	e.waitFor("long", 2*time.Minute, "Ready", isReady)
	var checks []batchv1.Job // watched's checks made after long's apply
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		checks = nil
		var longApply *batchv1.Job
		jobs := e.jobs("")
		for i := range jobs {
			if jobs[i].Labels[names.LabelObjectName] == "long" {
				longApply = &jobs[i]
			}
		}
		for _, j := range jobs {
			if j.Labels[names.LabelObjectName] == "watched" && j.Labels[names.LabelOperation] == "drift" && longApply.CreationTimestamp.Before(&j.CreationTimestamp) {
				checks = append(checks, j)
			}
		}
		return len(checks) >= 2, nil
	})
	if err != nil {
		e.dumpJobs()
		t.Fatalf("watched's checks after long's apply: %d, want 2: %v", len(checks), err)
	}
	slices.SortFunc(checks, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	noOverlap(t, e.jobs(""))
	// Counted from the late check's finish, the next would be 13 s after
	// its start at the soonest (a whole interval later, the old rule).
	gap := checks[1].CreationTimestamp.Sub(checks[0].CreationTimestamp.Time)
	t.Logf("the late check %s, then %s %s later", checks[0].Name, checks[1].Name, gap)
	if gap >= 9*time.Second {
		e.dumpJobs()
		t.Errorf("the check after the late one came %s after it, want it at once (its slot had passed)", gap)
	}
}

// unfinishedRunnerJobs lists, by namespace, the Jobs of every namespace
// but skip that a Terraform* object controls and that have not finished:
// what a manager watching every namespace counts toward its caps.
func unfinishedRunnerJobs(t *testing.T, skip ...string) map[string][]string {
	t.Helper()
	list, err := plane.Kube.BatchV1().Jobs("").List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelManagedBy + "=" + names.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, j := range list.Items {
		owner := metav1.GetControllerOf(&j)
		if slices.Contains(skip, j.Namespace) || owner == nil || owner.APIVersion != infrav1.SchemeGroupVersion.String() || !strings.HasPrefix(owner.Kind, "Terraform") {
			continue
		}
		if j.Status.CompletionTime == nil && !jobFailed(&j) {
			out[j.Namespace] = append(out[j.Namespace], j.Name)
		}
	}
	return out
}

// jobFailed: the Job controller marked job failed.
func jobFailed(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func jobName(j *batchv1.Job) string {
	if j == nil {
		return "none"
	}
	return j.Name
}

// TestResourceQuota: a ResourceQuota that refuses the runner Job, then one
// that refuses its pod, is said in Ready (QuotaExceeded, naming the quota)
// and an event, not only in the manager's log; once the quota allows it the
// same run goes on, with one apply Job in all.
func TestResourceQuota(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.startManager()
	quota := func(name string, hard corev1.ResourceList) {
		t.Helper()
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		if _, err := plane.Kube.CoreV1().ResourceQuotas(e.ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Admission counts against the usage the quota controller computes.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			q, err := plane.Kube.CoreV1().ResourceQuotas(e.ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil && len(q.Status.Hard) > 0, nil
		}); err != nil {
			t.Fatalf("quota %s never got its status: %v", name, err)
		}
	}
	unquota := func(name string) {
		t.Helper()
		if err := plane.Kube.CoreV1().ResourceQuotas(e.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	quotaExceeded := func(quota string) func(*metav1.Condition, *infrav1.TerraformCluster) bool {
		return func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
			return c.Status == metav1.ConditionFalse && c.Reason == workspace.ReasonQuotaExceeded && strings.Contains(c.Message, "exceeded quota: "+quota)
		}
	}

	quota("runner-jobs", corev1.ResourceList{"count/jobs.batch": resource.MustParse("0")})
	e.create(e.localCloud("quota", e.newCluster("quota", false), map[string]any{"instances": 1}))
	waitCondition(e, "quota", infrav1.ConditionReady, workspace.ReasonQuotaExceeded, quotaExceeded("runner-jobs"))
	if ev := findEvent(t, e.ns, "quota", workspace.ReasonQuotaExceeded); ev == nil || !strings.Contains(ev.Message, "runner-jobs") {
		t.Errorf("no QuotaExceeded event naming the quota: %+v", ev)
	}
	if n := len(e.jobs("")); n != 0 {
		t.Fatalf("%d Jobs past a quota of none", n)
	}

	// The Job is allowed now, its pod is not.
	quota("runner-pods", corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")})
	unquota("runner-jobs")
	tc := waitCondition(e, "quota", infrav1.ConditionReady, workspace.ReasonQuotaExceeded, quotaExceeded("runner-pods"))
	jobs := e.jobs("apply")
	if len(jobs) != 1 || !strings.Contains(condition(tc, infrav1.ConditionReady).Message, jobs[0].Name) {
		t.Errorf("Jobs %d; the message %q should name the one whose pod is refused", len(jobs), condition(tc, infrav1.ConditionReady).Message)
	}

	unquota("runner-pods")
	e.waitFor("quota", 3*time.Minute, "Ready", isReady)
	if n := len(e.jobs("apply")); n != 1 {
		t.Errorf("%d apply Jobs, want the one that waited for its pod", n)
	}
}

// TestForgedJobs: Jobs a tenant makes to look like CAPTF's take no other
// namespace's Job slot and are no other object's run. A manager watching
// every namespace with --max-concurrent-jobs=2 and a per-namespace cap of 1;
// in the tenant's namespace, suspended (never finishing) Jobs: one with
// CAPTF's labels, one with the victim's kind, name and UID too, and two
// that the tenant's own TerraformCluster controls. The victim's apply in
// its own namespace runs at once.
func TestForgedJobs(t *testing.T) {
	victim, tenant := newEnv(t), newEnv(t)
	ctx := context.Background()
	// The watch filter keeps the manager to this test's objects.
	shard := victim.ns
	forge := func(name string, labels map[string]string, owners ...metav1.OwnerReference) {
		t.Helper()
		labels[names.LabelOperation] = string(infrav1.OperationApply)
		suspend := true
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, OwnerReferences: owners}, Spec: batchv1.JobSpec{
			Suspend: &suspend,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "runner", Image: "forged"}}}}}}
		if _, err := plane.Kube.BatchV1().Jobs(tenant.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	forge("forged-slot", map[string]string{names.LabelManagedBy: names.ManagedByValue})
	// The tenant's own object (not in the manager's shard: no Job of its
	// own) controls two more.
	own := tenant.create(tenant.localCloud("own", nil, map[string]any{"instances": 1}))
	controller := true
	ownRef := metav1.OwnerReference{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformCluster", Name: own.Name, UID: own.UID, Controller: &controller}
	for _, name := range []string{"own-1", "own-2"} {
		forge(name, names.ObjectLabels("TerraformCluster", own.Name, own.UID), ownRef)
	}

	// Paused until the forged run exists, so that the victim's first sync
	// already sees it.
	cluster := victim.newCluster("victim", true)
	patch := []byte(`{"metadata":{"labels":{"` + capi.WatchFilterLabel + `":"` + shard + `"}}}`)
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(victim.ns).Patch(ctx, "victim", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := victim.localCloud("victim", cluster, map[string]any{"instances": 1})
	tc.Labels[capi.WatchFilterLabel] = shard
	created := victim.create(tc)
	forge("forged-run", names.ObjectLabels("TerraformCluster", created.Name, created.UID))

	// The cap counts the runner Jobs of the whole management cluster: a
	// run another test left behind (its runner waits for a manager that
	// stopped) takes a slot here too. Each namespace with such Jobs counts
	// once (the per-namespace cap), so the cap is raised by as many: the
	// victim's slot is the one left beside the tenant's.
	elsewhere := unfinishedRunnerJobs(t, victim.ns, tenant.ns)
	if len(elsewhere) > 0 {
		t.Logf("unfinished runner Jobs of other namespaces, which the cap counts: %v", elsewhere)
	}
	limit := 2 + len(elsewhere)
	victim.startManager("--namespace=", "--watch-filter="+shard, fmt.Sprintf("--max-concurrent-jobs=%d", limit), "--max-concurrent-jobs-per-namespace=1")
	victim.unpause("victim")

	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		return isReady(victim.get("victim")), nil
	})
	if err != nil {
		// Which it is: a slot free by the count of what runs (a defect of
		// the manager's count), or taken by Jobs the test did not expect.
		now := unfinishedRunnerJobs(t, victim.ns)
		counted := len(now)
		verdict := "Jobs outside the test took the slots"
		if counted < limit {
			verdict = "a defect in the manager's count: a slot was free"
		}
		t.Fatalf("victim never Ready: %+v\nunfinished runner Jobs of other namespaces (each counts once, at --max-concurrent-jobs-per-namespace=1): %v, %d of the cap %d: %s",
			condition(victim.get("victim"), infrav1.ConditionReady), now, counted, limit, verdict)
	}
	if n := len(victim.jobs("apply")); n != 1 {
		t.Errorf("%d apply Jobs in the victim's namespace, want 1", n)
	}
	for _, j := range tenant.jobs("") {
		if j.Spec.Suspend == nil || !*j.Spec.Suspend || j.Status.Succeeded+j.Status.Failed > 0 {
			t.Errorf("forged Job %s changed: suspend %v, status %+v", j.Name, j.Spec.Suspend, j.Status)
		}
	}
	if n := len(tenant.jobs("")); n != 4 {
		t.Errorf("%d Jobs in the tenant's namespace, want the 4 forged ones", n)
	}
}
