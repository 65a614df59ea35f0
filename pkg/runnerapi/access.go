package runnerapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// What a runner may ask for: authorize decides from the request and the
// runner's identity alone; checkProtection and checkFamilySize are the two
// checks that read the API server (the state head, the family's sizes).

// request is an authorized request: its checked body, or the pod whose
// phase it asks for.
type request struct {
	body []byte
	pod  string
	// created is a Secret of the object's state family this request
	// creates.
	created *corev1.Secret
	// result is this Job's result Secret, which the request writes.
	result *corev1.Secret
	// runInputs is this Job's run-inputs Secret, which the request reads.
	runInputs string
	// head is the object's state head, which the request writes.
	head *corev1.Secret
}

// readBody reads the body of a write, at most maxBody bytes within
// bodyTimeout.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		return nil, nil
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if len(body) > maxBody {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a runner request carries at most %d bytes", maxBody))
	}
	return body, nil
}

// authorize allows what a run of the identity's object needs, and nothing
// else; body is the request's, read.
func (id *Identity) authorize(r *http.Request, body []byte) (*request, error) {
	resource, name, err := id.parsePath(r.URL.Path)
	if err != nil {
		return nil, err
	}
	forbid := func(why string) error { return id.forbid(resource, name, r.Method, why) }
	if why := id.catalogRefused(resource, name, r.Method); why != "" {
		return nil, forbid(why)
	}
	if resource == "pods" && r.Method == http.MethodGet && name != "" {
		return &request{pod: name}, nil
	}
	if why := id.verbRefused(resource, name, r.Method); why != "" {
		return nil, forbid(why)
	}
	if r.Method != http.MethodGet && !id.writes(r) {
		return nil, forbid("the request does not carry the run's write key: only the runner writes, and the module's code and every other program of the pod only read")
	}
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		if name == "" {
			return nil, forbid("lists and watches are not part of a run")
		}
		if resource == "secrets" && r.Method == http.MethodGet && name == id.Object.RunInputs(id.Job) {
			return &request{runInputs: name}, nil
		}
		return &request{}, nil
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
			Reason: metav1.StatusReasonUnsupportedMediaType, Message: "runner requests are JSON, not " + ct}}
	}
	var checked any
	switch resource {
	case "secrets":
		checked, err = id.checkedSecret(body, name, forbid)
	case "leases":
		checked, err = id.checkedLease(body, forbid)
	case "configmaps":
		checked, err = id.checkedRecord(body, forbid)
	}
	if err != nil {
		return nil, err
	}
	// What is forwarded is what was checked, not the bytes that came.
	out, err := json.Marshal(checked)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	req := &request{body: out}
	if sec, ok := checked.(*corev1.Secret); ok && r.Method == http.MethodPost && id.Object.HoldsState(sec.Name) {
		req.created = sec
	}
	if sec, ok := checked.(*corev1.Secret); ok && sec.Name == id.Object.Result(id.Job) {
		req.result = sec
	}
	if sec, ok := checked.(*corev1.Secret); ok && sec.Name == id.Object.State() {
		req.head = sec
	}
	return req, nil
}

// forbid is the refusal of method on resource name, and why.
func (id *Identity) forbid(resource, name, method, why string) error {
	return apierrors.NewForbidden(schemaResource(resource), name, fmt.Errorf("a runner of %s %s may not %s it: %s", id.Object.Kind, id.Object.Name, strings.ToLower(method), why))
}

// verbRefused says why a run may not use method on resource name, or "".
func (id *Identity) verbRefused(resource, name, method string) string {
	switch resource {
	case "leases":
		if method == http.MethodDelete || (name != "" && name != id.Object.Lock()) {
			return "only the object's state lock"
		}
	case "configmaps":
		if method != http.MethodPost || name != "" {
			return "a run only creates its record"
		}
	case "secrets":
		readable := id.runSecret(name)
		switch method {
		case http.MethodGet:
			if !readable {
				return "not a Secret of this run"
			}
		case http.MethodDelete:
			// Old chunks and rotated backups, and the run's inputs once it
			// is done; never the state or the durable inputs themselves.
			if name != id.Object.RunInputs(id.Job) && (!id.Object.HoldsState(name) || name == id.Object.State() || name == id.Object.DurableInputs()) {
				return "only state chunks, backups and this run's inputs are deleted"
			}
		case http.MethodPost, http.MethodPut:
		default:
			return "not a verb of a run"
		}
		if id.ReadOnly && method != http.MethodGet && id.Object.HoldsState(name) {
			return "a drift check only reads the state"
		}
	default:
		return "not part of a run"
	}
	return ""
}

// runSecret tells a Secret of the run: its object's state family, its
// inputs, its result.
func (id *Identity) runSecret(name string) bool {
	return id.Object.HoldsState(name) || name == id.Object.RunInputs(id.Job) || name == id.Object.Result(id.Job)
}

// catalogRefused says why a catalog Job may not use method on resource
// name, or "": it reads its inputs (and deletes them once done) and writes
// its result.
func (id *Identity) catalogRefused(resource, name, method string) string {
	if !id.Catalog {
		return ""
	}
	result := name == id.Object.Result(id.Job) || (name == "" && method == http.MethodPost)
	switch {
	case resource != "secrets":
		return "a catalog Job reads its inputs and writes its result, nothing else"
	case method == http.MethodGet && (name == id.Object.RunInputs(id.Job) || result):
	case (method == http.MethodPost || method == http.MethodPut) && result:
	case method == http.MethodDelete && name == id.Object.RunInputs(id.Job):
	default:
		return "a catalog Job reads its inputs and writes its result, nothing else"
	}
	return ""
}

// checkedSecret is the Secret a run writes, once checked: one of the
// object's state family or this Job's result, Opaque, CAPTF's labels that
// match its name, owned by nothing but the object.
func (id *Identity) checkedSecret(body []byte, name string, forbid func(string) error) (*corev1.Secret, error) {
	var sec corev1.Secret
	if err := json.Unmarshal(body, &sec); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if (name != "" && sec.Name != name) || !(id.Object.HoldsState(sec.Name) || sec.Name == id.Object.Result(id.Job)) {
		return nil, forbid("only the object's state Secrets and this Job's result are written")
	}
	if id.ReadOnly && id.Object.HoldsState(sec.Name) {
		return nil, forbid("a drift check only reads the state")
	}
	if id.Catalog && sec.Name != id.Object.Result(id.Job) {
		return nil, forbid("a catalog Job writes only its result")
	}
	// Never a ServiceAccount token Secret or another type the API
	// server gives meaning to.
	if sec.Type != "" && sec.Type != corev1.SecretTypeOpaque {
		return nil, forbid("type " + string(sec.Type) + ": runner Secrets are Opaque")
	}
	if sec.Labels[names.LabelManagedBy] != names.ManagedByValue {
		return nil, forbid("runner Secrets carry " + names.LabelManagedBy + "=" + names.ManagedByValue)
	}
	if why := id.checkMetadata(&sec); why != "" {
		return nil, forbid(why)
	}
	// What the manager makes of a Secret of the family goes by its
	// name: its type label must say the same (checkFamilySize counts
	// by it).
	if types := id.Object.FamilyTypes(sec.Name); types != nil && !slices.Contains(types, sec.Labels[names.LabelSecretType]) {
		return nil, forbid(fmt.Sprintf("label %s=%q: a Secret named %s is a %s", names.LabelSecretType, sec.Labels[names.LabelSecretType], sec.Name, strings.Join(types, " or ")))
	}
	// A result belongs to the object (and goes with it); nothing
	// else may be named an owner.
	for _, ref := range sec.OwnerReferences {
		if ref.UID != id.ObjectRef.UID {
			return nil, forbid("owner " + ref.Kind + " " + ref.Name + ": only the object itself owns a runner Secret")
		}
	}
	if len(sec.OwnerReferences) > 0 {
		sec.OwnerReferences = []metav1.OwnerReference{id.ObjectRef}
	}
	sec.Namespace = id.Namespace
	return &sec, nil
}

// checkProtection refuses a write of the state head that changes the
// protection the manager recorded on it (names.AnnotationProtection): module
// code would free what an earlier object's spec.protect covered.
func (s *Server) checkProtection(ctx context.Context, id *Identity, method string, head *corev1.Secret) error {
	recorded := ""
	if method == http.MethodPut {
		current, err := s.meta.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(id.Namespace).Get(ctx, head.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return unavailable(err)
		default:
			recorded = current.Annotations[names.AnnotationProtection]
		}
	}
	if head.Annotations[names.AnnotationProtection] != recorded {
		return id.forbid("secrets", head.Name, method, "annotation "+names.AnnotationProtection+" is the manager's")
	}
	return nil
}

// checkedRecord is the run record a run creates, once checked: this Job's,
// labelled as this object's record and owned by the object alone.
func (id *Identity) checkedRecord(body []byte, forbid func(string) error) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if want := id.Object.RunRecord(id.Job, id.PodUID); cm.Name != want {
		return nil, forbid("only this run's record " + want)
	}
	own := names.ObjectLabels(id.ObjectRef.Kind, id.Object.Name, id.ObjectRef.UID)
	own[names.LabelRunRecord] = "true"
	for k, v := range cm.Labels {
		switch want, known := own[k]; {
		case known && v != want:
			return nil, forbid(fmt.Sprintf("label %s=%s: this run's record has %q", k, v, want))
		case known, k == names.LabelOperation || k == names.LabelOutcome:
			if len(v) > 63 {
				return nil, forbid("label " + k + ": too long")
			}
		default:
			return nil, forbid("label " + k + ": a run record carries only CAPTF's labels of its run")
		}
	}
	for k := range own {
		if _, ok := cm.Labels[k]; !ok {
			return nil, forbid("a run record carries the labels of its object: " + k + " is missing")
		}
	}
	if len(cm.Annotations) > 0 || len(cm.Finalizers) > 0 {
		return nil, forbid("a run record has no annotations or finalizers")
	}
	cm.OwnerReferences = []metav1.OwnerReference{id.ObjectRef}
	cm.Namespace = id.Namespace
	return &cm, nil
}

// checkedLease is the state lock a run writes, once checked.
func (id *Identity) checkedLease(body []byte, forbid func(string) error) (*coordinationv1.Lease, error) {
	var lease coordinationv1.Lease
	if err := json.Unmarshal(body, &lease); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if lease.Name != id.Object.Lock() {
		return nil, forbid("only the object's state lock")
	}
	lease.Namespace, lease.OwnerReferences = id.Namespace, nil
	return &lease, nil
}

// checkFamilySize refuses a Secret that would make the object's state
// family larger than runs make it. A run writes a state (inline, or a
// chunk at a time from chunk 0), a backup of it and, when terraform fails
// to save, a rescued state; the rotation keeps --state-backups backups and
// two more (the one restored, the last good one). Module code that creates
// Secrets of its own state family through this API gets no more than
// that: every chunk below the size limit's count, written in order, and a
// bounded number of backups, rescued states and chunked states at once.
// (A pod's few requests at once may each pass before the others land.)
func (s *Server) checkFamilySize(ctx context.Context, id *Identity, sec *corev1.Secret) error {
	forbid := func(why string) error {
		return apierrors.NewForbidden(corev1.Resource("secrets"), sec.Name, fmt.Errorf("a runner of %s %s may not create it: %s", id.Object.Kind, id.Object.Name, why))
	}
	secrets := s.meta.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(id.Namespace)
	typ := sec.Labels[names.LabelSecretType] // checked against the name by authorize
	switch typ {
	case names.SecretTypeStateChunk, names.SecretTypeBackupChunk:
		cut := strings.LastIndexByte(sec.Name, '-')
		i, err := strconv.Atoi(sec.Name[cut+1:])
		if err != nil || strconv.Itoa(i) != sec.Name[cut+1:] {
			return forbid("a chunk's name ends in its index")
		}
		if maxChunks := s.maxStateBytes()/statestore.DefaultChunkSize + 1; int64(i) >= maxChunks {
			return forbid(fmt.Sprintf("chunk %d: a state of --max-state-bytes %d has at most %d", i, s.maxStateBytes(), maxChunks))
		}
		if i > 0 {
			prev := fmt.Sprintf("%s-%d", sec.Name[:cut], i-1)
			if _, err := secrets.Get(ctx, prev, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return forbid("chunks are written in order, and " + prev + " does not exist")
			} else if err != nil {
				return err
			}
			return nil
		}
	case names.SecretTypeBackup:
	default:
		return nil // the state and the durable inputs: one each
	}
	// A new backup or rescued state, or chunk 0 of a new chunked state or
	// backup: how many of its kind are there?
	kind := familyKind(id.Object, sec.Name, typ)
	n := 0
	opts := metav1.ListOptions{Limit: 100, LabelSelector: labels.Set{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: id.Object.Kind,
		names.LabelObjectName: names.LabelValue(id.Object.Name), names.LabelSecretType: typ}.String()}
	for {
		list, err := secrets.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, o := range list.Items {
			if id.Object.HoldsState(o.Name) && (typ == names.SecretTypeBackup || strings.HasSuffix(o.Name, "-0")) && familyKind(id.Object, o.Name, typ) == kind {
				n++
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	// The kept backups, the one being made (or, of chunked states, the
	// current one and the one being written), and as many again for what
	// runs killed mid-write left; rescued states apart, as many.
	if limit := 2 * (s.StateBackups + 4); n >= limit {
		return forbid(fmt.Sprintf("the object has %d %s already, the most runs leave is %d; restore or delete the ones not needed", n, kind, limit))
	}
	return nil
}

// familyKind is what checkFamilySize counts a Secret of the family as.
func familyKind(obj names.Object, name, typ string) string {
	rescue := obj.IsRescue(name)
	switch {
	case typ == names.SecretTypeStateChunk:
		return "chunked states"
	case typ == names.SecretTypeBackup && rescue:
		return "rescued states"
	case typ == names.SecretTypeBackup:
		return "backups"
	case rescue:
		return "chunked rescued states"
	default:
		return "chunked backups"
	}
}

func (s *Server) maxStateBytes() int64 {
	if s.MaxStateBytes > 0 {
		return s.MaxStateBytes
	}
	return run.DefaultMaxStateBytes
}

// secretTypes are the values of names.LabelSecretType a runner writes.
var secretTypes = []string{names.SecretTypeState, names.SecretTypeStateChunk, names.SecretTypeBackup, names.SecretTypeBackupChunk,
	names.SecretTypeDurableInput, names.SecretTypeResult}

// checkMetadata says why a runner may not write sec, or "". Labels and
// annotations of CAPTF's and Cluster API's domains mean something to the
// manager and to other controllers (whose object a Secret is, that it is
// bootstrap data, that clusterctl moves it): a runner writes only this
// object's own. No finalizer but CAPTF's (the manager must be able to
// delete what it releases), and never immutable (the manager must be able
// to rewrite a state it restores).
func (id *Identity) checkMetadata(sec *corev1.Secret) string {
	// Not the UID: a state restored into a fresh plane (Velero, a
	// hand-made export) names the object's earlier UID until the manager
	// records it anew, and nothing takes a state up by its UID label.
	own := map[string]string{
		names.LabelManagedBy:  names.ManagedByValue,
		names.LabelKind:       id.Object.Kind,
		names.LabelObjectName: names.LabelValue(id.Object.Name),
	}
	for k, v := range sec.Labels {
		switch want, known := own[k]; {
		case known && v != want:
			return fmt.Sprintf("label %s=%s: this object's is %q", k, v, want)
		case known:
		case k == names.LabelSecretType:
			if !slices.Contains(secretTypes, v) {
				return fmt.Sprintf("label %s=%s: not a Secret a runner writes", k, v)
			}
		case k == names.LabelClusterctlMove, k == names.LabelObjectUID:
		case reserved(k):
			return "label " + k + ": only CAPTF's own labels of this object"
		}
	}
	for k, v := range sec.Annotations {
		if k == names.AnnotationObjectName && v != id.Object.Name {
			return fmt.Sprintf("annotation %s=%s: this object is %q", k, v, id.Object.Name)
		}
	}
	for _, f := range sec.Finalizers {
		if f != names.StateFinalizer {
			return "finalizer " + f + ": only " + names.StateFinalizer
		}
	}
	if (sec.Name == id.Object.State() || sec.Name == id.Object.DurableInputs()) && !slices.Contains(sec.Finalizers, names.StateFinalizer) {
		return "the state and durable inputs keep finalizer " + names.StateFinalizer
	}
	if sec.Immutable != nil && *sec.Immutable {
		return "immutable: the manager must be able to rewrite the object's Secrets"
	}
	size := 0
	for _, m := range []map[string]string{sec.Labels, sec.Annotations} {
		for k, v := range m {
			size += len(k) + len(v)
		}
	}
	if size > maxMetadata {
		return fmt.Sprintf("labels and annotations of %d bytes: a runner writes at most %d", size, maxMetadata)
	}
	return ""
}

// maxMetadata bounds the labels and annotations of a runner's Secret: what
// CAPTF writes there (sums, sizes, the list of backups) is far less, and
// the manager lists the metadata of an object's family.
const maxMetadata = 32 << 10

// reserved tells a label key of a domain that CAPTF or Cluster API gives
// meaning to.
func reserved(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, d := range []string{"captf.io", "cluster.x-k8s.io", "kubernetes.io", "k8s.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return true
		}
	}
	return false
}

// parsePath takes the core Secret and Pod paths and the Lease path in the
// identity's namespace.
func (id *Identity) parsePath(path string) (resource, name string, err error) {
	var rest string
	var ok bool
	if rest, ok = strings.CutPrefix(path, "/api/v1/namespaces/"); !ok {
		rest, ok = strings.CutPrefix(path, "/apis/coordination.k8s.io/v1/namespaces/")
	}
	parts := strings.Split(rest, "/")
	if !ok || len(parts) < 2 || len(parts) > 3 {
		return "", "", apierrors.NewForbidden(corev1.Resource(""), "", fmt.Errorf("%s is not part of a run", path))
	}
	if parts[0] != id.Namespace {
		return "", "", apierrors.NewForbidden(corev1.Resource(parts[1]), "", fmt.Errorf("a runner may not reach namespace %s", parts[0]))
	}
	resource = parts[1]
	if len(parts) == 3 {
		name = parts[2]
	}
	core := strings.HasPrefix(path, "/api/v1/")
	if (core && resource != "secrets" && resource != "pods" && resource != "configmaps") || (!core && resource != "leases") {
		return "", "", apierrors.NewForbidden(corev1.Resource(resource), name, errors.New("not part of a run"))
	}
	return resource, name, nil
}

func schemaResource(resource string) schema.GroupResource {
	if resource == "leases" {
		return coordinationv1.Resource(resource)
	}
	return corev1.Resource(resource)
}

// writes tells whether r comes from the runner itself, which holds the
// Job's write key: every other process of the pod (terraform, providers,
// the module's programs) has the pod's token too, and only reads.
func (id *Identity) writes(r *http.Request) bool {
	return id.Keyless || run.WriteKeyMatches(id.WriteKey, r.Header.Get(run.HeaderWriteKey))
}
