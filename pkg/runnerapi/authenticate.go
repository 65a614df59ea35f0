package runnerapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/fairshare"
	"github.com/captf/captf/pkg/metrics"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// Who a request comes from: a token tokens.go has screened, one TokenReview
// per new token, then the pod, its Job and the Job's object.

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
	// Catalog: the Job resolves a version of a TerraformModule (Object),
	// in the manager's namespace. It reads its inputs and writes its
	// result, nothing else.
	Catalog bool
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
	catalog := owner.Kind == "TerraformModule"
	if catalog && (s.CatalogNamespace == "" || namespace != s.CatalogNamespace) {
		return nil, refuse("a catalog Job runs only in the manager's namespace")
	}
	return &Identity{Catalog: catalog, Namespace: namespace, Pod: podName, PodUID: podUID, Job: job.Name, JobUID: job.UID,
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
	case "TerraformCluster", "TerraformMachine", "TerraformMachinePool", "TerraformModule":
		return true
	}
	return false
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
