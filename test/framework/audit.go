package framework

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditEvent is what the benchmarks read of an API server audit event.
type AuditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// AuditArgs writes policy into dir and returns the kube-apiserver flags
// that log what it selects, as JSON lines, to the returned path. The log
// is written before each request returns, so that it is complete when
// the benchmark reads it, and in one file: the API server otherwise
// rotates it at 100 MB, and a reader of the one file saw only the last
// part of a long run.
func AuditArgs(dir, policy string) (args []string, log string, err error) {
	file := filepath.Join(dir, "audit-policy.yaml")
	log = filepath.Join(dir, "audit.log")
	if err := os.WriteFile(file, []byte(policy), 0o600); err != nil {
		return nil, "", err
	}
	return []string{"--audit-policy-file=" + file, "--audit-log-path=" + log, "--audit-log-format=json", "--audit-log-mode=blocking",
		"--audit-log-maxsize=1000000"}, log, nil
}

// ReadAudit reads an audit log AuditArgs set up.
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}
