package run

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Keys of a run record, the ConfigMap that keeps what a run planned and
// logged (names.Object.RunRecord). Every value is redacted as the pod's
// log is: no sensitive input, no value terraform marks sensitive.
const (
	// KeyRun holds a Record as JSON.
	KeyRun = "run.json"
	// KeyPlanText holds the plan as terraform rendered it.
	KeyPlanText = "plan.txt"
	// KeyPlanJSON (binary data) holds the plan's JSON representation
	// (terraform show -json), gzipped: resource changes, drift, output
	// changes and planned values, each sensitive value replaced.
	KeyPlanJSON = "plan.json.gz"
	// KeyLog holds the tail of terraform's output in the run.
	KeyLog = "log.txt"
)

// Bounds of a record: a ConfigMap holds at most 1 MiB.
const (
	MaxPlanText     = 256 << 10
	MaxPlanJSONGzip = 512 << 10
	MaxLogTail      = 64 << 10
)

// Record is what a run record says of its run.
type Record struct {
	Job       string            `json:"job"`
	Operation infrav1.Operation `json:"operation"`
	Outcome   string            `json:"outcome"`
	Started   *metav1.Time      `json:"started,omitempty"`
	Finished  *metav1.Time      `json:"finished,omitempty"`
	Stage     string            `json:"stage,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Error     string            `json:"error,omitempty"`
	Plan      *Plan             `json:"plan,omitempty"`
	Module    *ModuleCode       `json:"module,omitempty"`
	// Cut names what was cut to fit: the plan's text, its JSON (left out
	// whole), the log (its start).
	Cut []string `json:"cut,omitempty"`
}
