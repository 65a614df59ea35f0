package run

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

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

// RecordDigest is the digest of a run record's data: the manager keeps it
// in the object's status (JobReference.RecordDigest), where no one but the
// manager writes, and kubectl captf shows a record only while its data
// still hashes to it: anyone who may write ConfigMaps can make one that
// looks like a record.
func RecordDigest(data map[string]string, binary map[string][]byte) string {
	h := sha256.New()
	keys := make([]string, 0, len(data)+len(binary))
	for k := range data {
		keys = append(keys, "d/"+k)
	}
	for k := range binary {
		keys = append(keys, "b/"+k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var v []byte
		if k[0] == 'd' {
			v = []byte(data[k[2:]])
		} else {
			v = binary[k[2:]]
		}
		fmt.Fprintf(h, "%q %d\n", k, len(v))
		h.Write(v)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
