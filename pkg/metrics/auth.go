package metrics

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// decisionTTL is how long a token's answer is reused: a scraper every
	// 30 s costs two reviews a minute at most, and a revoked permission
	// stops working within it.
	decisionTTL = 30 * time.Second
	// maxDecisions bounds the cache: junk tokens must not grow it.
	maxDecisions = 1024
	// reviewQPS bounds the reviews of tokens not seen before.
	reviewQPS, reviewBurst = 20, 40
)

// Authorizer lets through requests whose bearer token the API server
// authenticates (TokenReview) and whose user may get the request's path
// (SubjectAccessReview on the non-resource URL), as the API server's own
// /metrics does.
type Authorizer struct {
	Kube kubernetes.Interface
	// Clock times the cached decisions; nil is the real one.
	Clock clock.PassiveClock

	once      sync.Once
	reviews   flowcontrol.RateLimiter
	mu        sync.Mutex
	decisions map[[32]byte]decision
}

type decision struct {
	code    int // http.StatusOK, or the refusal
	message string
	expires time.Time
}

// Wrap serves h to the requests the API server allows.
func (a *Authorizer) Wrap(h http.Handler) http.Handler {
	a.once.Do(func() {
		a.reviews = flowcontrol.NewTokenBucketRateLimiter(reviewQPS, reviewBurst)
		a.decisions = map[[32]byte]decision{}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			http.Error(w, "Unauthorized: a bearer token is required", http.StatusUnauthorized)
			return
		}
		d := a.decide(r.Context(), token, r.Method, r.URL.Path)
		if d.code != http.StatusOK {
			http.Error(w, d.message, d.code)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (a *Authorizer) decide(ctx context.Context, token, method, path string) decision {
	key := sha256.Sum256([]byte(method + " " + path + " " + token))
	now := a.now()
	a.mu.Lock()
	d, ok := a.decisions[key]
	a.mu.Unlock()
	if ok && now.Before(d.expires) {
		return d
	}
	if !a.reviews.TryAccept() {
		return decision{code: http.StatusTooManyRequests, message: "Too many new tokens to check"}
	}
	d, err := a.review(ctx, token, method, path)
	if err != nil {
		// Not cached: the API server may answer the next scrape.
		klog.FromContext(ctx).Error(err, "Checking a metrics scrape's token")
		return decision{code: http.StatusInternalServerError, message: "Checking the token failed"}
	}
	d.expires = now.Add(decisionTTL)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.decisions) >= maxDecisions {
		for k, old := range a.decisions {
			if now.After(old.expires) {
				delete(a.decisions, k)
			}
		}
		if len(a.decisions) >= maxDecisions {
			clear(a.decisions)
		}
	}
	a.decisions[key] = d
	return d
}

// review asks the API server who the token is and whether they may get
// path.
func (a *Authorizer) review(ctx context.Context, token, method, path string) (decision, error) {
	tr, err := a.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, err
	}
	if !tr.Status.Authenticated {
		return decision{code: http.StatusUnauthorized, message: "Unauthorized: the API server does not accept the token"}, nil
	}
	u := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	verb := "get"
	if method != http.MethodGet && method != http.MethodHead {
		verb = strings.ToLower(method)
	}
	sar, err := a.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb}}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, err
	}
	if !sar.Status.Allowed {
		return decision{code: http.StatusForbidden, message: "Forbidden: user " + u.Username + " may not " + verb + " " + path}, nil
	}
	return decision{code: http.StatusOK}, nil
}

func (a *Authorizer) now() time.Time {
	if a.Clock == nil {
		return time.Now()
	}
	return a.Clock.Now()
}
