// Package metrics holds CAPTF's private Prometheus registry. Importing it
// wires client-go's workqueue and leader-election metrics into the registry,
// before any queue exists.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/util/workqueue"
)

// Registry is the manager's registry: nothing registers globally.
var Registry = prometheus.NewRegistry()

func init() {
	Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	workqueue.SetProvider(workqueueProvider{})
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
	Registry.MustRegister(queueDepth, queueAdds, queueLat, queueWork, queueUnfinished, queueLongest, queueRetries, leader, leaderSlowpath)
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

type leaderProvider struct{}

func (leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetric{} }

type leaderMetric struct{}

func (leaderMetric) On(name string)  { leader.WithLabelValues(name).Set(1) }
func (leaderMetric) Off(name string) { leader.WithLabelValues(name).Set(0) }

func (leaderMetric) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }

// IdentityDenied counts writes of spec.providerID (machines) or
// spec.providerIDList (pools) the webhook refused because another user than
// the manager made them.
var IdentityDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "captf_identity_denied_total",
	Help: "Writes of a provider ID by another user than the manager, refused by the webhook.",
}, []string{"kind"})

func init() { Registry.MustRegister(IdentityDenied) }

// Drift: checks by outcome, and per object whether the last check found
// drift and when it ran.
var (
	DriftChecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "captf_drift_checks_total",
		Help: "Drift checks by kind and result (drifted, clean, failed).",
	}, []string{"kind", "result"})
	Drifted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "captf_drifted",
		Help: "1 when the object's last drift check found its infrastructure changed outside CAPTF.",
	}, []string{"kind", "namespace", "name"})
	LastDriftCheck = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "captf_last_drift_check_timestamp_seconds",
		Help: "When the object's last drift check finished.",
	}, []string{"kind", "namespace", "name"})
)

func init() { Registry.MustRegister(DriftChecks, Drifted, LastDriftCheck) }

// StateMissing is 1 while an applied object's state Secret is missing: CAPTF
// runs nothing for it until a backup is restored (an input of
// CAPTFStateUnreadable).
var StateMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "captf_state_missing",
	Help: "1 while an applied object's state Secret is missing and nothing runs for it.",
}, []string{"kind", "namespace", "name"})

func init() { Registry.MustRegister(StateMissing) }
