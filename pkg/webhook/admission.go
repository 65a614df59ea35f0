package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/fairshare"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/providerid"
	"github.com/captf/captf/pkg/runnerpod"
)

// MaxRequestBytes bounds an AdmissionReview body: an object and its old
// version, each at most what etcd stores (1.5 MiB), and the review around
// them.
const MaxRequestBytes = 4 << 20

// MaxInFlight bounds the admission requests decided at once, shared fairly
// by source (the API server, or any pod that reaches port 9443): the
// decoded objects take a few times their body's size. A request takes its
// slot once its body is read, so a client that sends slowly holds none.
// One source holds at most maxInFlightPerSource; the API server waits for
// a slot up to its webhook timeout.
const (
	MaxInFlight          = 12
	maxInFlightPerSource = 8
)

// MaxReading bounds the requests whose bodies are read or held at once,
// and so their memory; one source reads at most half of them, so that
// slow senders leave the API server its share.
const MaxReading = 16

// Access reviews a requester (a user, through a source address) and a
// source address in all may ask for: each reference an object adds costs
// one, through the manager's one client. The API server is one source, for
// every user: one user's references must not spend the others'; forged
// reviews from a pod, whatever users they name, are bounded by their
// address's.
const (
	accessReviewQPS         = 20
	accessReviewBurst       = 400
	sourceAccessReviewQPS   = 200
	sourceAccessReviewBurst = 2000
)

// Deadlines of a decision: the API server says its own (the query
// parameter timeout, 10 s by default); past it nobody reads the answer.
const (
	defaultDecisionTimeout = 10 * time.Second
	maxDecisionTimeout     = 30 * time.Second
)

// bodyTimeout bounds the reading of one request's body: the API server
// sends it at once, and a slow sender must not hold a reading slot for as
// long as the API server's own timeout (10 s by default).
const bodyTimeout = 2 * time.Second

// Path is the webhook path of a kind.
func Path(kind string) string {
	return "/validate-infrastructure-cluster-x-k8s-io-v1alpha1-" + strings.ToLower(kind)
}

// Kinds are the kinds the webhook validates.
var Kinds = []string{"TerraformCluster", "TerraformClusterTemplate", "TerraformMachine", "TerraformMachinePool", "TerraformMachinePoolTemplate", "TerraformMachineTemplate", "TerraformPlanPolicy"}

// Handler admits or refuses writes of the Terraform* kinds.
type Handler struct {
	// ManagerUser is the manager's own username, the only one that may
	// write provider IDs; empty when POD_NAMESPACE or SERVICE_ACCOUNT_NAME
	// is unset, and then nobody may.
	ManagerUser string
	// Cluster says whether the Cluster namespace/name exists and whether
	// it is paused: clusterctl move creates a machine with its provider ID
	// while the moved Cluster is paused; a restore (Velero's order) before
	// the Cluster exists.
	Cluster func(ctx context.Context, namespace, name string) (found, paused bool, err error)
	// RunnerPods are the operator's rules for runner pods: a Job policy
	// that breaks them is refused.
	RunnerPods runnerpod.Rules
	// Authorize asks the API server's authorizer about the requesting
	// user: may they read every Secret and ConfigMap the object makes CAPTF
	// read, and may they move provider IDs? Nil: neither is allowed to
	// anyone but the manager, references are not checked.
	Authorize Authorizer
	// ReadTemplate reads a template (its resource, in namespace) as JSON:
	// an object cloned from it may read only what it names. Nil: no
	// cloned object gets a new reference.
	ReadTemplate func(ctx context.Context, namespace, resource, name string) ([]byte, error)
	// CatalogEntry reads a TerraformModule; nil checks no catalog module.
	CatalogEntry func(ctx context.Context, name string) (*infrav1.TerraformModule, error)
	// NamespaceLabels reads a namespace's labels (the catalog's selectors).
	NamespaceLabels func(ctx context.Context, namespace string) (map[string]string, error)

	// reading and slots share requests by source: reading bounds the
	// bodies being read or held, slots the requests being decided.
	reading, slots *fairshare.Slots
	// accessReviews is each requester's budget of access reviews, beside
	// their source's.
	accessReviews, sourceAccessReviews *fairshare.RateLimits
}

// sourceKey carries a request's source in its context, for its budget of
// access reviews.
type sourceKey struct{}

// errTooManyReviews refuses a decision past its source's budget.
var errTooManyReviews = errors.New("too many access reviews asked for by this user: try again shortly")

// Mux serves every kind's path: MaxReading requests read at a time,
// MaxInFlight decided, shared by source.
func (h *Handler) Mux() *http.ServeMux {
	mux := http.NewServeMux()
	h.reading = fairshare.NewSlots(MaxReading, MaxReading/2)
	h.reading.OnWait = metrics.SlotWaitCounter(metrics.ServerWebhook, metrics.SlotsReading)
	h.slots = fairshare.NewSlots(MaxInFlight, maxInFlightPerSource)
	h.slots.OnWait = metrics.SlotWaitCounter(metrics.ServerWebhook, metrics.SlotsDeciding)
	h.accessReviews = fairshare.NewRateLimits(accessReviewQPS, accessReviewBurst, 0, 0)
	h.sourceAccessReviews = fairshare.NewRateLimits(sourceAccessReviewQPS, sourceAccessReviewBurst, 0, 0)
	if authorize := h.Authorize; authorize != nil {
		h.Authorize = func(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
			if source, ok := ctx.Value(sourceKey{}).(string); ok &&
				(h.accessReviews.TryAccept(source+"\x00"+user.Username) != fairshare.Accepted || h.sourceAccessReviews.TryAccept(source) != fairshare.Accepted) {
				metrics.WebhookRefused.WithLabelValues("access_review_budget").Inc()
				return false, "", errTooManyReviews
			}
			return authorize(ctx, user, attrs)
		}
	}
	for _, kind := range Kinds {
		mux.HandleFunc("POST "+Path(kind), func(w http.ResponseWriter, r *http.Request) {
			source := fairshare.Source(r)
			doneReading, err := h.reading.Acquire(r.Context(), source)
			if err != nil {
				return // the client is gone
			}
			defer doneReading()
			body, ok := readReview(w, r)
			if !ok {
				return
			}
			ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), sourceKey{}, source), decisionTimeout(r))
			defer cancel()
			done, err := h.slots.Acquire(ctx, source)
			if err != nil {
				http.Error(w, "no slot to decide in before the deadline", http.StatusTooManyRequests)
				return
			}
			defer done()
			h.serve(w, r.WithContext(ctx), kind, body)
		})
	}
	return mux
}

// decisionTimeout is the deadline the API server gives a decision.
func decisionTimeout(r *http.Request) time.Duration {
	d, err := time.ParseDuration(r.URL.Query().Get("timeout"))
	if err != nil || d <= 0 {
		return defaultDecisionTimeout
	}
	return min(d, maxDecisionTimeout)
}

// readReview reads an AdmissionReview's body, or answers why it cannot.
func readReview(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		http.Error(w, "Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return nil, false
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("request body larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, kind string, body []byte) {
	logger := klog.FromContext(r.Context()).WithName("webhook")
	review, err := DecodeReview(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review.Response = h.Admit(r.Context(), kind, review.Request)
	review.Request = nil
	if !review.Response.Allowed {
		logger.V(2).Info("Refused", "kind", kind, "uid", review.Response.UID, "message", review.Response.Result.Message)
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(review); err != nil {
		logger.Error(err, "Writing the admission response")
	}
}

// DecodeReview decodes an admission.k8s.io/v1 AdmissionReview with a request.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	if gvk := review.GroupVersionKind(); gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, fmt.Errorf("want an admission.k8s.io/v1 AdmissionReview, got %s", gvk)
	}
	if review.Request == nil {
		return nil, errors.New("the AdmissionReview has no request")
	}
	return &review, nil
}

// Admit decides on one request for kind.
func (h *Handler) Admit(ctx context.Context, kind string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Group != infrav1.GroupName || req.Kind.Kind != kind {
		return deny(resp, apierrors.NewBadRequest(fmt.Sprintf("this path validates %s, not %s", kind, req.Kind.Kind)))
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	if kind == "TerraformPlanPolicy" { // no workspace: its rules alone
		errs, err := validate(req, func(obj, _ *infrav1.TerraformPlanPolicy) field.ErrorList { return ValidateTerraformPlanPolicy(obj) })
		if err != nil {
			return deny(resp, apierrors.NewBadRequest(err.Error()))
		}
		if len(errs) > 0 {
			return deny(resp, apierrors.NewInvalid(schema.GroupKind{Group: infrav1.GroupName, Kind: kind}, req.Name, errs))
		}
		return resp
	}
	// What the CRD admits bounds the references, and so the access
	// reviews, of a review the API server sends; a forged one with more is
	// refused before anything is asked.
	for _, raw := range [][]byte{req.Object.Raw, req.OldObject.Raw} {
		if errs, err := checkBounds(raw); err != nil {
			return deny(resp, apierrors.NewBadRequest(err.Error()))
		} else if len(errs) > 0 && !sameSpec(req) {
			metrics.WebhookRefused.WithLabelValues("over_bounds").Inc()
			return deny(resp, apierrors.NewInvalid(schema.GroupKind{Group: infrav1.GroupName, Kind: kind}, req.Name, errs))
		}
	}
	errs, err := h.decide(ctx, kind, req)
	if err == nil && deletingMetadataOnly(req) {
		// Finalizers must be able to go, and abandon to be set, even when
		// a newer rule finds the object invalid: what the object already
		// broke does not block; every change is held to every rule (and a
		// change of the spec to all of them).
		var was field.ErrorList
		if was, err = h.decide(ctx, kind, asUnchanged(req)); err == nil {
			errs = newErrors(errs, was)
		}
	}
	var status apierrors.APIStatus
	switch e := err.(type) {
	case nil:
	case *internalError:
		status = apierrors.NewInternalError(e.error)
	default:
		status = apierrors.NewBadRequest(err.Error())
	}
	if status != nil {
		return deny(resp, status)
	}
	if len(errs) > 0 {
		return deny(resp, apierrors.NewInvalid(schema.GroupKind{Group: infrav1.GroupName, Kind: kind}, req.Name, errs))
	}
	return resp
}

// internalError is a failure to decide (an authorizer that did not
// answer), not a bad request: fail closed, and the user retries.
type internalError struct{ error }

// decide runs every rule of kind on req.
func (h *Handler) decide(ctx context.Context, kind string, req *admissionv1.AdmissionRequest) (field.ErrorList, error) {
	var errs field.ErrorList
	var err error
	switch kind {
	case "TerraformCluster":
		errs, err = validate(req, ValidateTerraformCluster)
	case "TerraformClusterTemplate":
		errs, err = validate(req, ValidateTerraformClusterTemplate)
	case "TerraformMachineTemplate":
		errs, err = validate(req, ValidateTerraformMachineTemplate)
	case "TerraformMachinePoolTemplate":
		errs, err = validate(req, ValidateTerraformMachinePoolTemplate)
	case "TerraformMachine":
		errs, err = validate(req, func(obj, old *infrav1.TerraformMachine) field.ErrorList {
			return append(ValidateTerraformMachine(obj, old), h.checkProviderIDs(ctx, req, obj, old)...)
		})
	case "TerraformMachinePool":
		errs, err = validate(req, func(obj, old *infrav1.TerraformMachinePool) field.ErrorList {
			return append(ValidateTerraformMachinePool(obj, old), h.checkProviderIDs(ctx, req, obj, old)...)
		})
	default:
		return nil, errors.New("unknown kind " + kind)
	}
	if err != nil {
		return nil, err
	}
	finErrs, err := h.checkFinalizer(ctx, req)
	if err != nil {
		return nil, err
	}
	errs = append(errs, finErrs...)
	specs, err := specsOf(req.Object.Raw)
	if err != nil {
		return nil, err
	}
	for _, s := range specs {
		errs = append(errs, h.RunnerPods.Check(s.Jobs, s.path.Child("jobs"))...)
		if s.Defaults != nil {
			errs = append(errs, h.RunnerPods.Check(s.Defaults.Jobs, s.path.Child("defaults", "jobs"))...)
		}
	}
	refErrs, err := h.checkReferences(ctx, req, specs)
	if err != nil {
		return nil, &internalError{err}
	}
	catalogErrs, err := h.checkCatalog(ctx, req, specs)
	if err != nil {
		return nil, &internalError{err}
	}
	return append(append(errs, refErrs...), catalogErrs...), nil
}

// deletingMetadataOnly tells an update of an object being deleted that
// leaves its spec as it was.
func deletingMetadataOnly(req *admissionv1.AdmissionRequest) bool {
	if req.Operation != admissionv1.Update {
		return false
	}
	var obj, old struct {
		Metadata struct {
			DeletionTimestamp *metav1.Time `json:"deletionTimestamp"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if json.Unmarshal(req.Object.Raw, &obj) != nil || json.Unmarshal(req.OldObject.Raw, &old) != nil || old.Metadata.DeletionTimestamp == nil {
		return false
	}
	var spec, oldSpec any
	if json.Unmarshal(obj.Spec, &spec) != nil || json.Unmarshal(old.Spec, &oldSpec) != nil {
		return len(obj.Spec) == 0 && len(old.Spec) == 0
	}
	return reflect.DeepEqual(spec, oldSpec)
}

// sameSpec tells an update that leaves the spec as it was: an object
// stored before a bound existed must still lose its finalizer, and one
// whose references are all its old ones costs no access review.
func sameSpec(req *admissionv1.AdmissionRequest) bool {
	if req.Operation != admissionv1.Update {
		return false
	}
	var obj, old struct {
		Spec json.RawMessage `json:"spec"`
	}
	if json.Unmarshal(req.Object.Raw, &obj) != nil || json.Unmarshal(req.OldObject.Raw, &old) != nil {
		return false
	}
	var spec, oldSpec any
	if json.Unmarshal(obj.Spec, &spec) != nil || json.Unmarshal(old.Spec, &oldSpec) != nil {
		return len(obj.Spec) == 0 && len(old.Spec) == 0
	}
	return reflect.DeepEqual(spec, oldSpec)
}

// asUnchanged is req as an update that writes the old object again: what
// the rules find there, the object already had.
func asUnchanged(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionRequest {
	same := req.DeepCopy()
	same.Object = req.OldObject
	return same
}

// newErrors are the errors of errs that was does not have: the same rule,
// field and value.
func newErrors(errs, was field.ErrorList) field.ErrorList {
	key := func(e *field.Error) string { return fmt.Sprintf("%s\x00%s\x00%v", e.Type, e.Field, e.BadValue) }
	had := map[string]bool{}
	for _, e := range was {
		had[key(e)] = true
	}
	var out field.ErrorList
	for _, e := range errs {
		if !had[key(e)] {
			out = append(out, e)
		}
	}
	return out
}

func deny(resp *admissionv1.AdmissionResponse, err apierrors.APIStatus) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	status := err.Status()
	resp.Result = &status
	return resp
}

// validate decodes the request's object (and old object on update) and runs
// check on them.
func validate[T any](req *admissionv1.AdmissionRequest, check func(obj, old *T) field.ErrorList) (field.ErrorList, error) {
	obj := new(T)
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	// Cluster API's topology controller marks its dry runs with an
	// annotation, which lets a template's spec differ; on a write that is
	// not a dry run the annotation means nothing.
	if m, ok := any(obj).(metav1.Object); ok && (req.DryRun == nil || !*req.DryRun) {
		if a := m.GetAnnotations(); a != nil {
			delete(a, capi.DryRunAnnotation)
		}
	}
	var old *T
	if req.Operation == admissionv1.Update {
		old = new(T)
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return nil, fmt.Errorf("decoding the old object: %w", err)
		}
	}
	return check(obj, old), nil
}

// checkIdentity refuses a provider ID write by anyone but the manager: a
// provider ID ties a Machine to real infrastructure (and to a Node).
func (h *Handler) checkIdentity(ctx context.Context, req *admissionv1.AdmissionRequest, obj metav1.Object, path *field.Path) field.ErrorList {
	user := req.UserInfo.Username
	if h.ManagerUser != "" && user == h.ManagerUser {
		return nil
	}
	// A running Cluster takes no provider ID from a restore: an object
	// made there would be a second claim on instances it already manages.
	if ok, err := h.restoring(ctx, req, obj); err != nil {
		return field.ErrorList{field.InternalError(path, fmt.Errorf("checking whether %s restores or moves the object: %w", user, err))}
	} else if ok {
		return nil
	}
	metrics.IdentityDenied.WithLabelValues(req.Kind.Kind).Inc()
	if h.ManagerUser == "" {
		return field.ErrorList{field.Forbidden(path, "only the CAPTF manager may set it, and the manager's username is unknown: set POD_NAMESPACE and SERVICE_ACCOUNT_NAME on the manager")}
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf("only the CAPTF manager (%s) may set it (or, into a paused Cluster or one not yet restored, a user with the %q verb on %s, as clusterctl move and a restore do); %s may not",
		h.ManagerUser, MoveVerb, resourceOf(req), user))}
}

// restoring tells whether req creates obj as clusterctl move or a restore
// does, objects as they were (provider IDs, and clones whose template is
// not back yet, included): its user holds the verb move, which tenants are
// not given, and the Cluster obj names (cluster-name label) is paused
// (move) or not there yet (a backup tool restores Clusters last, unpaused,
// as Velero does). Cluster API's controllers make objects only for a
// running Cluster.
func (h *Handler) restoring(ctx context.Context, req *admissionv1.AdmissionRequest, obj metav1.Object) (bool, error) {
	cluster := obj.GetLabels()[capi.ClusterNameLabel]
	if req.Operation != admissionv1.Create || h.Cluster == nil || h.Authorize == nil || cluster == "" {
		return false, nil
	}
	ok, _, err := h.Authorize(ctx, req.UserInfo, authorizationv1.ResourceAttributes{Namespace: obj.GetNamespace(), Verb: MoveVerb,
		Group: infrav1.GroupName, Resource: resourceOf(req)})
	if err != nil || !ok {
		return false, err
	}
	found, paused, err := h.Cluster(ctx, obj.GetNamespace(), cluster)
	if err != nil {
		return false, fmt.Errorf("reading Cluster %s: %w", cluster, err)
	}
	return paused || !found, nil
}

// Finalizers are CAPTF's finalizers on the kinds that hold infrastructure.
var Finalizers = map[string]string{
	"TerraformCluster":     infrav1.TerraformClusterFinalizer,
	"TerraformMachine":     infrav1.TerraformMachineFinalizer,
	"TerraformMachinePool": infrav1.TerraformMachinePoolFinalizer,
}

// ApproveVerb is the RBAC verb of approvers (manifests/approval-policy).
const ApproveVerb = "approve"

// checkFinalizer refuses the removal of CAPTF's finalizer to anyone but the
// manager: the object would go while its state and infrastructure stay, an
// abandon nobody approved, and the next object of its name would take the
// state up. A user with the verb approve (who may abandon) or move
// (clusterctl move removes the finalizers of what it moved) may.
func (h *Handler) checkFinalizer(ctx context.Context, req *admissionv1.AdmissionRequest) (field.ErrorList, error) {
	finalizer := Finalizers[req.Kind.Kind]
	if req.Operation != admissionv1.Update || finalizer == "" || h.ManagerUser != "" && req.UserInfo.Username == h.ManagerUser {
		return nil, nil
	}
	var obj, old struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return nil, fmt.Errorf("decoding the old object: %w", err)
	}
	if !slices.Contains(old.Metadata.Finalizers, finalizer) || slices.Contains(obj.Metadata.Finalizers, finalizer) {
		return nil, nil
	}
	path := field.NewPath("metadata", "finalizers")
	if h.Authorize != nil {
		for _, verb := range []string{ApproveVerb, MoveVerb} {
			ok, _, err := h.Authorize(ctx, req.UserInfo, authorizationv1.ResourceAttributes{Namespace: req.Namespace, Name: req.Name, Verb: verb,
				Group: infrav1.GroupName, Resource: resourceOf(req)})
			if err != nil {
				return field.ErrorList{field.InternalError(path, fmt.Errorf("checking whether %s may remove %s: %w", req.UserInfo.Username, finalizer, err))}, nil
			}
			if ok {
				return nil, nil
			}
		}
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf("only the CAPTF manager removes %s, once the infrastructure is destroyed or left unmanaged (a user with the verb %s or %s on %s may too). "+
		"To let the object go and keep its infrastructure: kubectl annotate %s -n %s %s %s=true",
		finalizer, ApproveVerb, MoveVerb, resourceOf(req), strings.ToLower(req.Kind.Kind), req.Namespace, req.Name, infrav1.AnnotationAbandonInfrastructure))}, nil
}

// resourceOf is the request's resource: terraformmachines or
// terraformmachinepools.
func resourceOf(req *admissionv1.AdmissionRequest) string {
	return strings.ToLower(req.Kind.Kind) + "s"
}

// MoveVerb is the RBAC verb on terraformmachines and terraformmachinepools
// that lets a user create them with their provider IDs into a paused
// Cluster: what clusterctl move does.
const MoveVerb = "move"

// checkProviderIDs refuses, to anyone but the manager, a write that sets
// or changes provider IDs (checkIdentity: restores and moves aside) or
// that moves an object holding them to another Cluster
// (providerid.Relabels).
func (h *Handler) checkProviderIDs(ctx context.Context, req *admissionv1.AdmissionRequest, obj, old metav1.Object) field.ErrorList {
	var errs field.ErrorList
	var was any // nil on a create (old is then a nil pointer, not a nil any)
	if req.Operation != admissionv1.Create {
		was = old
	}
	if providerid.Sets(was, obj) {
		_, path := providerid.Held(obj)
		errs = append(errs, h.checkIdentity(ctx, req, obj, path)...)
	}
	if was != nil && providerid.Relabels(old, obj) && (h.ManagerUser == "" || req.UserInfo.Username != h.ManagerUser) {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "labels").Key(capi.ClusterNameLabel),
			"the object holds provider IDs: it stays with its Cluster"))
	}
	return errs
}

// objectSpec is what the webhook reads of any kind's spec, or of a
// template's spec.template.spec: the module, variables and Job policies
// (spec.jobs, spec.defaults.jobs).
type objectSpec struct {
	path      *field.Path
	Module    infrav1.Module     `json:"module"`
	Variables []infrav1.Variable `json:"variables"`
	Jobs      *infrav1.JobPolicy `json:"jobs"`
	Defaults  *struct {
		Jobs *infrav1.JobPolicy `json:"jobs"`
	} `json:"defaults"`
}

func specsOf(raw []byte) ([]objectSpec, error) {
	var obj struct {
		Spec struct {
			objectSpec
			Template *struct {
				Spec objectSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	specs := []objectSpec{obj.Spec.objectSpec}
	specs[0].path = field.NewPath("spec")
	if t := obj.Spec.Template; t != nil {
		t.Spec.path = field.NewPath("spec", "template", "spec")
		specs = append(specs, t.Spec)
	}
	return specs, nil
}

// The CRD's bounds of the lists that hold references.
const (
	maxVariables = 256
	maxEnv       = 64
	maxEnvFrom   = 16
)

// listLen decodes a JSON list as its length.
type listLen int

func (n *listLen) UnmarshalJSON(b []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return err
	}
	*n = listLen(len(items))
	return nil
}

type boundedJobs struct {
	Env     listLen `json:"env"`
	EnvFrom listLen `json:"envFrom"`
}

type boundedSpec struct {
	Variables listLen      `json:"variables"`
	Jobs      *boundedJobs `json:"jobs"`
	Defaults  *struct {
		Jobs *boundedJobs `json:"jobs"`
	} `json:"defaults"`
}

// checkBounds refuses an object whose lists of references are longer than
// the CRD admits; raw may be empty (no old object).
func checkBounds(raw []byte) (field.ErrorList, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var obj struct {
		Spec struct {
			boundedSpec
			Template *struct {
				Spec boundedSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	var errs field.ErrorList
	check := func(path *field.Path, n listLen, max int) {
		if int(n) > max {
			errs = append(errs, field.TooMany(path, int(n), max))
		}
	}
	jobs := func(path *field.Path, j *boundedJobs) {
		if j != nil {
			check(path.Child("env"), j.Env, maxEnv)
			check(path.Child("envFrom"), j.EnvFrom, maxEnvFrom)
		}
	}
	spec := func(path *field.Path, s boundedSpec) {
		check(path.Child("variables"), s.Variables, maxVariables)
		jobs(path.Child("jobs"), s.Jobs)
		if s.Defaults != nil {
			jobs(path.Child("defaults", "jobs"), s.Defaults.Jobs)
		}
	}
	spec(field.NewPath("spec"), obj.Spec.boundedSpec)
	if t := obj.Spec.Template; t != nil {
		spec(field.NewPath("spec", "template", "spec"), t.Spec)
	}
	return errs, nil
}
