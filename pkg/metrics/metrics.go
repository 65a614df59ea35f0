// Package metrics holds CAPTF's private Prometheus registry. Importing it
// wires client-go's workqueue and leader-election metrics into the registry,
// before any queue exists.
package metrics

import (
	"context"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"github.com/captf/captf/pkg/version"
)

// Registry is the manager's registry: nothing registers globally.
var Registry = prometheus.NewRegistry()

// registered are the collectors of Registry, for Describe.
var registered []prometheus.Collector

func register(cs ...prometheus.Collector) {
	Registry.MustRegister(cs...)
	registered = append(registered, cs...)
}

// Describe sends the descriptions of every series the registry's own
// collectors can report (not those of SetObjectsCollector's collector).
func Describe(ch chan<- *prometheus.Desc) {
	for _, c := range registered {
		c.Describe(ch)
	}
}

func init() {
	register(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	workqueue.SetProvider(workqueueProvider{})
	clientmetrics.Register(clientmetrics.RegisterOpts{RequestLatency: requestLatency{}, RequestResult: requestResult{}})
	leaderelection.SetProvider(leaderProvider{})
}

var (
	queueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the workqueue."}, []string{"name"})
	queueAdds  = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the workqueue."}, []string{"name"})
	queueLat   = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Seconds an item stays in the workqueue before it is requested.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, []string{"name"})
	queueWork = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Seconds processing an item takes.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, []string{"name"})
	queueUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"})
	queueLongest    = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, []string{"name"})
	queueRetries    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the workqueue."}, []string{"name"})
	leader          = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "leader_election_master_status", Help: "1 when this replica leads, else 0."}, []string{"name"})
	leaderSlowpath  = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leader_election_slowpath_total", Help: "Lease renewals that took the slow path."}, []string{"name"})
)

func init() {
	register(queueDepth, queueAdds, queueLat, queueWork, queueUnfinished, queueLongest, queueRetries, leader, leaderSlowpath)
}

func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "captf_build_info", Help: "Always 1: the version of this build and the Go version it was built with."},
		[]string{"version", "goversion"})
	v, _ := version.Get()
	g.WithLabelValues(v, runtime.Version()).Set(1)
	return g
}

// client-go's requests to the API server, by verb and host (never by URL:
// object names would make the labels unbounded).
var (
	restLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
		Help:    "Seconds requests to the API server took, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"})
	restResults = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
		Help: "Requests to the API server, by status code, method and host."}, []string{"code", "method", "host"})
)

func init() { register(restLatency, restResults) }

type requestLatency struct{}

func (requestLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	restLatency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

type requestResult struct{}

func (requestResult) Increment(_ context.Context, code, method, host string) {
	restResults.WithLabelValues(code, method, host).Inc()
}

type workqueueProvider struct{}

func (workqueueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueDepth.WithLabelValues(name)
}
func (workqueueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueAdds.WithLabelValues(name)
}
func (workqueueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueLat.WithLabelValues(name)
}
func (workqueueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueWork.WithLabelValues(name)
}
func (workqueueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueUnfinished.WithLabelValues(name)
}
func (workqueueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueLongest.WithLabelValues(name)
}
func (workqueueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueRetries.WithLabelValues(name)
}

// LeadingWithoutElection reports this replica as the leader of lease: a
// manager run without leader election is the only one.
func LeadingWithoutElection(lease string) { leader.WithLabelValues(lease).Set(1) }

type leaderProvider struct{}

func (leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetric{} }

type leaderMetric struct{}

func (leaderMetric) On(name string) {
	leader.WithLabelValues(name).Set(1)
	leaderSlowpath.WithLabelValues(name) // from zero
}
func (leaderMetric) Off(name string) { leader.WithLabelValues(name).Set(0) }

func (leaderMetric) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }

// IdentityDenied counts writes of spec.providerID (machines) or
// spec.providerIDList (pools) the webhook refused because another user than
// the manager made them.
var IdentityDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "captf_identity_denied_total",
	Help: "Writes of a provider ID by another user than the manager, refused by the webhook.",
}, []string{"kind"})

func init() { register(IdentityDenied) }

// DriftChecks counts drift checks by outcome.
var DriftChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "captf_drift_checks_total",
	Help: "Drift checks by kind and result (drifted, clean, failed).",
}, []string{"kind", "result"})

func init() { register(DriftChecks) }

// What finished runner Jobs did, counted once per Job by the leader when it
// sees the Job finish (package jobmetrics).
var (
	JobsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_jobs_failed_total",
		Help: "Runner Jobs that failed, by kind, operation and reason (failed: terraform or the runner failed; deadline_exceeded: killed at spec.jobs.activeDeadlineSeconds).",
	}, []string{"kind", "operation", "reason"})
	JobDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "captf_job_duration_seconds",
		Help: "Seconds a runner Job ran, from its runner's start to the Job's end, by kind, operation and result (succeeded, failed).",
		// From a no-op refresh to the default deadline of an hour.
		Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	}, []string{"kind", "operation", "result"})
	JobQueue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "captf_job_queue_seconds",
		Help:    "Seconds from a runner Job's creation to its runner's start (scheduling, image pull, quota), by kind and operation.",
		Buckets: []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	}, []string{"kind", "operation"})
	LeaseWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_lease_waits_total",
		Help: "Times a runner found its object's state lock held by another run and waited, by kind.",
	}, []string{"kind"})
	ForceUnlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_force_unlocks_total",
		Help: "State locks a runner took over from a holder that had stopped renewing them, by kind.",
	}, []string{"kind"})
	StateBackups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_state_backups_total",
		Help: "State backups runners made before changing a state, by kind.",
	}, []string{"kind"})
	StateReadErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_state_read_errors_total",
		Help: "Runs that stopped because their state could not be used, by kind and reason (StateMissing, StateOwnedByOther, StateTooLarge).",
	}, []string{"kind", "reason"})
)

// StateReadErrorReasons are the runner's reasons for a state it could not
// use (captf_state_read_errors_total).
var StateReadErrorReasons = []string{"StateMissing", "StateOwnedByOther", "StateTooLarge"}

func init() {
	register(JobsFailed, JobDuration, JobQueue, LeaseWaits, ForceUnlocks, StateBackups, StateReadErrors)
	// Counters start at zero for every kind: a rate or an alert over a
	// counter never incremented sees 0, not nothing.
	for _, kind := range []string{"TerraformCluster", "TerraformMachine", "TerraformMachinePool"} {
		for _, c := range []*prometheus.CounterVec{LeaseWaits, ForceUnlocks, StateBackups} {
			c.WithLabelValues(kind)
		}
		for _, reason := range StateReadErrorReasons {
			StateReadErrors.WithLabelValues(kind, reason)
		}
		for _, op := range []string{"apply", "destroy", "refresh", "drift"} {
			JobsFailed.WithLabelValues(kind, op, "failed")
			JobsFailed.WithLabelValues(kind, op, "deadline_exceeded")
		}
		for _, result := range []string{"drifted", "clean", "failed"} {
			DriftChecks.WithLabelValues(kind, result)
		}
		if kind != "TerraformCluster" {
			IdentityDenied.WithLabelValues(kind)
		}
	}
}

// The fair shares of the runner API's and the webhook's slots (package
// fairshare): a request that waited within its share waited for slots other
// peers held, which the shares exist to prevent; one beyond it had taken
// its share already. The runner API's refusals say whose share ran out.
var (
	SlotWaits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_slot_waits_total",
		Help: "Requests to the runner API or the webhook that waited for a slot, by server, slots (reading: bodies read or held; forwarding or deciding) and share (within: its namespace or source held fewer than its share, other peers held every slot; beyond: it held its share).",
	}, []string{"server", "slots", "share"})
	RunnerAPIRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_runner_api_refused_total",
		Help: "Runner API requests refused before they were forwarded, by namespace of the runner (empty where its token's signature did not say it) and reason: not_a_runner_token (401, no TokenReview spent: not a pod-bound ServiceAccount token with CAPTF's audience, expired, or not signed by the API server); with 429, pod_share (4 requests of its pod at once), new_tokens_source (its source address's budget of new tokens), new_tokens_namespace (its namespace's), new_tokens_shared (all namespaces').",
	}, []string{"namespace", "reason"})
	WebhookRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_webhook_refused_total",
		Help: "Admission reviews the webhook refused before deciding them, by reason: over_bounds (more references than the CRD admits: a forged review), access_review_budget (its source address asked for more access reviews than its budget).",
	}, []string{"reason"})
)

// The servers and slots of captf_slot_waits_total.
const (
	ServerRunnerAPI = "runner_api"
	ServerWebhook   = "webhook"
	SlotsReading    = "reading"
	SlotsForwarding = "forwarding"
	SlotsDeciding   = "deciding"
)

// SlotWaitCounter is what fairshare.Slots.OnWait calls for server's slots.
func SlotWaitCounter(server, slots string) func(key string, withinShare bool) {
	within, beyond := SlotWaits.WithLabelValues(server, slots, "within"), SlotWaits.WithLabelValues(server, slots, "beyond")
	return func(_ string, withinShare bool) {
		if withinShare {
			within.Inc()
		} else {
			beyond.Inc()
		}
	}
}

func init() {
	register(SlotWaits, RunnerAPIRefused, WebhookRefused)
	for _, reason := range []string{"over_bounds", "access_review_budget"} {
		WebhookRefused.WithLabelValues(reason)
	}
	for _, s := range [][2]string{{ServerRunnerAPI, SlotsReading}, {ServerRunnerAPI, SlotsForwarding}, {ServerWebhook, SlotsReading}, {ServerWebhook, SlotsDeciding}} {
		SlotWaits.WithLabelValues(s[0], s[1], "within")
		SlotWaits.WithLabelValues(s[0], s[1], "beyond")
	}
	for _, reason := range []string{"not_a_runner_token", "new_tokens_source", "new_tokens_namespace", "new_tokens_shared"} {
		RunnerAPIRefused.WithLabelValues("", reason)
	}
}

// ReconcileDurationBuckets are the buckets of both sync histograms.
var ReconcileDurationBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Reconciles per controller (controller.Loop).
var (
	ReconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "captf_reconcile_duration_seconds",
		Help:    "Seconds one sync of one object took, by controller; the count is the number of syncs.",
		Buckets: ReconcileDurationBuckets,
	}, []string{"controller"})
	ReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_reconcile_errors_total",
		Help: "Syncs that failed and were retried with backoff, by controller (update conflicts are not errors).",
	}, []string{"controller"})
)

// The same reconciles under the names controller-runtime gives them, so
// that Cluster API's dashboards and alerts read CAPTF's controllers as they
// read every other provider's.
var (
	ReconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_reconcile_total",
		Help: "Syncs by controller and result: success, or error (an update conflict included, as controller-runtime counts it).",
	}, []string{"controller", "result"})
	ReconcileTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "controller_runtime_reconcile_time_seconds",
		Help:    "Seconds one sync of one object took, by controller (as captf_reconcile_duration_seconds).",
		Buckets: ReconcileDurationBuckets,
	}, []string{"controller"})
	ReconcileErrorsCR = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "controller_runtime_reconcile_errors_total",
		Help: "Syncs that failed, by controller (as captf_reconcile_errors_total, update conflicts included).",
	}, []string{"controller"})
)

// ReconcileResults are the result label's values of
// controller_runtime_reconcile_total (CAPTF's syncs ask for no requeue).
var ReconcileResults = []string{"success", "error"}

// How a sync ended, for Reconciles.Observe.
const (
	SyncSucceeded = "success"
	SyncFailed    = "error"
	// SyncConflicted: an update conflict, synced again at once. No error
	// of CAPTF's own (captf_reconcile_errors_total), an error to
	// controller-runtime's counters, as Cluster API's dashboards expect.
	SyncConflicted = "conflict"
)

func init() {
	register(ReconcileDuration, ReconcileErrors, ReconcileTotal, ReconcileTime, ReconcileErrorsCR)
}

// Reconciles are one controller's sync series under both names, resolved
// once: a sync observes them without looking its labels up again. Making
// them starts the counters at zero (a rate over a counter never
// incremented is 0, not nothing).
type Reconciles struct {
	duration, time    prometheus.Observer
	succeeded, failed prometheus.Counter
	errors, errorsCR  prometheus.Counter
}

// ReconcilesOf resolves controller's series.
func ReconcilesOf(controller string) *Reconciles {
	return &Reconciles{
		duration:  ReconcileDuration.WithLabelValues(controller),
		time:      ReconcileTime.WithLabelValues(controller),
		succeeded: ReconcileTotal.WithLabelValues(controller, "success"),
		failed:    ReconcileTotal.WithLabelValues(controller, "error"),
		errors:    ReconcileErrors.WithLabelValues(controller),
		errorsCR:  ReconcileErrorsCR.WithLabelValues(controller),
	}
}

// Observe counts one sync under both names: its duration, and how it ended
// (SyncSucceeded, SyncFailed, SyncConflicted).
func (r *Reconciles) Observe(seconds float64, ended string) {
	r.duration.Observe(seconds)
	r.time.Observe(seconds)
	if ended == SyncSucceeded {
		r.succeeded.Inc()
		return
	}
	r.failed.Inc()
	r.errorsCR.Inc()
	if ended == SyncFailed {
		r.errors.Inc()
	}
}

// objects is the collector of what the leader's listers hold; a standby
// replica reports none of it.
var objects = &delegate{}

func init() { register(objects) }

// SetObjectsCollector makes c report, at each scrape, the series computed
// from the leader's caches (nil stops it).
func SetObjectsCollector(c prometheus.Collector) {
	objects.mu.Lock()
	defer objects.mu.Unlock()
	objects.c = c
}

// delegate is an unchecked collector whose series come from another,
// set once the controllers run.
type delegate struct {
	mu sync.Mutex
	c  prometheus.Collector
}

func (d *delegate) Describe(chan<- *prometheus.Desc) {}

func (d *delegate) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	if c != nil {
		c.Collect(ch)
	}
}
