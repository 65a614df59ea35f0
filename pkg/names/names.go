// Package names is the one place that names every Secret, Lease and Job CAPTF
// creates, and the labels that find them again.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/captf/captf/pkg/capi"
)

// Labels on everything CAPTF creates.
const (
	// LabelManagedBy is app.kubernetes.io/managed-by=captf.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "captf"
	// LabelObjectUID is the UID of the Terraform* object a child was made
	// for (the last owner: a restore or a move gives the object a new UID).
	LabelObjectUID = "captf.io/object-uid"
	// LabelObjectName is the name of that object (hashed when too long for
	// a label; AnnotationObjectName holds it in full).
	LabelObjectName = "captf.io/object-name"
	// LabelKind is the short kind of that object: tfc, tfm, tfmp, or
	// tfmod (a catalog entry's resolve Jobs).
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
	// LabelRunRecord marks a run record (RunRecord): "true".
	LabelRunRecord = "captf.io/run-record"
	// LabelOutcome is the outcome of the run a record keeps.
	LabelOutcome = "captf.io/outcome"
	// LabelProtect on an apply or destroy Job is ProtectHash of the
	// spec.protect it was made with.
	LabelProtect = "captf.io/protect"
)

// RecordLabels select the run records of o by its kind and name, as state
// Secrets are: a moved object (clusterctl move) has a new UID, and its
// records their owner reference to it.
func RecordLabels(o Object) map[string]string {
	return map[string]string{LabelManagedBy: ManagedByValue, LabelRunRecord: "true", LabelKind: o.Kind, LabelObjectName: LabelValue(o.Name)}
}

// OwnedBy tells whether meta's owner references name uid: a record of the
// object, not a look-alike another object's runner or a user made.
func OwnedBy(meta metav1.Object, uid types.UID) bool {
	for _, ref := range meta.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// ProtectHash names a list of spec.protect patterns in a label value.
func ProtectHash(patterns []string) string {
	if len(patterns) == 0 {
		return ""
	}
	return hash(strings.Join(patterns, "\x00"), 16)
}

// LabelClusterctlMove makes clusterctl move copy a Secret that no object
// owns: state, backups and durable inputs.
const LabelClusterctlMove = capi.MoveLabel

// AnnotationObjectName on a state, backup or durable-inputs Secret is the
// full name of the object it belongs to: a state is never read or written
// for another object.
const AnnotationObjectName = "captf.io/object-name"

// AnnotationProtection on a state head is the approval policy and
// spec.protect the state was kept under, and the UID of the object they
// were the spec of (JSON): the manager writes it, runners may not change it.
const AnnotationProtection = "captf.io/protection"

// StateFinalizer keeps state, its chunks, backups and durable inputs until
// CAPTF lets them go: after a successful destroy, or an abandon. A foreground
// or namespace delete can therefore never take the state before the
// infrastructure it describes.
const StateFinalizer = "captf.io/state-protection"

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

// RunnerServiceAccount is the ServiceAccount the manager keeps in each
// namespace it runs Jobs in: an identity with no rights of its own.
const RunnerServiceAccount = "captf-runner"

// RunnerRoleBinding is the RoleBinding that gave RunnerServiceAccount
// Secret rights before runners reached their state through the manager:
// the manager deletes it where it finds it.
const RunnerRoleBinding = "captf-runner"

// RunnerTokenAudience is the audience of the token runner pods present to
// the manager's runner API: no API server accepts it.
const RunnerTokenAudience = "captf.io/runner"

// RunnerAPIService is the Service of the manager's runner API.
const RunnerAPIService = "captf-runner-api"

// MetricsService is the Service of the manager's metrics endpoint.
const MetricsService = "captf-metrics"

// AnnotationInputsBytes on a runner Job is the size of the inputs rendered
// for it (captf_inputs_bytes): a Secret holds at most 1 MiB.
const AnnotationInputsBytes = "captf.io/inputs-bytes"

// Object identifies one Terraform* object for naming.
type Object struct {
	Kind string // short kind: tfc, tfm, tfmp
	Name string
}

// maxBase is the longest base of a Secret or Lease name: it leaves room in
// the 253 characters of a name for the longest suffix below (a state chunk:
// "-state-" + 19 digits + "-" + index). A base is "<kind>-<name>" in full up
// to maxBase-1 characters; longer ones are cut and end in a 64-bit hash,
// exactly maxBase characters long, so no literal name can spell one.
const maxBase = 213

// base is the start of every Secret and Lease name of the object.
func (o Object) base() string {
	b := o.Kind + "-" + o.Name
	if len(b) < maxBase {
		return b
	}
	return b[:maxBase-17] + "-" + hash(o.Kind+"/"+o.Name, 16)
}

// maxJobName is the room for the object's name in a Job name: the Job name
// must fit 63 characters (it is a label value on its pods) with the longest
// kind ("tfmp-") and suffix ("-destroy-" + 16 hex + "-" + 4 digits).
const maxJobName = 63 - 5 - 30

// Job is the Job of one attempt of an operation for one inputs hash. The name
// is deterministic so a restarted manager finds it instead of making another.
// The object's name in it is only for people to read: the hash covers the
// object's kind, full name and UID, the operation and the inputs, so the
// Jobs of two objects never share a name, whatever their names.
func (o Object) Job(uid, op, inputsHash string, attempt int) string {
	name := strings.ReplaceAll(o.Name, ".", "-")         // Jobs' names end up in DNS labels
	room := maxJobName - max(0, len(o.Kind)-len("tfmp")) // tfmod
	name = strings.TrimRight(name[:min(len(name), room)], "-")
	return fmt.Sprintf("%s-%s-%s-%s-%d", o.Kind, name, op, hash(strings.Join([]string{o.Kind, o.Name, uid, op, inputsHash}, "/"), 16), attempt)
}

// RunInputs is the Secret with the rendered inputs of one Job: the Job's name.
func (o Object) RunInputs(job string) string { return job }

// Result is the Secret the runner of a Job writes its result to.
func (o Object) Result(job string) string { return job + "-result" }

// RunRecord is the ConfigMap that keeps what the run of a Job's pod
// planned and logged, redacted, after the Job and its pod are gone. The
// pod's UID is in it: a Job made again under the same name (the first one
// deleted) keeps a record of its own.
func (o Object) RunRecord(job string, pod types.UID) string {
	return job + "-run-" + hash(string(pod), 8)
}

// State is the Secret that holds the object's current state (or, for a big
// state, the index of its chunks).
func (o Object) State() string { return o.base() + "-state" }

// StateChunk is chunk i of generation gen of a big state.
func (o Object) StateChunk(gen int64, i int) string {
	return fmt.Sprintf("%s-state-%d-%d", o.base(), gen, i)
}

// Backup is a state backup; stamp orders backups (UTC, lower case, e.g.
// 20261129-220000).
func (o Object) Backup(stamp string) string { return o.base() + "-backup-" + stamp }

// Rescue is a backup holding the state terraform could not save
// (errored.tfstate): restorable like any backup.
func (o Object) Rescue(stamp string) string { return o.base() + "-errored-" + stamp }

// BackupChunk is chunk i of a big backup.
func (o Object) BackupChunk(backup string, i int) string { return fmt.Sprintf("%s-%d", backup, i) }

// DurableInputs is the Secret with the inputs of the last successful apply.
func (o Object) DurableInputs() string { return o.base() + "-inputs" }

// LeaderLease is the Lease the manager's replicas elect their leader with,
// in the manager's namespace: one per --watch-filter value, so that the
// managers of two shards of a fleet lead at once, each its own objects.
func LeaderLease(watchFilter string) string {
	const base = "captf-manager"
	if watchFilter == "" {
		return base
	}
	if len(validation.IsDNS1123Label(watchFilter)) == 0 {
		return base + "-" + watchFilter
	}
	// A label value may hold capitals, '_' and '.': no Lease name.
	sum := sha256.Sum256([]byte(watchFilter))
	return base + "-" + hex.EncodeToString(sum[:8])
}

// Lock is the Lease that locks the object's state.
func (o Object) Lock() string { return o.base() + "-lock" }

// stateFamily is what follows an object's base in the names of its state,
// state chunks, backups (and rescued states), their chunks and durable
// inputs. Only digits follow the words, so no name of one object's family
// is a name of another object's (whose base would have to end in one of
// these words followed by digits, which every suffix here starts after).
var stateFamily = regexp.MustCompile(`^-(state(-[0-9]+-[0-9]+)?|(backup|errored)-[0-9]{8}-[0-9]{6}(-[0-9]+){0,2}|inputs)$`)

// HoldsState reports whether name is one of the object's state, state
// chunk, backup, backup chunk or durable-inputs Secrets.
func (o Object) HoldsState(name string) bool {
	rest, ok := strings.CutPrefix(name, o.base())
	return ok && stateFamily.MatchString(rest)
}

// FamilyTypes are the values of LabelSecretType a Secret of the object's
// state family may carry under name (a backup named apart from another of
// the same second, "<backup>-1", reads like chunk 1 of "<backup>"); nil
// when name is not of the family.
func (o Object) FamilyTypes(name string) []string {
	rest, ok := strings.CutPrefix(name, o.base())
	if !ok || !stateFamily.MatchString(rest) {
		return nil
	}
	switch {
	case rest == "-state":
		return []string{SecretTypeState}
	case rest == "-inputs":
		return []string{SecretTypeDurableInput}
	case strings.HasPrefix(rest, "-state-"):
		return []string{SecretTypeStateChunk}
	}
	switch strings.Count(rest, "-") { // -backup-<date>-<time>[-n][-i]
	case 3:
		return []string{SecretTypeBackup}
	case 4:
		return []string{SecretTypeBackup, SecretTypeBackupChunk}
	default:
		return []string{SecretTypeBackupChunk}
	}
}

// IsRescue tells whether name is, in the object's family, a rescued state
// (Rescue) or one of its chunks.
func (o Object) IsRescue(name string) bool {
	return strings.HasPrefix(name, o.base()+"-errored-") && o.HoldsState(name)
}

// LabelValue fits a value into a label: in full when shorter than 63
// characters, else cut and ending in a 64-bit hash (exactly 63 characters).
func LabelValue(v string) string {
	if len(v) < 63 {
		return v
	}
	return v[:46] + "-" + hash(v, 16)
}

func hash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// ShortKind is the short name of a kind in names and labels.
func ShortKind(kind string) string {
	switch kind {
	case "TerraformCluster":
		return "tfc"
	case "TerraformMachine":
		return "tfm"
	case "TerraformMachinePool":
		return "tfmp"
	case "TerraformModule":
		return "tfmod"
	}
	return strings.ToLower(kind)
}

// ObjectOf names what CAPTF makes for the object of kind (long) and name.
func ObjectOf(kind, name string) Object { return Object{Kind: ShortKind(kind), Name: name} }

// ObjectLabels are the labels of everything CAPTF creates for one object.
func ObjectLabels(kind, name string, uid types.UID) map[string]string {
	return map[string]string{
		LabelManagedBy:  ManagedByValue,
		LabelKind:       ShortKind(kind),
		LabelObjectName: LabelValue(name),
		LabelObjectUID:  string(uid),
	}
}
