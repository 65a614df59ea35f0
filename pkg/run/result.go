// Package run is the contract between the manager and a runner, and does
// no I/O: what a Job tells its runner (Spec, as the container's flags and
// env), what the runner reads (the inputs Secret's keys, Module), what it
// reports (Result, Plan, Outcome*, Stage*), and how plans are hashed.
package run

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/planpolicy"
)

// Keys of a run-inputs Secret (and of the durable-inputs Secret, its copy
// after a successful apply).
const (
	// KeyModule holds the Module as JSON.
	KeyModule = "module.json"
	// KeyVariables holds the variables as terraform.tfvars.json.
	KeyVariables = "terraform.tfvars.json"
	// KeyResult is the key of a result Secret.
	KeyResult = "result.json"
)

// KeySensitive in an inputs Secret lists the variables whose values must
// never be shown: marked sensitive, or taken from a Secret.
const KeySensitive = "sensitive.json"

// Where a runner pod finds the manager's runner API and its token.
const (
	EnvRunnerAPI   = "CAPTF_RUNNER_API"
	EnvRunnerAPICA = "CAPTF_RUNNER_API_CA"
	// TokenFile is the pod's token for the runner API (a projected
	// ServiceAccount token with the CAPTF audience, renewed by the kubelet).
	TokenFile = "/var/run/secrets/captf.io/runner/token"
	// ProviderMirrorDir is where a runner pod mounts the provider mirror
	// image (--provider-mirror-image).
	ProviderMirrorDir = "/providers"
	// EnvWriteKey is the Job's write key: the runner API lets only requests
	// that carry it (HeaderWriteKey) write. The runner takes it out of its
	// environment before it runs anything, and no other process of the pod
	// (terraform, providers, the module's programs) can read it: what the
	// module's code sends with the pod's token is read only.
	EnvWriteKey    = "CAPTF_WRITE_KEY"
	HeaderWriteKey = "X-Captf-Write-Key"
)

// DefaultMaxStateBytes bounds every state, backup and rescued state read:
// uncompressed, and compressed. Far above the states Terraform writes (the
// tests store 50 MiB), far below what would kill the reader.
const DefaultMaxStateBytes = 128 << 20

// Module is what the runner installs as the root module.
type Module struct {
	Source string `json:"source,omitempty"`
	Inline string `json:"inline,omitempty"`
	// Git is a catalog version to resolve: the runner finds the commit
	// its ref names and fetches the module at that commit.
	Git *GitModule `json:"git,omitempty"`
	// Registry is a catalog version to resolve from a module registry:
	// the runner asks the registry where the version's code is.
	Registry *RegistryModule `json:"registry,omitempty"`
	// OCI is a catalog version to resolve from an OCI registry: the runner
	// finds the manifest its ref names.
	OCI *OCIModule `json:"oci,omitempty"`
	// Digest is the catalog's digest of the module: the run runs no code
	// of another.
	Digest string `json:"digest,omitempty"`
	// Credentials names the catalog entry's credentials Secret, in the
	// manager's namespace: the runner reads it through the runner API for
	// terraform init alone, and removes it before any module code runs.
	Credentials *SecretRef `json:"credentials,omitempty"`
	// Files are the module's files from a ConfigMap, by name.
	Files map[string]string `json:"files,omitempty"`
}

// Outcomes of a run.
const (
	OutcomeSucceeded = "Succeeded"
	OutcomeFailed    = "Failed"
	// OutcomeBlocked: the plan waits for an approval; nothing was applied.
	OutcomeBlocked = "Blocked"
)

// The stages of a run, in order; a Result names the one that failed.
// Applying, the stage is the operation's name (apply, destroy, refresh).
const (
	StageWorkspace     = "workspace"      // read the inputs, write the module
	StageLock          = "lock"           // take the state lock (or lose it later)
	StageState         = "state"          // claim the state, start the http backend
	StageInit          = "init"           // terraform init
	StageModule        = "module"         // the module's code waits for an approval
	StagePlan          = "plan"           // terraform plan and show
	StageGate          = "gate"           // the plan waits for an approval, or changes what spec.protect covers
	StageOutputs       = "outputs"        // reading the outputs from the state
	StageDurableInputs = "durable-inputs" // keep the inputs a destroy will use
)

// ReasonProtectedResourceChange: the plan destroys, replaces or forgets an
// address the object's spec.protect covers; no approval applies it.
const ReasonProtectedResourceChange = "ProtectedResourceChange"

// ReasonModuleAwaitingApproval: the module's code is not code an approver
// accepted for the object; the run stopped before any of it ran.
const ReasonModuleAwaitingApproval = "ModuleAwaitingApproval"

// ReasonPlanDenied: a plan policy's rule denied the plan (Plan.Verdict);
// no approval applies it.
const ReasonPlanDenied = "PlanDenied"

// ReasonCatalogDigestMismatch: a catalog module's source no longer holds
// the code the catalog resolved, and none of it ran.
const ReasonCatalogDigestMismatch = "CatalogDigestMismatch"

// ModuleCode is what a run would execute: the root module's files, the
// modules it calls and the dependency lock file, as terraform init left
// them in the working directory.
type ModuleCode struct {
	// Digest covers every file's path, mode and content.
	Digest string `json:"digest"`
	// Files are each file's path and a short hash of its content, for
	// people to see what changed.
	Files map[string]string `json:"files,omitempty"`
}

// Result is what a runner reports to the manager.
type Result struct {
	Operation infrav1.Operation `json:"operation"`
	Outcome   string            `json:"outcome"`
	// Started is when the runner started: the Job waited from its creation
	// until then (scheduling, image pull).
	Started *metav1.Time `json:"started,omitempty"`
	// Error is an excerpt of what failed (terraform's own message).
	Error string `json:"error,omitempty"`
	// Stage is the step that failed (Stage*, or the operation's name while
	// it applies), or "gate" when the plan waits for an approval.
	Stage string `json:"stage,omitempty"`
	Plan  *Plan  `json:"plan,omitempty"`
	// Module is the code the run found once terraform init had run.
	Module *ModuleCode `json:"module,omitempty"`
	// Resolved is a resolve run's finding.
	Resolved *Resolved `json:"resolved,omitempty"`
	// Record names the run record the runner wrote, and its RecordDigest.
	Record       string `json:"record,omitempty"`
	RecordDigest string `json:"recordDigest,omitempty"`
	// Outputs of the module after the run, sensitive ones included: the
	// result Secret is a Secret; the manager shows only non-sensitive ones.
	Outputs       map[string]Output `json:"outputs,omitempty"`
	LockWaits     int               `json:"lockWaits,omitempty"`
	ForceUnlocked bool              `json:"forceUnlocked,omitempty"`
	StateBytes    int               `json:"stateBytes,omitempty"`
	BackupsMade   int               `json:"backupsMade,omitempty"`
	Interrupted   bool              `json:"interrupted,omitempty"`
	// Reason names a failure that is about the state, not terraform:
	// StateMissing, StateOwnedByOther, StateTooLarge, LockLost,
	// ProtectedResourceChange.
	Reason string `json:"reason,omitempty"`
	// RescuedState names the backup holding the state terraform could not
	// save (its errored.tfstate).
	RescuedState string `json:"rescuedState,omitempty"`
}

// RegistryModule is a version of a module registry's module.
type RegistryModule struct {
	// Address is HOST/NAMESPACE/NAME/SYSTEM.
	Address string `json:"address"`
	Version string `json:"version"`
}

// SecretRef names a Secret.
type SecretRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// GitModule is a module of a git repository at a ref.
// OCIModule is a repository (HOST/PATH) of an OCI registry and a tag or
// manifest digest in it.
type OCIModule struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
}

type GitModule struct {
	URL  string `json:"url"`
	Path string `json:"path,omitempty"`
	Ref  string `json:"ref"`
}

// Resolved is what a resolve run learned of a catalog version.
type Resolved struct {
	// Source is the address runs fetch: at the commit, for git.
	Source    string                   `json:"source"`
	Commit    string                   `json:"commit,omitempty"`
	Variables []infrav1.ModuleVariable `json:"variables,omitempty"`
	Outputs   []infrav1.ModuleOutput   `json:"outputs,omitempty"`
}

// PlanHash is the hash of res's plan, "" without one.
func (res *Result) PlanHash() string {
	if res.Plan == nil {
		return ""
	}
	return res.Plan.Hash
}

// ModuleDigest is the digest of the code res ran, "" when unknown.
func (res *Result) ModuleDigest() string {
	if res.Module == nil {
		return ""
	}
	return res.Module.Digest
}

// Output is one module output.
type Output struct {
	Sensitive bool            `json:"sensitive,omitempty"`
	Value     json.RawMessage `json:"value"`
}

// Plan is a plan's hash and summary.
type Plan struct {
	Hash    string              `json:"hash"`
	Summary infrav1.PlanSummary `json:"summary"`
	// OutputChanges names the outputs whose values would change.
	OutputChanges []string `json:"outputChanges,omitempty"`
	// Protected names the addresses the plan destroys, replaces or forgets
	// that the object's spec.protect covered when it was made (at most 20).
	Protected []string `json:"protected,omitempty"`
	// Verdict is what the plan policy rules that select the object said of
	// the plan (an apply's), nil when no rule selects it.
	Verdict *planpolicy.Verdict `json:"verdict,omitempty"`
}

// Denied tells whether a plan policy denied the plan.
func (p *Plan) Denied() bool {
	return p != nil && p.Verdict != nil && p.Verdict.Action == infrav1.PlanActionDeny
}

// ResultData is the data of the result Secret that reports res.
func ResultData(res *Result) (map[string][]byte, error) {
	b, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{KeyResult: b}, nil
}

// ResultOf reads the result a result Secret's data reports.
func ResultOf(data map[string][]byte) (*Result, error) {
	var res Result
	if err := json.Unmarshal(data[KeyResult], &res); err != nil {
		return nil, fmt.Errorf("reading %s: %w", KeyResult, err)
	}
	return &res, nil
}
