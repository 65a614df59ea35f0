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
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/captf/captf/pkg/fairshare"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
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
	// CatalogNamespace is the manager's namespace, where the catalog's
	// resolve Jobs run and its entries' credentials are; "" refuses every
	// catalog Job and credentials request.
	CatalogNamespace string
	// CatalogCredentials says why the runner of id may not read the
	// credentials Secret name of CatalogNamespace, or nil when its object
	// uses a catalog entry that names it (a resolve Job: its own entry).
	// Nil refuses every request.
	CatalogCredentials func(ctx context.Context, id *Identity, name string) error
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
	if name, ok := s.credentialsRequest(r); ok && !(id.Namespace == s.CatalogNamespace && id.runSecret(name)) {
		s.serveCredentials(ctx, w, r, id, name)
		return
	}
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

// credentialsRequest tells a read of a Secret of the catalog's namespace,
// and its name.
func (s *Server) credentialsRequest(r *http.Request) (string, bool) {
	if s.CatalogNamespace == "" {
		return "", false
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/"+s.CatalogNamespace+"/secrets/")
	return name, ok && name != "" && !strings.Contains(name, "/")
}

// serveCredentials forwards a runner's read of its catalog entry's
// credentials: only the runner's (it carries the write key, which the
// module's code never sees), and only of the entry its object uses (or,
// for a resolve Job, its own entry).
func (s *Server) serveCredentials(ctx context.Context, w http.ResponseWriter, r *http.Request, id *Identity, name string) {
	forbid := func(why string) {
		klog.FromContext(ctx).WithName("runner-api").V(2).Info("Refused", "pod", klog.KRef(id.Namespace, id.Pod), "credentials", name, "why", why)
		writeStatus(w, id.forbid("secrets", name, r.Method, why))
	}
	switch {
	case r.Method != http.MethodGet:
		forbid("a run only reads its catalog module's credentials")
	case id.Keyless || !id.writes(r):
		forbid("only a runner that carries its write key reads its catalog module's credentials")
	case s.CatalogCredentials == nil:
		forbid("this manager serves no catalog credentials")
	default:
		if err := s.CatalogCredentials(ctx, id, name); err != nil {
			forbid(err.Error())
			return
		}
		s.forward(ctx, w, http.MethodGet, r.URL.Path, "", nil)
	}
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
