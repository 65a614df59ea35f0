package manager

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// jobsPerObject is what an object with drift checks on keeps once it has
// been checked three times: its apply and three drift Jobs.
const jobsPerObject = 4

// finishedJob is the i-th runner Job of a fleet as the API server serves
// it once it succeeded (its fields as kube-controller-manager v1.37
// writes them).
func finishedJob(i int) *batchv1.Job {
	obj := i / jobsPerObject
	owner := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-a-md-0-%05d", obj), Namespace: "fleet",
		UID: types.UID(fmt.Sprintf("29b33912-8e3a-4907-b3a1-%012d", obj))}}
	op := infrav1.OperationDrift
	if i%jobsPerObject == 0 {
		op = infrav1.OperationApply
	}
	job := runnerjob.Build(runnerjob.Spec{Owner: owner, OwnerGVK: infrav1.SchemeGroupVersion.WithKind("TerraformMachine"),
		Operation: op, InputsHash: "a339ee2449a91875", InputsBytes: 208, Attempt: i % jobsPerObject, Image: "captf:v0.1.0",
		Policy: runnerjob.EffectivePolicy(nil, nil), Backups: 5, RunnerAPI: "https://captf-runner-api.captf-system.svc:9445"})
	job.UID = types.UID(fmt.Sprintf("d76ae80b-94e3-43fa-a943-%012d", i))
	job.ResourceVersion = fmt.Sprint(100000 + i)
	job.Generation = 1
	start := metav1.NewTime(time.Date(2026, 12, 1, 13, 56, 54, 0, time.UTC))
	done := metav1.NewTime(start.Add(3 * time.Second))
	job.CreationTimestamp = start
	job.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "captf", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "batch/v1", Time: &start},
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "batch/v1", Time: &done, Subresource: "status"}}
	job.Spec.Template.Labels = map[string]string{batchv1.ControllerUidLabel: string(job.UID), batchv1.JobNameLabel: job.Name}
	for k, v := range job.Labels {
		job.Spec.Template.Labels[k] = v
	}
	met := "Reached expected number of succeeded pods"
	job.Status = batchv1.JobStatus{StartTime: &start, CompletionTime: &done, Succeeded: 1, Ready: new(int32), Terminating: new(int32),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
		Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done, Reason: batchv1.JobReasonCompletionsReached, Message: met},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done, Reason: batchv1.JobReasonCompletionsReached, Message: met}}}
	return job
}

// BenchmarkJobCache reports the heap a finished runner Job takes in the
// manager's Job informer: decoded from protobuf (every string its own, as
// from a watch), transformed and indexed as the manager does, four Jobs an
// object.
func BenchmarkJobCache(b *testing.B) {
	const n = 10000
	wire := make([][]byte, n)
	for i := range wire {
		var err error
		if wire[i], err = finishedJob(i).Marshal(); err != nil {
			b.Fatal(err)
		}
	}
	perJob := heapPerObject(b, wire, func(data []byte) (any, error) {
		job := &batchv1.Job{}
		return job, job.Unmarshal(data)
	}, cacheTransform(newSharedStrings(), runnerjob.Trim), runnerjob.Indexers)
	b.ReportMetric(perJob, "B/job")
}

// heapPerObject is the heap each of wire's objects takes in an informer's
// cache: decoded (every string its own, as from a watch), transformed and
// indexed.
func heapPerObject(b *testing.B, wire [][]byte, decode func([]byte) (any, error), transform cache.TransformFunc, indexers cache.Indexers) float64 {
	var perObject float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if err := indexer.AddIndexers(indexers); err != nil {
			b.Fatal(err)
		}
		for _, data := range wire {
			obj, err := decode(data)
			if err != nil {
				b.Fatal(err)
			}
			if obj, err = transform(obj); err != nil {
				b.Fatal(err)
			}
			if err := indexer.Add(obj); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perObject = float64(after.HeapAlloc-before.HeapAlloc) / float64(len(wire))
		runtime.KeepAlive(indexer)
	}
	return perObject
}

// TestCachedJobForTheRunnerAPI: the Job the runner API reads from the
// leader's cache holds what it checks of a runner's Job as the API server
// serves it (UID, controller, CAPTF's labels); a standby, or a Job the
// cache does not hold, gives none, and the runner API reads it.
func TestCachedJobForTheRunnerAPI(t *testing.T) {
	job := finishedJob(4)
	runner := &job.Spec.Template.Spec.Containers[0]
	runner.Env = append(runner.Env, corev1.EnvVar{Name: run.EnvWriteKey, Value: "the-key"})
	m := &manager{}
	if got := m.cachedJob(job.Namespace, job.Name); got != nil {
		t.Fatalf("a standby's cachedJob = %v, want none", got)
	}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(runnerjob.Trim(job.DeepCopy())); err != nil {
		t.Fatal(err)
	}
	m.jobs.Store(&indexer)
	got := m.cachedJob(job.Namespace, job.Name)
	if got == nil {
		t.Fatal("cachedJob found no Job the cache holds")
	}
	if got.Name != job.Name || got.Namespace != job.Namespace || got.UID != job.UID {
		t.Errorf("cachedJob = %s/%s %s, want %s/%s %s", got.Namespace, got.Name, got.UID, job.Namespace, job.Name, job.UID)
	}
	want := metav1.GetControllerOf(job)
	if c := metav1.GetControllerOf(got); c == nil || c.UID != want.UID || c.Kind != want.Kind || c.APIVersion != want.APIVersion || c.Name != want.Name {
		t.Errorf("cachedJob's controller = %+v, want %+v", c, want)
	}
	// The operation: a drift check's runner only reads the state.
	for _, label := range []string{names.LabelManagedBy, names.LabelObjectUID, names.LabelOperation} {
		if got.Labels[label] != job.Labels[label] || job.Labels[label] == "" {
			t.Errorf("cachedJob's label %s = %q, want %q", label, got.Labels[label], job.Labels[label])
		}
	}
	if key, _ := run.WriteKeyOf(&got.Spec.Template.Spec); key != "the-key" {
		t.Errorf("cachedJob's write key %q, want the Job's", key)
	}
	if got := m.cachedJob(job.Namespace, "another"); got != nil {
		t.Errorf("cachedJob of a Job not cached = %v, want none", got)
	}
}
