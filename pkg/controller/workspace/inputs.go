package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// MaxInputBytes keeps a run-inputs Secret clear of the 1 MiB object limit.
const MaxInputBytes = 900 << 10

// Inputs are the rendered inputs of one run.
type Inputs struct {
	Module run.Module
	// Variables is terraform.tfvars.json: CAPTF's captf_* inputs and the
	// user's variables.
	Variables []byte
	// Hash covers the module, the variables and which are sensitive: a
	// change of any applies, so the durable inputs that destroy, drift and
	// refresh runs read keep up with it.
	Hash string
	// Sensitive names the variables whose values the runner keeps out of
	// its log and reports: marked sensitive, or read from a Secret.
	Sensitive []string
	// HashOnly: these are the inputs of an earlier render, remembered by
	// their Hash alone (the rest is empty), enough to tell whether they
	// are applied; Apply renders them with render before it starts a Job.
	HashOnly bool
	render   func() (*Inputs, error)
}

// Ready reasons and event reasons of inputs that cannot be rendered.
const (
	ReasonModuleUnavailable   = "ModuleUnavailable"
	ReasonInvalidVariable     = "InvalidVariable"
	ReasonVariableUnavailable = "VariableUnavailable"
	ReasonInputsTooLarge      = "InputsTooLarge"
	// ReasonRunnerPodNotAllowed: the Job policy asks for a runner pod the
	// operator's rules refuse (Pod Security level, node placement).
	ReasonRunnerPodNotAllowed = "RunnerPodNotAllowed"
)

// InputError is a problem the user must fix (a missing Secret key, a bad
// value); it becomes a condition, not a retry storm.
type InputError struct{ Reason, Message string }

func (e *InputError) Error() string { return e.Message }

// Render resolves the module and variables of ws with CAPTF's own inputs.
// Secrets and ConfigMaps are read directly, never cached: the manager's
// memory must not grow with them.
func Render(ctx context.Context, client kubernetes.Interface, namespace string, ws infrav1.WorkspaceSpec, captf map[string]any) (*Inputs, error) {
	in := &Inputs{Module: run.Module{Source: ws.Module.Source, Version: ws.Module.Version, Inline: ws.Module.Inline}}
	if ws.Module.ConfigMap != nil {
		cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, ws.Module.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			return nil, &InputError{Reason: ReasonModuleUnavailable, Message: fmt.Sprintf("reading module ConfigMap %s: %v", ws.Module.ConfigMap.Name, err)}
		}
		in.Module.Files = maps.Clone(cm.Data)
	}
	vars := map[string]json.RawMessage{}
	for _, name := range []string{"captf_bootstrap_data", "captf_bootstrap_format"} { // from the bootstrap Secret
		if _, ok := captf[name]; ok {
			in.Sensitive = append(in.Sensitive, name)
		}
	}
	for k, v := range captf {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		vars[k] = b
	}
	for i, v := range ws.Variables {
		value, sensitive, err := variable(ctx, client, namespace, fmt.Sprintf("spec.variables[%d] (%s)", i, v.Name), v)
		if err != nil {
			return nil, err
		}
		vars[v.Name] = value
		if sensitive {
			in.Sensitive = append(in.Sensitive, v.Name)
		}
	}
	slices.Sort(in.Sensitive)
	in.Sensitive = slices.Compact(in.Sensitive)
	var err error
	// encoding/json writes map keys sorted: the same inputs hash the same.
	if in.Variables, err = json.MarshalIndent(vars, "", "  "); err != nil {
		return nil, err
	}
	if err := in.hash(); err != nil {
		return nil, err
	}
	return in, nil
}

// variable is the value of the variable v at path, as JSON, and whether
// the runner keeps it out of logs and outputs: marked sensitive, or read
// from a Secret.
func variable(ctx context.Context, client kubernetes.Interface, namespace, path string, v infrav1.Variable) (json.RawMessage, bool, error) {
	switch {
	case v.Value != nil && v.ValueFrom != nil:
		return nil, false, &InputError{Reason: ReasonInvalidVariable, Message: path + ": set value or valueFrom, not both"}
	case v.Value != nil:
		if !json.Valid(v.Value.Raw) {
			return nil, false, &InputError{Reason: ReasonInvalidVariable, Message: path + ": value is not JSON"}
		}
		return v.Value.Raw, v.Sensitive, nil
	case v.ValueFrom != nil:
		sensitive := v.Sensitive || v.ValueFrom.SecretKeyRef != nil
		raw, err := resolve(ctx, client, namespace, v.ValueFrom)
		if err != nil {
			return nil, false, &InputError{Reason: ReasonVariableUnavailable, Message: path + ": " + err.Error()}
		}
		if v.ValueFrom.Format != infrav1.ValueFormatJSON {
			s, _ := json.Marshal(string(raw))
			return s, sensitive, nil
		}
		if !json.Valid(raw) {
			return nil, false, &InputError{Reason: ReasonInvalidVariable, Message: path + ": the referenced value is not JSON (format: JSON)"}
		}
		return raw, sensitive, nil
	}
	return nil, false, &InputError{Reason: ReasonInvalidVariable, Message: path + ": set value or valueFrom"}
}

// hash sets in.Hash: of the module, the variables and which are sensitive.
// Inputs too large for a Secret are an error.
func (in *Inputs) hash() error {
	module, err := json.Marshal(in.Module)
	if err != nil {
		return err
	}
	if size := len(module) + len(in.Variables); size > MaxInputBytes {
		return &InputError{Reason: ReasonInputsTooLarge, Message: fmt.Sprintf("the rendered module and variables take %d bytes, more than the %d a Secret can safely hold", size, MaxInputBytes)}
	}
	h := sha256.New()
	h.Write(module)
	h.Write([]byte{0})
	h.Write(in.Variables)
	if len(in.Sensitive) > 0 {
		// Only when some are: hashes of inputs without any stay as they were.
		sensitive, _ := json.Marshal(in.Sensitive)
		h.Write([]byte{0})
		h.Write(sensitive)
	}
	in.Hash = hex.EncodeToString(h.Sum(nil))[:16]
	return nil
}

// SecretData is the content of the run-inputs Secret.
func (in *Inputs) SecretData() map[string][]byte {
	module, _ := json.Marshal(in.Module)
	data := map[string][]byte{run.KeyModule: module, run.KeyVariables: in.Variables}
	if len(in.Sensitive) > 0 {
		data[run.KeySensitive], _ = json.Marshal(in.Sensitive)
	}
	return data
}

// HashSecretData hashes stored inputs (a durable-inputs Secret) as Render does.
func HashSecretData(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range []string{run.KeyModule, run.KeyVariables, run.KeySensitive} { // what Render hashes
		if _, ok := data[k]; !ok {
			continue
		}
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(data[k])
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func resolve(ctx context.Context, client kubernetes.Interface, namespace string, src *infrav1.VariableSource) ([]byte, error) {
	switch {
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := client.CoreV1().Secrets(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			return nil, fmt.Errorf("Secret %s has no key %q", ref.Name, ref.Key)
		}
		return v, nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s: %w", ref.Name, err)
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return []byte(v), nil
		}
		if v, ok := cm.BinaryData[ref.Key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("ConfigMap %s has no key %q", ref.Name, ref.Key)
	}
	return nil, fmt.Errorf("valueFrom names neither a Secret nor a ConfigMap key")
}
