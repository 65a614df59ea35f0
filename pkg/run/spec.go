package run

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/planpolicy"
)

// Spec is what a Job tells its runner, as the container's flags: Args
// writes them for the manager's runnerjob.Build, AddFlags and Complete read them
// in `captf runner`. One list, so the two cannot drift apart.
type Spec struct {
	Namespace string
	// The Terraform* object: kind (long), name, UID, API version.
	ObjectKind, ObjectName, ObjectAPIVersion string
	ObjectUID                                types.UID
	Operation                                infrav1.Operation
	// Job is the Job's name: it names the run-inputs and result Secrets.
	Job string
	// Terraform is the binary: terraform or tofu ("": whichever is on PATH).
	Terraform    string
	WorkDir      string
	StateBackups int
	LockTimeout  time.Duration
	// UseDurableInputs runs with the inputs of the last successful apply
	// (destroy) instead of the run's own.
	UseDurableInputs bool
	// ExpectState: the object was applied, so a missing state is an error,
	// never an empty state to plan against.
	ExpectState bool
	// MaxStateBytes bounds state reads (DefaultMaxStateBytes).
	MaxStateBytes int64
	// ProviderMirror is a directory holding a filesystem mirror of
	// providers (terraform providers mirror): init installs the providers
	// found there from it, and only others from their registries.
	ProviderMirror string
	// Gate is the approval policy of an apply ("" applies every plan);
	// ApprovedPlan and ApprovedDestructivePlan are the hashes the object's
	// approval annotations name.
	Gate                                  infrav1.ApprovalPolicy
	ApprovedPlan, ApprovedDestructivePlan string
	// ApprovedModules are the digests of the module code the run may run
	// (ModuleCode.Digest); empty: any. Other code stops the run before
	// terraform plans, and no module code has run.
	ApprovedModules []string
	// Protect is the object's spec.protect: a plan that destroys, replaces
	// or forgets an address it covers fails, whatever the approvals.
	Protect []string
	// PlanPolicy is the plan policy rules that select the object, and what
	// they read of it: an apply judges its plan by them before the gate.
	PlanPolicy *planpolicy.Input
	// SensitiveEnv names the runner's environment variables that come from
	// Secrets (env[].valueFrom.secretKeyRef), and "P*" for an envFrom of a
	// Secret with prefix P; PlainEnv the env entries that override those.
	// Their values are redacted like sensitive variables.
	SensitiveEnv, PlainEnv []string
}

// flag is one of the runner's flags: its name, and where it lives in a
// Spec as a flag.Value.
type specFlag struct {
	name, usage string
	value       func(s *Spec) flag.Value
	// set tells whether s holds a value Args must write.
	set func(s *Spec) bool
}

var specFlags = []specFlag{
	{"namespace", "namespace of the object", func(s *Spec) flag.Value { return (*stringValue)(&s.Namespace) }, func(s *Spec) bool { return s.Namespace != "" }},
	{"object-kind", "kind of the object", func(s *Spec) flag.Value { return (*stringValue)(&s.ObjectKind) }, func(s *Spec) bool { return s.ObjectKind != "" }},
	{"object-name", "name of the object", func(s *Spec) flag.Value { return (*stringValue)(&s.ObjectName) }, func(s *Spec) bool { return s.ObjectName != "" }},
	{"object-uid", "UID of the object", func(s *Spec) flag.Value { return (*typedValue[types.UID])(&s.ObjectUID) }, func(s *Spec) bool { return s.ObjectUID != "" }},
	{"object-api-version", "API version of the object", func(s *Spec) flag.Value { return (*stringValue)(&s.ObjectAPIVersion) }, func(s *Spec) bool { return s.ObjectAPIVersion != "" }},
	{"operation", "apply, destroy, drift, refresh, or resolve (a catalog version)", func(s *Spec) flag.Value { return (*typedValue[infrav1.Operation])(&s.Operation) }, func(s *Spec) bool { return s.Operation != "" }},
	{"job", "name of this Job", func(s *Spec) flag.Value { return (*stringValue)(&s.Job) }, func(s *Spec) bool { return s.Job != "" }},
	{"terraform", "terraform or tofu binary (default: $CAPTF_TERRAFORM, else terraform, else tofu, on PATH)", func(s *Spec) flag.Value { return (*stringValue)(&s.Terraform) }, func(s *Spec) bool { return s.Terraform != "" }},
	{"workdir", "working directory (default: the current directory)", func(s *Spec) flag.Value { return (*stringValue)(&s.WorkDir) }, func(s *Spec) bool { return s.WorkDir != "" }},
	{"state-backups", "state backups to keep", func(s *Spec) flag.Value { return (*intValue)(&s.StateBackups) }, func(*Spec) bool { return true }},
	{"lock-timeout", "how long to wait for the state lock", func(s *Spec) flag.Value { return (*durationValue)(&s.LockTimeout) }, func(*Spec) bool { return true }},
	{"durable-inputs", "use the inputs of the last successful apply", func(s *Spec) flag.Value { return (*boolValue)(&s.UseDurableInputs) }, func(s *Spec) bool { return s.UseDurableInputs }},
	{"expect-state", "the object was applied: refuse to run when its state is missing", func(s *Spec) flag.Value { return (*boolValue)(&s.ExpectState) }, func(s *Spec) bool { return s.ExpectState }},
	{"max-state-bytes", "largest state (and backup) read, uncompressed and compressed", func(s *Spec) flag.Value { return (*int64Value)(&s.MaxStateBytes) }, func(s *Spec) bool { return s.MaxStateBytes > 0 }},
	{"provider-mirror", "directory of a provider mirror (terraform providers mirror) init installs from", func(s *Spec) flag.Value { return (*stringValue)(&s.ProviderMirror) }, func(s *Spec) bool { return s.ProviderMirror != "" }},
	{"gate", "approval policy of an apply: Destructive or Manual (default: apply every plan)", func(s *Spec) flag.Value { return (*typedValue[infrav1.ApprovalPolicy])(&s.Gate) }, func(s *Spec) bool { return s.Gate != "" }},
	{"approved-plan", "plan hash captf.io/approve-plan names", func(s *Spec) flag.Value { return (*stringValue)(&s.ApprovedPlan) }, func(s *Spec) bool { return s.ApprovedPlan != "" }},
	{"approved-destructive-plan", "plan hash captf.io/approve-destructive-plan names", func(s *Spec) flag.Value { return (*stringValue)(&s.ApprovedDestructivePlan) }, func(s *Spec) bool { return s.ApprovedDestructivePlan != "" }},
	{"approved-modules", "digests of the module code this run may run, as a JSON list (default: any)", func(s *Spec) flag.Value { return (*jsonList)(&s.ApprovedModules) }, func(s *Spec) bool { return len(s.ApprovedModules) > 0 }},
	{"protect", "resource address patterns no plan may destroy, replace or forget, as a JSON list (spec.protect)", func(s *Spec) flag.Value { return (*jsonList)(&s.Protect) }, func(s *Spec) bool { return len(s.Protect) > 0 }},
	{"plan-policy", "the plan policy rules of an apply and the object they read, as JSON", func(s *Spec) flag.Value { return &jsonValue[planpolicy.Input]{&s.PlanPolicy} }, func(s *Spec) bool { return s.PlanPolicy != nil }},
	{"sensitive-env", "environment variables from Secrets, and P* for an envFrom of one, as a JSON list: their values are redacted", func(s *Spec) flag.Value { return (*jsonList)(&s.SensitiveEnv) }, func(s *Spec) bool { return len(s.SensitiveEnv) > 0 }},
	{"plain-env", "environment variables set by the pod's env, which an envFrom does not override, as a JSON list", func(s *Spec) flag.Value { return (*jsonList)(&s.PlainEnv) }, func(s *Spec) bool { return len(s.PlainEnv) > 0 }},
}

// Args are the flags that tell a runner s, in a fixed order.
func (s Spec) Args() []string {
	var args []string
	for _, f := range specFlags {
		if !f.set(&s) {
			continue
		}
		v := f.value(&s)
		if b, ok := v.(*boolValue); ok && bool(*b) {
			args = append(args, "--"+f.name)
			continue
		}
		args = append(args, "--"+f.name+"="+v.String())
	}
	return args
}

// AddFlags binds s to fs, with the runner's defaults.
func (s *Spec) AddFlags(fs *flag.FlagSet) {
	*s = Spec{Namespace: os.Getenv("POD_NAMESPACE"), Terraform: os.Getenv("CAPTF_TERRAFORM"),
		ObjectAPIVersion: infrav1.SchemeGroupVersion.String(), StateBackups: 5, LockTimeout: 5 * time.Minute,
		MaxStateBytes: DefaultMaxStateBytes}
	for _, f := range specFlags {
		fs.Var(f.value(s), f.name, f.usage)
	}
}

// Complete checks a parsed Spec.
func (s *Spec) Complete() error {
	switch s.Gate {
	case "", infrav1.ApprovalPolicyDestructive, infrav1.ApprovalPolicyManual:
	default:
		return fmt.Errorf("--gate=%s: want Destructive or Manual", s.Gate)
	}
	if s.Namespace == "" || s.ObjectKind == "" || s.ObjectName == "" || s.ObjectUID == "" || s.Operation == "" || s.Job == "" {
		return errors.New("--namespace, --object-kind, --object-name, --object-uid, --operation and --job are required")
	}
	return nil
}

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

type typedValue[T ~string] string

func (v *typedValue[T]) String() string     { return string(*v) }
func (v *typedValue[T]) Set(s string) error { *v = typedValue[T](s); return nil }

type boolValue bool

func (v *boolValue) String() string { return strconv.FormatBool(bool(*v)) }
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	*v = boolValue(b)
	return err
}
func (v *boolValue) IsBoolFlag() bool { return true }

type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	*v = intValue(n)
	return err
}

type int64Value int64

func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	*v = int64Value(n)
	return err
}

// jsonList is a list of strings as a JSON array: a pattern may hold any
// character, a comma included.
type jsonList []string

func (v *jsonList) String() string {
	b, _ := json.Marshal([]string(*v))
	return string(b)
}
func (v *jsonList) Set(s string) error { return json.Unmarshal([]byte(s), (*[]string)(v)) }

// jsonValue is a *T as JSON.
type jsonValue[T any] struct{ p **T }

func (v *jsonValue[T]) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	b, _ := json.Marshal(*v.p)
	return string(b)
}
func (v *jsonValue[T]) Set(s string) error {
	*v.p = new(T)
	return json.Unmarshal([]byte(s), *v.p)
}

type durationValue time.Duration

func (v *durationValue) String() string { return time.Duration(*v).String() }
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	*v = durationValue(d)
	return err
}
