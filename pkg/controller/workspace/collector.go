package workspace

import (
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
)

// The series computed at each scrape from the leader's caches: a restarted
// manager reports the truth at once, and an object's series go with it.
var (
	objectLabels = []string{"kind", "namespace", "name"}
	readyDesc    = prometheus.NewDesc("captf_ready",
		"1 when the object's Ready condition is True, else 0; reason is the condition's reason.", append(objectLabels, "reason"), nil)
	driftedDesc = prometheus.NewDesc("captf_drifted",
		"1 when the object's last drift check found its infrastructure changed outside CAPTF.", objectLabels, nil)
	stateMissingDesc = prometheus.NewDesc("captf_state_missing",
		"1 while an applied object's state Secret is missing: nothing runs for it until a backup is restored.", objectLabels, nil)
	jobFailingDesc = prometheus.NewDesc("captf_job_failing",
		"1 when the newest finished Job of the operation failed (retries with backoff keep it 1 until one succeeds), else 0.", append(objectLabels, "operation"), nil)
	lastSuccessDesc = prometheus.NewDesc("captf_last_success_timestamp_seconds",
		"When a Job of the object last succeeded (apply, refresh or drift check).", objectLabels, nil)
	driftIntervalDesc = prometheus.NewDesc("captf_drift_interval_seconds",
		"The drift check interval of an applied object whose drift checks are on.", objectLabels, nil)
	deletingDesc = prometheus.NewDesc("captf_deletion_timestamp_seconds",
		"When the object was deleted, while CAPTF still holds it (destroying, or waiting).", objectLabels, nil)
	stateBytesDesc = prometheus.NewDesc("captf_state_bytes",
		"Uncompressed size of the object's Terraform state.", objectLabels, nil)
	inputsBytesDesc = prometheus.NewDesc("captf_inputs_bytes",
		"Size of the inputs rendered for the object's newest Job.", objectLabels, nil)
	jobsActiveDesc = prometheus.NewDesc("captf_jobs_active",
		"Runner Jobs not finished, by kind and operation.", []string{"kind", "operation"}, nil)
	jobsWaitingDesc = prometheus.NewDesc("captf_jobs_waiting",
		"Objects whose Job waits for a slot (--max-concurrent-jobs, --max-concurrent-jobs-per-namespace), by kind and operation.", []string{"kind", "operation"}, nil)
	waitingSinceDesc = prometheus.NewDesc("captf_waiting_since_timestamp_seconds",
		"Since when the object waits: since its Ready condition turned False (reason: Ready's), or since a plan of it began to wait for an approval (reason: PlanAwaitingApproval or DestructivePlanBlocked). None while it waits for nothing.", append(objectLabels, "reason"), nil)
	stateMaxDesc = prometheus.NewDesc("captf_state_max_bytes",
		"The largest state CAPTF reads (--max-state-bytes): a larger one stops the object with StateTooLarge.", nil, nil)
	inputsMaxDesc = prometheus.NewDesc("captf_inputs_max_bytes",
		"The largest rendered inputs a run-inputs Secret takes: larger ones stop the object with InputsTooLarge.", nil, nil)
)

// Collector reports the objects of every engine controller.
type Collector struct {
	MaxStateBytes int64

	mu      sync.Mutex
	engines []*engine
	objects []cache.Store
}

// add reports the objects in store, of e's kind.
func (c *Collector) add(e *engine, store cache.Store) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.engines = append(c.engines, e)
	c.objects = append(c.objects, store)
}

// Describe sends the descriptions of every series the collector reports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{readyDesc, driftedDesc, stateMissingDesc, jobFailingDesc, lastSuccessDesc, driftIntervalDesc,
		deletingDesc, stateBytesDesc, inputsBytesDesc, jobsActiveDesc, jobsWaitingDesc, stateMaxDesc, inputsMaxDesc, waitingSinceDesc} {
		ch <- d
	}
}

// Collect computes every series from the caches.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	engines, objects := c.engines, c.objects
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(stateMaxDesc, prometheus.GaugeValue, float64(c.MaxStateBytes))
	ch <- prometheus.MustNewConstMetric(inputsMaxDesc, prometheus.GaugeValue, MaxInputBytes)
	for i, e := range engines {
		for _, o := range objects[i].List() {
			if obj, ok := o.(Object); ok {
				e.collect(ch, obj)
			}
		}
	}
	if len(engines) > 0 {
		collectActiveJobs(ch, engines[0].JobIndex)
		// Applies and destroys of every kind are reported, 0 without a cap.
		waiting := map[[2]string]int{}
		for _, e := range engines {
			for _, op := range []infrav1.Operation{infrav1.OperationApply, infrav1.OperationDestroy} {
				waiting[[2]string{e.GVK.Kind, string(op)}] = 0
			}
		}
		if slots := engines[0].Slots; slots != nil {
			maps.Copy(waiting, slots.Waiting())
		}
		for ko, n := range waiting {
			gauge(ch, jobsWaitingDesc, float64(n), ko[0], ko[1])
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collect sends the series of one object.
func (e *engine) collect(ch chan<- prometheus.Metric, obj Object) {
	kind, ns, name := e.GVK.Kind, obj.GetNamespace(), obj.GetName()
	st := obj.WorkspaceStatus()
	ready := meta.FindStatusCondition(st.Conditions, infrav1.ConditionReady)
	reason := ""
	if ready != nil {
		reason = ready.Reason
	}
	gauge(ch, readyDesc, boolValue(ready != nil && ready.Status == metav1.ConditionTrue), kind, ns, name, reason)
	gauge(ch, driftedDesc, boolValue(meta.IsStatusConditionTrue(st.Conditions, infrav1.ConditionDrifted)), kind, ns, name)
	gauge(ch, stateMissingDesc, boolValue(meta.IsStatusConditionTrue(st.Conditions, infrav1.ConditionStateMissing)), kind, ns, name)
	// Only while it waits. The times are the conditions' own, so a
	// leader change (which leaves a gap in every series) does not restart
	// the count, as an alert's `for` would.
	gated := func(reason string) bool {
		return reason == infrav1.ConditionPlanAwaitingApproval || reason == infrav1.ConditionDestructivePlanBlocked
	}
	if ready != nil && ready.Status == metav1.ConditionFalse && !gated(ready.Reason) {
		gauge(ch, waitingSinceDesc, float64(ready.LastTransitionTime.Unix()), kind, ns, name, ready.Reason)
	}
	for _, c := range st.Conditions {
		if gated(c.Type) && c.Status == metav1.ConditionTrue {
			gauge(ch, waitingSinceDesc, float64(c.LastTransitionTime.Unix()), kind, ns, name, c.Type)
		}
	}
	if t := obj.GetDeletionTimestamp(); t != nil {
		gauge(ch, deletingDesc, float64(t.Unix()), kind, ns, name)
	}
	if enabled, interval, _ := e.driftPolicy(obj); enabled && st.AppliedInputsHash != "" {
		gauge(ch, driftIntervalDesc, interval.Seconds(), kind, ns, name)
	}

	jobs := runnerjob.OfObject(e.JobIndex, obj)
	lastSuccess := lastSuccessFromStatus(st)
	seen := map[string]bool{}
	inputsReported := false
	for _, j := range jobs { // newest first
		if j.InputsBytes > 0 && !inputsReported {
			gauge(ch, inputsBytesDesc, float64(j.InputsBytes), kind, ns, name)
			inputsReported = true
		}
		finished, succeeded := runnerjob.Finished(j)
		if !finished {
			continue
		}
		if succeeded && runnerjob.FinishTime(j).After(lastSuccess) {
			lastSuccess = runnerjob.FinishTime(j)
		}
		op := string(j.Operation)
		if !seen[op] {
			seen[op] = true
			gauge(ch, jobFailingDesc, boolValue(!succeeded), kind, ns, name, op)
		}
	}
	if !lastSuccess.IsZero() {
		gauge(ch, lastSuccessDesc, float64(lastSuccess.Unix()), kind, ns, name)
	}
	if e.StateSecrets != nil {
		if o, ok, _ := e.StateSecrets.GetByKey(ns + "/" + e.Names(obj).State()); ok {
			if head, ok := o.(*StateSecretMeta); ok && head.Size >= 0 {
				gauge(ch, stateBytesDesc, float64(head.Size), kind, ns, name)
			}
		}
	}
}

// lastSuccessFromStatus is the newest success the status records: Jobs
// leave the history, the status stays.
func lastSuccessFromStatus(st *infrav1.WorkspaceStatus) time.Time {
	var t time.Time
	for _, s := range []*metav1.Time{st.LastAppliedTime, st.LastRefreshTime} {
		if s != nil && s.After(t) {
			t = s.Time
		}
	}
	// A failed drift check records its time too: only one that found
	// drift or none succeeded.
	if d := meta.FindStatusCondition(st.Conditions, infrav1.ConditionDrifted); st.LastDriftCheckTime != nil && d != nil &&
		d.Reason != ReasonDriftCheckFailed && st.LastDriftCheckTime.After(t) {
		t = st.LastDriftCheckTime.Time
	}
	return t
}

// collectActiveJobs counts the runner Jobs not finished, by the kind of
// their object and operation.
func collectActiveJobs(ch chan<- prometheus.Metric, jobs cache.Indexer) {
	type key struct{ kind, op string }
	active := map[key]int{}
	for _, o := range jobs.List() {
		j, ok := o.(*runnerjob.Cached)
		if !ok {
			continue
		}
		if !runnerjob.IsRunner(j) || j.Operation == "" {
			continue
		}
		k := key{j.Controller.Kind, string(j.Operation)}
		if _, ok := active[k]; !ok {
			active[k] = 0
		}
		if finished, _ := runnerjob.Finished(j); !finished {
			active[k]++
		}
	}
	for k, n := range active {
		gauge(ch, jobsActiveDesc, float64(n), k.kind, k.op)
	}
}
