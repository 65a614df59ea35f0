// Package runnerapi is the manager's runner API: the only way a runner pod
// reaches the API server. A runner pod holds no token the API server
// accepts; it presents a token of its ServiceAccount with the CAPTF audience,
// bound to the pod. The manager checks it with a TokenReview, finds the pod,
// the pod's Job and the Job's Terraform* object, and then forwards, with its
// own rights, only what that object's run needs: its state, state chunks,
// backups, durable inputs and lock, this Job's inputs, result and run
// record, and the phase of a pod that holds its lock. Everything else is
// refused.
//
// The API speaks the Kubernetes REST paths of those objects, so the runner
// uses client-go against it unchanged, and the state store keeps its fenced,
// chunked writes: a request carries at most one Secret (a chunk), so the
// manager never holds a whole state, and any replica can serve any request.
package runnerapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/fairshare"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

const (
	// identityTTL is how long a checked token is trusted without a new
	// TokenReview: a deleted pod's token stops working within it.
	identityTTL = 10 * time.Second
	// maxBody bounds a request body: one Secret (a state chunk is 768 KiB,
	// base64 in JSON about 1 MiB).
	maxBody = 2 << 20
	// maxInFlight bounds the requests forwarded at once, shared fairly by
	// namespace; a request takes its slot only once its body is read, so a
	// client that sends slowly holds none. maxPerPod bounds one pod's
	// requests, bodies being read included (a hostile module holding
	// connections open): a runner needs two or three.
	maxInFlight = 16
	maxPerPod   = 4
	// bodyTimeout bounds the reading of one request's body: a chunk is
	// 1 MiB.
	bodyTimeout = 10 * time.Second
	// reviewQPS bounds the TokenReviews of tokens not seen before, per
	// source address, per namespace the token is of, and for all: junk
	// tokens must not spend the manager's API budget, and one source's or
	// namespace's junk not the others' share of it. A token that cannot be
	// a runner's (tokens.go) spends none.
	reviewQPS, reviewBurst             = 100, 200
	sourceReviewQPS, sourceReviewBurst = 20, 40
	nsReviewQPS, nsReviewBurst         = 20, 40
	// knownTokenTTL is how long a token stays known as valid after its
	// identity expires: it is checked again without the budget of new ones
	// (runner tokens live 10 minutes).
	knownTokenTTL = 15 * time.Minute
	// maxReading bounds the bodies read or held at once (2 MiB each at
	// most), and so their memory; one namespace holds at most half.
	maxReading = 32
)

// forwardedQuery are the query parameters a run uses; the rest (watch,
// say) are dropped.
var forwardedQuery = []string{"resourceVersion", "fieldManager", "fieldValidation", "timeout"}

// Server serves the runner API. Kube is the manager's client (TokenReviews,
// pods, Jobs); Config is the manager's client config, used to forward.
type Server struct {
	Kube   kubernetes.Interface
	Config *rest.Config
	// Clock times the cached token reviews; nil is the real one.
	Clock clock.PassiveClock
	// StateBackups and MaxStateBytes are the manager's --state-backups and
	// --max-state-bytes: a runner creates no more of its object's state
	// family than they let a run make.
	StateBackups  int
	MaxStateBytes int64
	// CachedJob finds a Job in the leader's cache of the Jobs CAPTF
	// labelled as its own: the check of a runner's Job then makes no
	// request. Nil, or a Job not found there (a standby replica, a Job
	// too new for the cache, another with the same name), is read from the
	// API server.
	CachedJob func(namespace, name string) *batchv1.Job
	// ResultWritten is told of each result a runner wrote through this
	// replica, once the API server took it: the leader's readers of the
	// result then need no request. Nil on a standby.
	ResultWritten func(job types.UID, data map[string][]byte)
	// RunInputs hands over, once, the run-inputs Secret namespace/name the
	// leader's controllers just created: a runner's first read of its
	// inputs then makes no request. Nil, or nil returned (a standby, a
	// second read), reads it from the API server.
	RunInputs func(namespace, name string) *corev1.Secret
	// JWKS reads the API server's token signing keys (a JWKS document);
	// nil reads /openid/v1/jwks with the manager's client.
	JWKS func(ctx context.Context) ([]byte, error)

	meta metadata.Interface

	once              sync.Once
	client            *http.Client
	host              string
	initErr           error
	inFlight, reading *fairshare.Slots

	// sourceReviews and nsReviews are the budgets of TokenReviews by
	// source address, and by namespace beside all namespaces'; keys are
	// the API server's token signing keys.
	sourceReviews, nsReviews *fairshare.RateLimits
	keys                     *issuerKeys

	mu         sync.Mutex
	identities map[[32]byte]cachedIdentity
	perPod     map[types.UID]int
}

type cachedIdentity struct {
	id      *Identity
	expires time.Time
}

// Identity is who a request comes from: a runner pod of a Job of an object.
type Identity struct {
	Namespace string
	Pod       string
	PodUID    types.UID
	Job       string
	JobUID    types.UID
	Object    names.Object
	// ObjectRef is the object as its owner reference names it.
	ObjectRef metav1.OwnerReference
	// ReadOnly: the Job only plans (a drift check), and may write none of
	// the object's state family: module code it runs at plan time must not
	// rewrite the state the next destroy reads.
	ReadOnly bool
	// WriteKey is the Job's run.EnvWriteKey. A Job made before write keys
	// has none (Keyless), and its pod writes with its token alone.
	WriteKey string
	Keyless  bool
}

// writes tells whether r comes from the runner itself, which holds the
// Job's write key: every other process of the pod (terraform, providers,
// the module's programs) has the pod's token too, and only reads.
func (id *Identity) writes(r *http.Request) bool {
	return id.Keyless || run.WriteKeyMatches(id.WriteKey, r.Header.Get(run.HeaderWriteKey))
}

func (s *Server) init() error {
	s.once.Do(func() {
		s.inFlight = fairshare.NewSlots(maxInFlight, maxInFlight/2)
		s.inFlight.OnWait = metrics.SlotWaitCounter(metrics.ServerRunnerAPI, metrics.SlotsForwarding)
		s.reading = fairshare.NewSlots(maxReading, maxReading/2)
		s.reading.OnWait = metrics.SlotWaitCounter(metrics.ServerRunnerAPI, metrics.SlotsReading)
		s.identities = map[[32]byte]cachedIdentity{}
		s.perPod = map[types.UID]int{}
		s.sourceReviews = fairshare.NewRateLimits(sourceReviewQPS, sourceReviewBurst, 0, 0)
		s.nsReviews = fairshare.NewRateLimits(nsReviewQPS, nsReviewBurst, reviewQPS, reviewBurst)
		cfg := rest.CopyConfig(s.Config)
		if s.meta, s.initErr = metadata.NewForConfig(cfg); s.initErr != nil {
			return
		}
		s.client, s.initErr = rest.HTTPClientFor(cfg)
		s.host = strings.TrimRight(cfg.Host, "/")
		if !strings.Contains(s.host, "://") {
			s.host = "https://" + s.host
		}
		s.keys = &issuerKeys{fetch: s.JWKS, now: s.now}
		if s.keys.fetch == nil {
			s.keys.fetch = fetchJWKS(s.client, s.host)
		}
	})
	return s.initErr
}

// ServeHTTP authenticates, authorizes and forwards one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.init(); err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return
	}
	ctx := r.Context()
	logger := klog.FromContext(ctx).WithName("runner-api")
	id, err := s.bearer(ctx, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	// A pod over its share is told to come back (client-go retries a 429
	// after Retry-After); the others wait for a slot.
	if !s.take(id.PodUID) {
		metrics.RunnerAPIRefused.WithLabelValues(id.Namespace, "pod_share").Inc()
		writeStatus(w, apierrors.NewTooManyRequests("too many requests from this pod at once", 1))
		return
	}
	defer s.give(id.PodUID)
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		doneReading, err := s.reading.Acquire(ctx, id.Namespace)
		if err != nil {
			return
		}
		defer doneReading() // the body is held until the request is done
	}
	body, err := readBody(w, r)
	if err != nil {
		writeStatus(w, err)
		return
	}
	release, err := s.inFlight.Acquire(ctx, id.Namespace)
	if err != nil {
		return
	}
	defer release()
	req, err := id.authorize(r, body)
	if err != nil {
		logger.V(2).Info("Refused", "pod", klog.KRef(id.Namespace, id.Pod), "method", r.Method, "path", r.URL.Path, "err", err)
		writeStatus(w, err)
		return
	}
	if req.pod != "" {
		s.servePod(ctx, w, id, req.pod)
		return
	}
	if req.runInputs != "" && s.RunInputs != nil {
		// Made for this object (a Job's name is its namespace's own), and
		// as the API server would serve it.
		if sec := s.RunInputs(id.Namespace, req.runInputs); sec != nil && sec.Labels[names.LabelObjectUID] == string(id.ObjectRef.UID) {
			out := sec.DeepCopy()
			out.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	if req.head != nil {
		if err := s.checkProtection(ctx, id, r.Method, req.head); err != nil {
			logger.V(2).Info("Refused", "pod", klog.KRef(id.Namespace, id.Pod), "method", r.Method, "path", r.URL.Path, "err", err)
			writeStatus(w, err)
			return
		}
	}
	if req.created != nil {
		if err := s.checkFamilySize(ctx, id, req.created); err != nil {
			logger.V(2).Info("Refused", "pod", klog.KRef(id.Namespace, id.Pod), "method", r.Method, "path", r.URL.Path, "err", err)
			writeStatus(w, err)
			return
		}
	}
	code := s.forward(ctx, w, r.Method, r.URL.Path, forwardedQueryOf(r), req.body) // the path checked, not its encoding
	if req.result != nil && code/100 == 2 && s.ResultWritten != nil {
		s.ResultWritten(id.JobUID, req.result.Data)
	}
}

// bearer is the runner a request comes from, by its bearer token; an
// error is the answer to give.
func (s *Server) bearer(ctx context.Context, r *http.Request) (*Identity, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return nil, apierrors.NewUnauthorized("a runner token (audience " + names.RunnerTokenAudience + ") is required")
	}
	id, err := s.authenticate(ctx, token, fairshare.Source(r))
	if err != nil {
		var status apierrors.APIStatus
		if !errors.As(err, &status) {
			klog.FromContext(ctx).WithName("runner-api").Error(err, "Checking a runner token")
			err = apierrors.NewInternalError(errors.New("checking the token failed"))
		}
		return nil, err
	}
	return id, nil
}

// forwardedQueryOf is the part of r's query the API server is given.
func forwardedQueryOf(r *http.Request) string {
	query := url.Values{}
	for _, k := range forwardedQuery {
		if v, ok := r.URL.Query()[k]; ok {
			query[k] = v
		}
	}
	return query.Encode()
}

func (s *Server) take(pod types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perPod[pod] >= maxPerPod {
		return false
	}
	s.perPod[pod]++
	return true
}

func (s *Server) give(pod types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perPod[pod]--; s.perPod[pod] <= 0 {
		delete(s.perPod, pod)
	}
}

// authenticate turns a token into the identity of its pod.
func (s *Server) authenticate(ctx context.Context, token, source string) (*Identity, error) {
	key := sha256.Sum256([]byte(token))
	now := s.now()
	s.mu.Lock()
	c, known := s.identities[key]
	s.mu.Unlock()
	if known && now.Before(c.expires) {
		return c.id, nil
	}
	// A token that was valid is checked again without a budget: junk
	// tokens, which spend it, must not delay a running apply's.
	if !known {
		if err := s.budgetNewToken(ctx, token, source, now); err != nil {
			return nil, err
		}
	}
	review, err := s.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{names.RunnerTokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, unavailable(err)
	}
	st := review.Status
	if !st.Authenticated || !slices.Contains(st.Audiences, names.RunnerTokenAudience) {
		return nil, apierrors.NewUnauthorized("the token is not a valid runner token")
	}
	namespace, _, ok := strings.Cut(strings.TrimPrefix(st.User.Username, "system:serviceaccount:"), ":")
	podName, podUID := first(st.User.Extra["authentication.kubernetes.io/pod-name"]), first(st.User.Extra["authentication.kubernetes.io/pod-uid"])
	if !ok || !strings.HasPrefix(st.User.Username, "system:serviceaccount:") || podName == "" || podUID == "" {
		return nil, apierrors.NewUnauthorized("the token is not bound to a pod")
	}
	var id *Identity
	if known && c.id.Namespace == namespace && c.id.Pod == podName && c.id.PodUID == types.UID(podUID) {
		// The token is still valid, so its pod is there with the same UID
		// (a bound token dies with its pod): only its Job may have gone.
		id, err = c.id, s.jobStillThere(ctx, c.id)
	} else {
		id, err = s.identify(ctx, namespace, podName, types.UID(podUID))
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for k, c := range s.identities {
		if now.After(c.expires.Add(knownTokenTTL)) {
			delete(s.identities, k)
		}
	}
	s.identities[key] = cachedIdentity{id: id, expires: now.Add(identityTTL)}
	s.mu.Unlock()
	return id, nil
}

// budgetNewToken refuses a token not seen before that cannot be a runner's,
// or whose source, namespace or all of them have checked their share of
// new tokens: what passes may cost a TokenReview.
func (s *Server) budgetNewToken(ctx context.Context, token, source string, now time.Time) error {
	ns, verified, err := claimedNamespace(ctx, token, now, s.keys)
	if err != nil {
		metrics.RunnerAPIRefused.WithLabelValues("", "not_a_runner_token").Inc()
		klog.FromContext(ctx).WithName("runner-api").V(4).Info("Refused a token before its review", "source", source, "err", err)
		if errors.Is(err, errKeyNotKnown) {
			// A key rotated in since the keys were read (at most every
			// refetchAfter): a runner waits for the next read.
			return apierrors.NewTooManyRequests("the token's signing key is not known yet", 5)
		}
		return apierrors.NewUnauthorized("the token is not a valid runner token")
	}
	if s.sourceReviews.TryAccept(source) != fairshare.Accepted {
		metrics.RunnerAPIRefused.WithLabelValues("", "new_tokens_source").Inc()
		return apierrors.NewTooManyRequests("too many new tokens to check from this address", 1)
	}
	// A namespace label only when the token's signature said it: claims
	// anyone can write would make series without bound.
	label := ""
	if verified {
		label = ns
	}
	switch s.nsReviews.TryAccept(ns) {
	case fairshare.OverKeyRate:
		metrics.RunnerAPIRefused.WithLabelValues(label, "new_tokens_namespace").Inc()
		return apierrors.NewTooManyRequests("too many new tokens to check for namespace "+ns, 1)
	case fairshare.OverSharedRate:
		metrics.RunnerAPIRefused.WithLabelValues(label, "new_tokens_shared").Inc()
		return apierrors.NewTooManyRequests("too many new tokens to check", 1)
	}
	return nil
}

// identify follows the pod to its Job and the Job to its object: both must
// be controlled by what CAPTF made.
func (s *Server) identify(ctx context.Context, namespace, podName string, podUID types.UID) (*Identity, error) {
	refuse := func(why string) error {
		return apierrors.NewForbidden(corev1.Resource("pods"), podName, errors.New(why))
	}
	pod, err := s.Kube.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewUnauthorized("the token's pod is gone")
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if pod.UID != podUID {
		return nil, apierrors.NewUnauthorized("the token's pod is gone")
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != "batch/v1" {
		return nil, refuse("the pod is not a runner Job's")
	}
	job, err := s.job(ctx, namespace, ref)
	if apierrors.IsNotFound(err) {
		return nil, refuse("the pod's Job is gone")
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if job.UID != ref.UID || job.Labels[names.LabelManagedBy] != names.ManagedByValue {
		return nil, refuse("the pod's Job is not CAPTF's")
	}
	owner := metav1.GetControllerOf(job)
	if owner == nil || !strings.HasPrefix(owner.APIVersion, infrav1.SchemeGroupVersion.Group+"/") || !isKind(owner.Kind) ||
		job.Labels[names.LabelObjectUID] != string(owner.UID) {
		return nil, refuse("the pod's Job belongs to no Terraform object")
	}
	key, keyed := run.WriteKeyOf(&job.Spec.Template.Spec)
	return &Identity{Namespace: namespace, Pod: podName, PodUID: podUID, Job: job.Name, JobUID: job.UID,
		ReadOnly: job.Labels[names.LabelOperation] == string(infrav1.OperationDrift),
		WriteKey: key, Keyless: !keyed,
		Object:    names.ObjectOf(owner.Kind, owner.Name),
		ObjectRef: metav1.OwnerReference{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}}, nil
}

// jobStillThere checks again that the Job of an identity checked before is
// there: an orphaned runner pod, whose Job was deleted, loses its identity.
func (s *Server) jobStillThere(ctx context.Context, id *Identity) error {
	job, err := s.job(ctx, id.Namespace, &metav1.OwnerReference{Name: id.Job, UID: id.JobUID})
	if apierrors.IsNotFound(err) || (err == nil && job.UID != id.JobUID) {
		return apierrors.NewForbidden(corev1.Resource("pods"), id.Pod, errors.New("the pod's Job is gone"))
	}
	if err != nil {
		return unavailable(err)
	}
	return nil
}

// job is the Job ref names, from the cache when it holds that Job (the same
// UID), else from the API server. A cached Job is at most a watch event
// behind: the token, reviewed every identityTTL, dies with its pod, which
// is what a deleted run loses first.
func (s *Server) job(ctx context.Context, namespace string, ref *metav1.OwnerReference) (*batchv1.Job, error) {
	if s.CachedJob != nil {
		if job := s.CachedJob(namespace, ref.Name); job != nil && job.UID == ref.UID {
			return job, nil
		}
	}
	return s.Kube.BatchV1().Jobs(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
}

// unavailable is an error of the manager's own request, told to a runner
// as 503: the manager's own 401 or 403 (its RBAC) says nothing of the run,
// and a runner reads those as its lock being lost.
func unavailable(err error) error {
	klog.Background().WithName("runner-api").Error(err, "Checking a runner's identity")
	return apierrors.NewServiceUnavailable("the manager could not check the runner's identity: " + err.Error())
}

func isKind(kind string) bool {
	switch kind {
	case "TerraformCluster", "TerraformMachine", "TerraformMachinePool":
		return true
	}
	return false
}

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
		readable := id.Object.HoldsState(name) || name == id.Object.RunInputs(id.Job) || name == id.Object.Result(id.Job)
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

// servePod answers with only the identity and phase of a pod of the same
// object: what telling a stale lock holder needs.
func (s *Server) servePod(ctx context.Context, w http.ResponseWriter, id *Identity, name string) {
	pod, err := s.Kube.CoreV1().Pods(id.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil && pod.Labels[names.LabelManagedBy] != names.ManagedByValue {
		// Not "not found": a holder whose label someone removed still
		// runs, and a runner reads "not found" as a lock free to take.
		err = apierrors.NewForbidden(corev1.Resource("pods"), name, errors.New("not a pod of CAPTF's"))
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	out := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, DeletionTimestamp: pod.DeletionTimestamp},
		Status:     corev1.PodStatus{Phase: pod.Status.Phase}}
	writeJSON(w, http.StatusOK, out)
}

// forward sends the request to the API server with the manager's
// credentials and streams the answer back; it returns the answer's status
// code (0: none came).
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, method, path, query string, body []byte) int {
	target := s.host + path
	if query != "" {
		target += "?" + query
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err))
		return 0
	}
	// Only these headers: never the runner's Authorization, never an
	// Impersonate-* header.
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "captf-manager/runner-api")
	resp, err := s.client.Do(req)
	if err != nil {
		writeStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return 0
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	return resp.StatusCode
}

func writeStatus(w http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	st := status.Status()
	st.APIVersion, st.Kind = "v1", "Status"
	// client-go, and the runner's own retries, wait as told.
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	writeJSON(w, int(st.Code), &st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func schemaResource(resource string) schema.GroupResource {
	if resource == "leases" {
		return coordinationv1.Resource(resource)
	}
	return corev1.Resource(resource)
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
