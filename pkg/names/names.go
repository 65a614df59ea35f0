// Package names is the one place that names every Secret, Lease and Job CAPTF
// creates, and the labels that find them again.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Labels on everything CAPTF creates.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by=captf.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "captf"
	// LabelObjectUID is the UID of the Terraform* object a child belongs to.
	LabelObjectUID = "captf.io/object-uid"
	// LabelObjectName is the name of that object (hashed when too long).
	LabelObjectName = "captf.io/object-name"
	// LabelKind is the short kind of that object: tfc, tfm or tfmp.
	LabelKind = "captf.io/kind"
	// LabelOperation is the operation of a Job or run Secret.
	LabelOperation = "captf.io/operation"
	// LabelInputsHash is the inputs hash of a Job or run Secret.
	LabelInputsHash = "captf.io/inputs-hash"
	// LabelAttempt numbers the Jobs of one operation and inputs hash.
	LabelAttempt = "captf.io/attempt"
	// LabelApprovedPlan on an apply Job is the plan hash an approval let it
	// apply.
	LabelApprovedPlan = "captf.io/approved-plan"
	// LabelSecretType says what a Secret holds: see the SecretType* values.
	LabelSecretType = "captf.io/secret-type"
	// LabelAbandoned marks state and backups left behind on purpose by
	// captf.io/abandon-infrastructure.
	LabelAbandoned = "captf.io/abandoned"
)

// Values of LabelSecretType.
const (
	SecretTypeState        = "state"
	SecretTypeStateChunk   = "state-chunk"
	SecretTypeBackup       = "backup"
	SecretTypeBackupChunk  = "backup-chunk"
	SecretTypeRunInputs    = "run-inputs"
	SecretTypeDurableInput = "durable-inputs"
	SecretTypeResult       = "result"
)

// RunnerServiceAccount is the ServiceAccount (and RoleBinding) the manager
// keeps in each namespace it runs Jobs in.
const RunnerServiceAccount = "captf-runner"

// RunnerClusterRole is the ClusterRole that RoleBinding binds.
const RunnerClusterRole = "captf-runner"

// Object identifies one Terraform* object for naming.
type Object struct {
	Kind string // short kind: tfc, tfm, tfmp
	Name string
}

// maxName leaves room for the longest suffix below inside the 63 characters
// a Job name (and so a pod label) may have.
const maxName = 30

// Prefix is "<kind>-<name>", the name shortened with a hash when too long.
func (o Object) Prefix() string {
	// Dots are replaced (Job names end up in DNS labels) and the original
	// name's hash keeps "a.b" and "a-b" apart.
	name := strings.ReplaceAll(o.Name, ".", "-")
	if name != o.Name || len(name) > maxName {
		name = strings.TrimRight(name[:min(len(name), maxName-6)], "-") + "-" + shortHash(o.Name, 5)
	}
	return o.Kind + "-" + name
}

// Job is the Job of one attempt of an operation for one inputs hash. The name
// is deterministic so a restarted manager finds it instead of making another.
func (o Object) Job(op, inputsHash string, attempt int) string {
	return fmt.Sprintf("%s-%s-%s-%d", o.Prefix(), op, inputsHash[:min(10, len(inputsHash))], attempt)
}

// RunInputs is the Secret with the rendered inputs of one Job: the Job's name.
func (o Object) RunInputs(job string) string { return job }

// Result is the Secret the runner of a Job writes its result to.
func (o Object) Result(job string) string { return job + "-result" }

// State is the Secret that holds the object's current state (or, for a big
// state, the index of its chunks).
func (o Object) State() string { return o.Prefix() + "-state" }

// StateChunk is chunk i of generation gen of a big state.
func (o Object) StateChunk(gen int64, i int) string {
	return fmt.Sprintf("%s-state-%d-%d", o.Prefix(), gen, i)
}

// Backup is a state backup; stamp orders backups (UTC, lower case, e.g.
// 20261129-220000).
func (o Object) Backup(stamp string) string { return o.Prefix() + "-backup-" + stamp }

// BackupChunk is chunk i of a big backup.
func (o Object) BackupChunk(backup string, i int) string { return fmt.Sprintf("%s-%d", backup, i) }

// DurableInputs is the Secret with the inputs of the last successful apply.
func (o Object) DurableInputs() string { return o.Prefix() + "-inputs" }

// Lock is the Lease that locks the object's state.
func (o Object) Lock() string { return o.Prefix() + "-lock" }

// LabelValue shortens a value to fit a label.
func LabelValue(v string) string {
	if len(v) <= 63 {
		return v
	}
	return strings.TrimRight(v[:56], "-._") + "-" + shortHash(v, 6)
}

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}
