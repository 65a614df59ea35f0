package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// Reasons of the state checks made before every Job.
const (
	ReasonStateMissing      = "StateMissing"
	ReasonStatePresent      = "StatePresent"
	ReasonStateOwnedByOther = "StateOwnedByOther"
	ReasonStateRescued      = "StateRescued"
	ReasonStateAbandoned    = "StateAbandoned"
)

func (e *engine) stateStore(obj Object) *statestore.StateStore {
	return &statestore.StateStore{Client: e.Kube, Namespace: obj.GetNamespace(), Object: e.Names(obj),
		Labels: names.ObjectLabels(e.GVK.Kind, obj.GetName(), obj.GetUID()), Backups: e.StateBackups, MaxBytes: e.MaxStateBytes}
}

// stateSecrets lists the Secrets that outlive obj: state, chunks, backups,
// durable inputs. They are found by kind and name, not by UID: a restored
// or moved object has a new UID and the same state.
func (e *engine) stateSecrets(ctx context.Context, obj Object) ([]corev1.Secret, error) {
	state, _, err := e.objectSecrets(ctx, obj)
	return state, err
}

// secretsPage is how many of an object's Secrets one list request reads:
// chunks hold up to a MiB each, and module code can make a state (or a
// forged backup) as big as --max-state-bytes.
const secretsPage = 8

// objectSecrets lists obj's state Secrets, and apart what is left of its
// runs: run inputs, and results nobody owns (a backup tool restores them
// without their owner references; the others go with the object, their
// owner). Their metadata only, a page at a time, so that the manager never
// holds more than a few chunks of a state.
func (e *engine) objectSecrets(ctx context.Context, obj Object) (state, leftovers []corev1.Secret, err error) {
	sel := labels.Set{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: e.Names(obj).Kind,
		names.LabelObjectName: names.LabelValue(obj.GetName())}.String()
	opts := metav1.ListOptions{LabelSelector: sel, Limit: secretsPage}
	for {
		list, err := e.Kube.CoreV1().Secrets(obj.GetNamespace()).List(ctx, opts)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range list.Items {
			s := familyMetadata(&s)
			switch s.Labels[names.LabelSecretType] {
			case names.SecretTypeRunInputs:
				// Any UID: an object's name is its own in its namespace, and
				// inputs of an earlier object of that name (a restore brings
				// them back) have no run left to read them.
				leftovers = append(leftovers, s)
				continue
			case names.SecretTypeResult:
				if len(s.OwnerReferences) == 0 {
					leftovers = append(leftovers, s)
				}
				continue
			}
			if n, ok := s.Annotations[names.AnnotationObjectName]; ok && n != obj.GetName() {
				continue // another object whose name hashes to the same label
			}
			state = append(state, s)
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return state, leftovers, nil
		}
	}
}

// deleteLeftovers deletes what runs left (run inputs a runner killed before
// it deleted its own or a restore brought back, results a restore brought
// back without their owner),
// and the run records a restore brought back likewise: nothing owns them to
// take them with the object.
func (e *engine) deleteLeftovers(ctx context.Context, obj Object, secrets []corev1.Secret) error {
	var errs []error
	for _, s := range secrets {
		if err := e.Kube.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if e.Records != nil {
		records, err := e.Records.List(ctx, obj.GetNamespace(), e.Names(obj))
		errs = append(errs, err)
		for _, r := range records {
			if len(r.OwnerReferences) == 0 {
				errs = append(errs, e.Records.Delete(ctx, r.Namespace, r.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// listBackups names obj's backups (rescued states included), newest first.
func (e *engine) listBackups(ctx context.Context, obj Object) ([]string, error) {
	secrets, err := e.stateSecrets(ctx, obj)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(secrets, func(a, b corev1.Secret) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	var out []string
	for _, s := range secrets {
		if s.Labels[names.LabelSecretType] == names.SecretTypeBackup {
			out = append(out, s.Name)
		}
	}
	return out, nil
}

// StateSecretsSelector selects the Secrets whose metadata the manager
// caches: state heads and durable inputs, one each per object.
var StateSecretsSelector = names.LabelManagedBy + "=" + names.ManagedByValue + "," +
	names.LabelSecretType + " in (" + names.SecretTypeState + "," + names.SecretTypeDurableInput + ")"

// StateSecretMeta is what the checks before every Job read of a state
// head or durable inputs, and all the state Secrets' informer keeps of
// one. As a PartialObjectMetadata with its label and annotation maps it
// took 2.2 KB in the cache, two an object; with a whole ObjectMeta 556 B,
// now 360 B (BenchmarkStateSecretCache).
type StateSecretMeta struct {
	// No labels, annotations, owners or finalizers: the fields below say
	// what CAPTF reads of those.
	Name, Namespace, ResourceVersion string
	DeletionTimestamp                *metav1.Time

	Kind       string // names.LabelKind
	Abandoned  bool   // names.LabelAbandoned is "true"
	ObjectName string // names.AnnotationObjectName
	// NamesObject: the Secret has the names.AnnotationObjectName annotation.
	NamesObject bool
	HasState    bool   // statestore.HasState
	Size        int64  // statestore.StateSize; -1 when it records none
	Owned       bool   // it has owner references
	Protected   bool   // it holds names.StateFinalizer
	Protection  string // names.AnnotationProtection
}

// GetObjectMeta is the metadata a cache keys and indexes s by
// (meta.Accessor), made on each call: a cache takes it once an event.
func (s *StateSecretMeta) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, ResourceVersion: s.ResourceVersion, DeletionTimestamp: s.DeletionTimestamp}
}

// StateSecretMetaFrom is what the checks read of a state Secret's metadata
// (a cached PartialObjectMetadata, or a Secret read from the API server).
func StateSecretMetaFrom(m metav1.Object) *StateSecretMeta {
	labels, annotations := m.GetLabels(), m.GetAnnotations()
	s := &StateSecretMeta{Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion(), DeletionTimestamp: m.GetDeletionTimestamp(),
		Kind: labels[names.LabelKind], Abandoned: labels[names.LabelAbandoned] == "true",
		HasState: statestore.HasState(m), Size: -1, Owned: len(m.GetOwnerReferences()) > 0,
		Protected: slices.Contains(m.GetFinalizers(), names.StateFinalizer), Protection: annotations[names.AnnotationProtection]}
	s.ObjectName, s.NamesObject = annotations[names.AnnotationObjectName]
	if n, ok := statestore.StateSize(m); ok {
		s.Size = n
	}
	return s
}

// CacheStateSecret is the state Secrets' metadata informer's transform: a
// state head or durable inputs becomes a StateSecretMeta.
func CacheStateSecret(obj any) any {
	if _, done := obj.(*StateSecretMeta); done {
		return obj
	}
	if m, ok := obj.(metav1.Object); ok {
		return StateSecretMetaFrom(m)
	}
	return obj
}

// reportStateMissing says in Ready and StateMissing that the state of an
// object that was applied is gone, and how to bring it back.
func (e *engine) reportStateMissing(ctx context.Context, r *Sync) error {
	obj, n := r.Obj, r.Names
	backups, err := e.listBackups(ctx, obj)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("State Secret %s is missing, yet this object was applied: CAPTF applies and destroys nothing until a state is back, "+
		"else it would create every resource a second time, or destroy nothing. ", n.State())
	if len(backups) == 0 {
		msg += fmt.Sprintf("No backup of this object is left: put the state Secret back (from a backup of the namespace), or import the resources; "+
			"or, if its infrastructure is gone or is to be left as it is, let the object go without a destroy: kubectl annotate %s -n %s %s %s=true",
			strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), infrav1.AnnotationAbandonInfrastructure)
	} else {
		msg += fmt.Sprintf("Backups, newest first: %s. Restore one: kubectl annotate %s -n %s %s %s=%s",
			strings.Join(backups, ", "), strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), infrav1.AnnotationRestoreState, backups[0])
	}
	e.SetReady(r, metav1.ConditionFalse, ReasonStateMissing, msg)
	e.warnOnChange(obj, infrav1.ConditionStateMissing, metav1.ConditionTrue, ReasonStateMissing, ReasonStateMissing, msg)
	return nil
}

// protectState takes the owner references off obj's state Secrets and puts
// StateFinalizer on them, and record (names.AnnotationProtection) on the
// head unless it is "".
func (e *engine) protectState(ctx context.Context, obj Object, record string) error {
	head := e.Names(obj).State()
	return e.updateStateSecrets(ctx, obj, func(s *corev1.Secret) bool {
		recorded := record == "" || s.Name != head || s.Annotations[names.AnnotationProtection] == record
		if recorded && len(s.OwnerReferences) == 0 && slices.Contains(s.Finalizers, names.StateFinalizer) && s.Annotations[names.AnnotationObjectName] == obj.GetName() {
			return false
		}
		if !recorded {
			s.Annotations[names.AnnotationProtection] = record
		}
		s.OwnerReferences = nil
		if !slices.Contains(s.Finalizers, names.StateFinalizer) {
			s.Finalizers = append(s.Finalizers, names.StateFinalizer)
		}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[names.AnnotationObjectName] = obj.GetName()
		return true
	})
}

// updateStateSecrets applies change to each of obj's state Secrets and
// writes those it changed.
func (e *engine) updateStateSecrets(ctx context.Context, obj Object, change func(*corev1.Secret) bool) error {
	secrets, err := e.stateSecrets(ctx, obj)
	if err != nil {
		return err
	}
	return e.updateSecrets(ctx, secrets, change)
}

// familyMetadata is what objectSecrets keeps of a Secret of an object's
// family: no data, and of its labels and annotations (which module code
// may fill up to the API server's limit) only CAPTF's.
func familyMetadata(s *corev1.Secret) corev1.Secret {
	m := s.ObjectMeta
	kept := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers,
		Labels: map[string]string{}, Annotations: map[string]string{}}}
	for k, v := range m.Labels {
		if strings.HasPrefix(k, "captf.io/") || k == names.LabelManagedBy {
			kept.Labels[k] = v
		}
	}
	for _, k := range []string{names.AnnotationObjectName, names.AnnotationProtection} {
		if v, ok := m.Annotations[k]; ok {
			kept.Annotations[k] = v
		}
	}
	return kept
}

// updateSecrets applies change to the metadata of each of secrets (listed
// by objectSecrets) and writes the owner references and finalizers of those
// it changed, and adds their labels and annotations (a merge patch removes
// none), to the version that was read or not at all.
func (e *engine) updateSecrets(ctx context.Context, secrets []corev1.Secret, change func(*corev1.Secret) bool) error {
	for i := range secrets {
		s := &secrets[i]
		if !change(s) {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": s.ResourceVersion, // the change is to what was read
			"ownerReferences": nilIfEmpty(s.OwnerReferences), "finalizers": nilIfEmpty(s.Finalizers),
			"labels": s.Labels, "annotations": s.Annotations,
		}})
		if err != nil {
			return err
		}
		_, err = e.Kube.CoreV1().Secrets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: e.FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("updating state secret %s: %w", s.Name, err)
		}
	}
	return nil
}

// nilIfEmpty is nil for an empty list: a merge patch removes the field.
func nilIfEmpty[T any](list []T) []T {
	if len(list) == 0 {
		return nil
	}
	return list
}

// abandon keeps state, backups and inputs, labelled so an operator finds
// them, and no longer protected: they are the operator's now.
func (e *engine) abandon(ctx context.Context, obj Object) error {
	secrets, leftovers, err := e.objectSecrets(ctx, obj)
	if err != nil {
		return err
	}
	if err := e.deleteLeftovers(ctx, obj, leftovers); err != nil {
		return err
	}
	return e.updateSecrets(ctx, secrets, func(s *corev1.Secret) bool {
		s.OwnerReferences = nil
		s.Finalizers = slices.DeleteFunc(s.Finalizers, func(f string) bool { return f == names.StateFinalizer })
		s.Labels[names.LabelAbandoned] = "true"
		return true
	})
}

// WatchStateSecrets reads state metadata from inf and syncs an object when
// its state or durable inputs appear, go, or change hands (labels).
func (e *engine) WatchStateSecrets(inf informers.GenericInformer, l *controller.Loop) error {
	if inf == nil {
		return nil
	}
	e.StateSecrets = inf.Informer().GetIndexer()
	l.Synced = append(l.Synced, inf.Informer().HasSynced)
	kind := names.ShortKind(e.GVK.Kind)
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, ok := obj.(*StateSecretMeta)
		if ok && m.Kind == kind && m.NamesObject {
			l.Queue.Add(cache.ObjectName{Namespace: m.Namespace, Name: m.ObjectName})
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			// State writes change data and annotations: no sync for those,
			// only when it changes hands (its labels).
			o, oOK := old.(*StateSecretMeta)
			c, cOK := cur.(*StateSecretMeta)
			if oOK && cOK && (o.Kind != c.Kind || o.Abandoned != c.Abandoned) {
				enqueue(cur)
			}
		},
		DeleteFunc: enqueue,
	})
	return err
}
