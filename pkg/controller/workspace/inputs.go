package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
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
func Render(ctx context.Context, client kubernetes.Interface, catalog *Catalog, namespace string, ws infrav1.WorkspaceSpec, captf map[string]any) (*Inputs, error) {
	in := &Inputs{Module: run.Module{Source: ws.Module.Source, Inline: ws.Module.Inline}}
	if ref := ws.Module.CatalogRef; ref != nil {
		m, declared, err := catalog.module(ctx, client, namespace, ref)
		if err != nil {
			return nil, err
		}
		in.Module, captf = m, onlyDeclared(captf, declared)
	}
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

// currentInputs are the object's inputs as far as Apply needs them to
// tell whether they are applied: the hash of the last render while nothing
// it was rendered from changed but what Secrets and ConfigMaps hold
// (renderedInputs), else a render.
func (c *Controller[T]) currentInputs(ctx context.Context, s *Sync) (*Inputs, error) {
	inputs, from, err := c.renderedFrom(s)
	if err != nil {
		return nil, err
	}
	if hash, ok := c.rendered.lookup(cache.MetaObjectToName(s.Obj), from); ok {
		return &Inputs{Hash: hash, HashOnly: true, render: func() (*Inputs, error) { return c.render(ctx, s) }}, nil
	}
	return c.renderOf(ctx, s, inputs, from)
}

// renderedFrom is CAPTF's inputs of the object short of the bootstrap data
// (docs/inputs.md: its own, the kind's and the cluster's exports), and the
// digest renderedInputs tells renders apart by.
func (c *Controller[T]) renderedFrom(s *Sync) (map[string]any, [sha256.Size]byte, error) {
	obj := s.Obj
	inputs := map[string]any{
		"captf_cluster_name": obj.GetLabels()[capi.ClusterNameLabel],
		"captf_namespace":    obj.GetNamespace(),
		"captf_name":         obj.GetName(),
		"captf_kind":         c.kind.GVK.Kind,
	}
	if s.Cluster != nil {
		inputs["captf_cluster_name"] = s.Cluster.GetName()
	}
	if c.belongsToCluster {
		inputs["captf_cluster_exports"] = exports(s.TerraformCluster)
	}
	bootstrap := ""
	if s.Owner != nil && c.kind.Inputs != nil {
		c.kind.Inputs(s.Owner, inputs)
		bootstrap = c.kind.Owner.BootstrapData(s.Owner)
	}
	from, err := renderedFrom(string(obj.GetUID()), obj.Workspace(), inputs, bootstrap)
	return inputs, from, err
}

// render makes the object's inputs: CAPTF's, the bootstrap data and the
// user's variables, and remembers their hash.
func (c *Controller[T]) render(ctx context.Context, s *Sync) (*Inputs, error) {
	inputs, from, err := c.renderedFrom(s)
	if err != nil {
		return nil, err
	}
	return c.renderOf(ctx, s, inputs, from)
}

func (c *Controller[T]) renderOf(ctx context.Context, s *Sync, inputs map[string]any, from [sha256.Size]byte) (*Inputs, error) {
	if s.Owner != nil && c.kind.Inputs != nil && c.kind.Owner.BootstrapData(s.Owner) != "" {
		if err := bootstrapInputs(ctx, c.engine.Kube, c.engine.BootstrapConfigs, c.kind.Owner, s.Owner, inputs); err != nil {
			return nil, err
		}
	}
	in, err := Render(ctx, c.engine.Kube, c.engine.Catalog, s.Obj.GetNamespace(), *s.Obj.Workspace(), inputs)
	if err != nil {
		return nil, err
	}
	c.rendered.remember(cache.MetaObjectToName(s.Obj), from, in.Hash)
	return in, nil
}

// exports are a TerraformCluster's non-sensitive outputs, as machines and
// pools receive them.
func exports(tc *infrav1.TerraformCluster) map[string]json.RawMessage {
	exports := map[string]json.RawMessage{}
	if tc != nil {
		for k, v := range tc.Status.Outputs {
			exports[k] = v.Raw
		}
	}
	return exports
}

// bootstrapInputs reads the bootstrap data Secret of owner (a Machine or
// MachinePool of kind; keys value and format, as Cluster API's bootstrap
// providers write it) into captf_bootstrap_data and captf_bootstrap_format,
// when the Secret was made for owner (madeFor).
func bootstrapInputs(ctx context.Context, kube kubernetes.Interface, configs BootstrapConfigReader, kind capi.Kind, owner *capi.Object, inputs map[string]any) error {
	name := kind.BootstrapData(owner)
	sec, err := kube.CoreV1().Secrets(owner.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return &InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading bootstrap data Secret %s: %v", name, err)}
	}
	ok, err := madeFor(ctx, configs, sec, kind, owner)
	if err != nil {
		return &InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading the bootstrap config of %s %s: %v", kind.Kind, owner.GetName(), err)}
	}
	if !ok {
		return &InputError{Reason: ReasonBootstrapDataNotAllowed, Message: fmt.Sprintf(
			"%s %s names bootstrap data Secret %s (%s), which was not made for it: CAPTF reads bootstrap data only from a Secret controlled by the %s or by its bootstrap config (%s), "+
				"or one labelled %s=true by someone who may write Secrets. Point %s at the Secret its bootstrap provider wrote, or label the Secret if it is meant as bootstrap data.",
			kind.Kind, owner.GetName(), name, strings.Join(kind.BootstrapDataSecretPath, "."), kind.Kind, strings.Join(kind.BootstrapConfigRefPath, "."),
			infrav1.LabelBootstrapData, strings.Join(kind.BootstrapDataSecretPath, "."))}
	}
	format := string(sec.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	inputs["captf_bootstrap_data"] = string(sec.Data["value"])
	inputs["captf_bootstrap_format"] = format
	return nil
}

// BootstrapConfigReader reads the metadata of a bootstrap config (group,
// kind and name as a configRef gives them) in namespace.
type BootstrapConfigReader func(ctx context.Context, namespace, group, kind, name string) (metav1.Object, error)

// madeFor tells whether sec is bootstrap data made for owner: whoever may
// create Machines must not make CAPTF read any Secret of the namespace (the
// cluster's kubeconfig, another cluster's bootstrap data with its CA keys).
// A Secret is made for owner when its controller is owner itself, or the
// bootstrap config owner names (as kubeadm's provider writes it) when that
// config is controlled by owner (Cluster API's Machine and MachinePool
// controllers take control of the configs they use: another Machine's
// config stays its own) and the Secret belongs to owner's Cluster; or when
// someone who may write Secrets labelled it as bootstrap data.
func madeFor(ctx context.Context, configs BootstrapConfigReader, sec *corev1.Secret, kind capi.Kind, owner *capi.Object) (bool, error) {
	if sec.Labels[infrav1.LabelBootstrapData] == "true" {
		return true, nil
	}
	ref := metav1.GetControllerOfNoCopy(sec)
	if ref == nil {
		return false, nil
	}
	if controls(ref, capi.Group, kind.Kind, owner.GetName(), owner.GetUID()) {
		return true, nil
	}
	cfgGroup, cfgKind, cfgName, ok := kind.BootstrapConfig(owner)
	if !ok || !controls(ref, cfgGroup, cfgKind, cfgName, ref.UID) {
		return false, nil
	}
	if cluster, labelled := sec.Labels[capi.ClusterNameLabel]; labelled && cluster != kind.ClusterName(owner) {
		return false, nil
	}
	if configs == nil {
		return false, nil
	}
	cfg, err := configs(ctx, owner.GetNamespace(), cfgGroup, cfgKind, cfgName)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cfgRef := metav1.GetControllerOfNoCopy(cfg)
	return cfg.GetUID() == ref.UID && cfgRef != nil && controls(cfgRef, capi.Group, kind.Kind, owner.GetName(), owner.GetUID()), nil
}

// controls tells whether the controller reference ref names the object
// group/kind name with uid.
func controls(ref *metav1.OwnerReference, group, kind, name string, uid types.UID) bool {
	refGroup := ref.APIVersion
	if i := strings.Index(refGroup, "/"); i >= 0 {
		refGroup = refGroup[:i]
	} else {
		refGroup = "" // the core group
	}
	return refGroup == group && ref.Kind == kind && ref.Name == name && ref.UID == uid
}

// renderedInputs remembers, per object, the hash of the inputs it last
// rendered and a digest of what went into them that needs no read: the
// object (UID, workspace spec), CAPTF's inputs (its owner's, the cluster's
// exports) and the names of the Secrets it read. A sync that only asks
// whether the applied inputs are current takes the hash from here instead
// of reading the module's ConfigMap and the Secrets again (two reads of
// every sync of a machine: most of its syncs come with Cluster API's and
// its own status changes). A Job never runs remembered inputs (Apply asks
// for a render), and a resync forgets them: Secrets and ConfigMaps are read
// again when a Job starts and at least every --sync-period, as before.
type renderedInputs struct {
	mu       sync.Mutex
	byObject map[cache.ObjectName]rendered
}

type rendered struct {
	from [sha256.Size]byte
	hash string
}

func newRenderedInputs() *renderedInputs {
	return &renderedInputs{byObject: map[cache.ObjectName]rendered{}}
}

// renderedFrom digests what inputs are rendered from, short of the
// Secrets' and ConfigMaps' content: the object's workspace spec (not its
// generation: a machine's provider ID, written once it is applied, changes
// no input), CAPTF's inputs and the names of the Secrets read.
func renderedFrom(uid string, ws *infrav1.WorkspaceSpec, captf map[string]any, secretNames ...string) ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		UID         string
		Workspace   *infrav1.WorkspaceSpec
		CAPTF       map[string]any
		SecretNames []string
	}{uid, ws, captf, secretNames})
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// lookup returns the hash of key's inputs if they were last rendered from
// from.
func (m *renderedInputs) lookup(key cache.ObjectName, from [sha256.Size]byte) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.byObject[key]
	if !ok || r.from != from {
		return "", false
	}
	return r.hash, true
}

func (m *renderedInputs) remember(key cache.ObjectName, from [sha256.Size]byte, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byObject[key] = rendered{from: from, hash: hash}
}

func (m *renderedInputs) forget(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byObject, key)
}

// Ready reasons of bootstrap data that cannot be read.
const (
	// ReasonBootstrapDataUnavailable: the bootstrap data Secret cannot be read.
	ReasonBootstrapDataUnavailable = "BootstrapDataUnavailable"
	// ReasonBootstrapDataNotAllowed: the owner names a bootstrap data
	// Secret that was not made for it.
	ReasonBootstrapDataNotAllowed = "BootstrapDataNotAllowed"
)
