package jobmetrics

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"

	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

var created = time.Unix(1_000_000, 0)

func finishedJob(name, kind, op string, conditionType batchv1.JobConditionType, reason string, ran time.Duration) *batchv1.Job {
	yes := true
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(created),
		Labels:          map[string]string{names.LabelOperation: op},
		OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: "obj", Controller: &yes}}}}
	if conditionType != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: conditionType, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.NewTime(created.Add(ran))}}
	}
	return j
}

type results map[string]*run.Result

// Read answers as runnerjob.Results does.
func (r results) Read(_ context.Context, _, name string, _ types.UID) (*run.Result, error) {
	res, ok := r[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return res, nil
}

// TestSync: one finished Job is counted once with what its runner
// reported; a Job killed before its runner wrote a result still counts.
func TestSync(t *testing.T) {
	started := metav1.NewTime(created.Add(30 * time.Second))
	jobs := []*batchv1.Job{
		finishedJob("failed", "TerraformMachine", "apply", batchv1.JobFailed, "BackoffLimitExceeded", 2*time.Minute),
		finishedJob("killed", "TerraformMachine", "apply", batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, time.Hour),
		finishedJob("applied", "TerraformMachine", "apply", batchv1.JobComplete, "", 90*time.Second),
	}
	res := results{
		names.Object{Kind: "tfm", Name: "obj"}.Result("failed"):  {Started: &started, Reason: "StateTooLarge", LockWaits: 2},
		names.Object{Kind: "tfm", Name: "obj"}.Result("applied"): {Started: &started, ForceUnlocked: true, BackupsMade: 1},
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, j := range jobs {
		if err := indexer.Add(runnerjob.Trim(j)); err != nil {
			t.Fatal(err)
		}
	}
	c := &Controller{results: res, jobs: indexer}
	_, ctx := ktesting.NewTestContext(t)
	before := map[string]float64{
		"failed":   testutil.ToFloat64(metrics.JobsFailed.WithLabelValues("TerraformMachine", "apply", "failed")),
		"deadline": testutil.ToFloat64(metrics.JobsFailed.WithLabelValues("TerraformMachine", "apply", "deadline_exceeded")),
		"waits":    testutil.ToFloat64(metrics.LeaseWaits.WithLabelValues("TerraformMachine")),
		"unlocks":  testutil.ToFloat64(metrics.ForceUnlocks.WithLabelValues("TerraformMachine")),
		"backups":  testutil.ToFloat64(metrics.StateBackups.WithLabelValues("TerraformMachine")),
		"tooLarge": testutil.ToFloat64(metrics.StateReadErrors.WithLabelValues("TerraformMachine", "StateTooLarge")),
	}
	failedLabels := map[string]string{"kind": "TerraformMachine", "operation": "apply", "result": "failed"}
	queueLabels := map[string]string{"kind": "TerraformMachine", "operation": "apply"}
	durCount, durSum := histogram(t, "captf_job_duration_seconds", failedLabels)
	queueCount, queueSum := histogram(t, "captf_job_queue_seconds", queueLabels)
	for _, j := range jobs {
		if err := c.sync(ctx, cache.MetaObjectToName(j)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.sync(ctx, cache.ObjectName{Namespace: "ns", Name: "gone"}); err != nil {
		t.Errorf("a Job deleted before it was counted: %v", err)
	}
	for name, want := range map[string]struct {
		got  float64
		diff float64
	}{
		"failed":   {testutil.ToFloat64(metrics.JobsFailed.WithLabelValues("TerraformMachine", "apply", "failed")), 1},
		"deadline": {testutil.ToFloat64(metrics.JobsFailed.WithLabelValues("TerraformMachine", "apply", "deadline_exceeded")), 1},
		"waits":    {testutil.ToFloat64(metrics.LeaseWaits.WithLabelValues("TerraformMachine")), 2},
		"unlocks":  {testutil.ToFloat64(metrics.ForceUnlocks.WithLabelValues("TerraformMachine")), 1},
		"backups":  {testutil.ToFloat64(metrics.StateBackups.WithLabelValues("TerraformMachine")), 1},
		"tooLarge": {testutil.ToFloat64(metrics.StateReadErrors.WithLabelValues("TerraformMachine", "StateTooLarge")), 1},
	} {
		if got := want.got - before[name]; got != want.diff {
			t.Errorf("%s went up by %v, want %v", name, got, want.diff)
		}
	}
	// Durations from the runner's start when it reported one, else from
	// the Job's creation: 90s, 120s and 3600s; queue time only where the
	// runner said when it started (30s, twice).
	if n, sum := histogram(t, "captf_job_duration_seconds", failedLabels); n-durCount != 2 || sum-durSum != 90+3600 {
		t.Errorf("failed durations: %d samples, sum %v, want 2 and 3690 (90s after the runner started, and an hour)", n-durCount, sum-durSum)
	}
	if n, sum := histogram(t, "captf_job_queue_seconds", queueLabels); n-queueCount != 2 || sum-queueSum != 60 {
		t.Errorf("queue: %d samples, sum %v, want 2 and 60", n-queueCount, sum-queueSum)
	}
}

// TestResultReadOnce: the Job metrics count a result the object's
// controller read (the manager gives both one runnerjob.Results) without
// reading it again.
func TestResultReadOnce(t *testing.T) {
	ctx := context.Background()
	job := finishedJob("applied", "TerraformMachine", "apply", batchv1.JobComplete, "", time.Minute)
	job.UID = "job-uid"
	name := names.Object{Kind: "tfm", Name: "obj"}.Result(job.Name)
	b, _ := json.Marshal(run.Result{Outcome: run.OutcomeSucceeded, BackupsMade: 1})
	kube := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{run.KeyResult: b}})
	shared := &runnerjob.Results{Kube: kube}
	if _, err := shared.Read(ctx, "ns", name, job.UID); err != nil { // the TerraformMachine controller's read
		t.Fatal(err)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(runnerjob.Trim(job)); err != nil {
		t.Fatal(err)
	}
	c := &Controller{results: shared, jobs: indexer}
	backups := testutil.ToFloat64(metrics.StateBackups.WithLabelValues("TerraformMachine"))
	kube.ClearActions()
	if err := c.sync(ctx, cache.MetaObjectToName(job)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(metrics.StateBackups.WithLabelValues("TerraformMachine")) - backups; got != 1 {
		t.Errorf("backups went up by %v, want the result's 1", got)
	}
	if a := kube.Actions(); len(a) > 0 {
		t.Errorf("the Job metrics made %d requests for a result already read: %v", len(a), a)
	}
}

// histogram is the sample count and sum of the series of name with labels.
func histogram(t *testing.T, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := len(m.GetLabel()) == len(labels)
			for _, l := range m.GetLabel() {
				match = match && labels[l.GetName()] == l.GetValue()
			}
			if match {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestUpdateJob: only a runner Job's move from running to finished is
// counted; a finished Job seen again (a resync, a restarted manager's adds)
// is not.
func TestUpdateJob(t *testing.T) {
	running := finishedJob("j", "TerraformCluster", "drift", "", "", 0)
	done := finishedJob("j", "TerraformCluster", "drift", batchv1.JobComplete, "", time.Minute)
	notOurs := finishedJob("x", "TerraformCluster", "", batchv1.JobComplete, "", time.Minute)
	notOurs.Labels = nil
	for _, tc := range []struct {
		name     string
		old, cur *batchv1.Job
		want     int
	}{
		{"finishes", running, done, 1},
		{"still running", running, running, 0},
		{"finished before", done, done, 0},
		{"not a runner Job", finishedJob("x", "TerraformCluster", "", "", "", 0), notOurs, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())
			defer q.ShutDown()
			c := &Controller{loop: &controller.Loop{Queue: q}}
			c.updateJob(runnerjob.Trim(tc.old), runnerjob.Trim(tc.cur))
			if q.Len() != tc.want {
				t.Errorf("queued %d, want %d", q.Len(), tc.want)
			}
		})
	}
}

// TestCountedWhenDeletedAtOnce: a Job deleted as soon as it finished (a
// clean drift check's, once its result is recorded) is counted all the
// same, from what was seen of it finishing.
func TestCountedWhenDeletedAtOnce(t *testing.T) {
	ctx := context.Background()
	running := finishedJob("gone", "TerraformCluster", "drift", "", "", 0)
	done := finishedJob("gone", "TerraformCluster", "drift", batchv1.JobComplete, "", time.Minute)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())
	defer q.ShutDown()
	c := &Controller{results: &runnerjob.Results{Kube: k8sfake.NewClientset()}, jobs: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}),
		loop: &controller.Loop{Queue: q}}
	c.updateJob(runnerjob.Trim(running), runnerjob.Trim(done)) // then deleted: not in the indexer
	labels := map[string]string{"kind": "TerraformCluster", "operation": "drift", "result": "succeeded"}
	before, _ := histogram(t, "captf_job_duration_seconds", labels)
	if err := c.sync(ctx, cache.MetaObjectToName(done)); err != nil {
		t.Fatal(err)
	}
	if after, _ := histogram(t, "captf_job_duration_seconds", labels); after != before+1 {
		t.Errorf("the deleted Job's duration counted %d times, want once", after-before)
	}
	if _, kept := c.finished.Load(cache.MetaObjectToName(done)); kept {
		t.Error("the counted Job is still kept")
	}
}
