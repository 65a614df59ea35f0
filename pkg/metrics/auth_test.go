package metrics

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
)

// fakeReviews answers TokenReviews from users (token → username) and
// SubjectAccessReviews from allowed (username → allowed), counting both.
func fakeReviews(users map[string]string, allowed map[string]bool, fail bool) (*fake.Clientset, *int) {
	kube := fake.NewClientset()
	calls := 0
	kube.PrependReactor("create", "tokenreviews", func(a core.Action) (bool, runtime.Object, error) {
		calls++
		if fail {
			return true, nil, errors.New("API server unavailable")
		}
		tr := a.(core.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if u, ok := users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: u, Groups: []string{"system:authenticated"}}}
		}
		return true, tr, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(a core.Action) (bool, runtime.Object, error) {
		calls++
		sar := a.(core.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		ra := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = allowed[sar.Spec.User] && ra != nil && ra.Path == "/metrics" && ra.Verb == "get" && sar.Spec.ResourceAttributes == nil
		return true, sar, nil
	})
	return kube, &calls
}

func TestAuthorizer(t *testing.T) {
	users := map[string]string{"reader-token": "system:serviceaccount:monitoring:prometheus-k8s", "other-token": "system:serviceaccount:team-a:app"}
	allowed := map[string]bool{"system:serviceaccount:monitoring:prometheus-k8s": true}
	for _, tc := range []struct {
		name   string
		header string
		fail   bool
		want   int
	}{
		{"no token", "", false, http.StatusUnauthorized},
		{"not a bearer token", "Basic dXNlcjpwYXNz", false, http.StatusUnauthorized},
		{"a token the API server rejects", "Bearer forged", false, http.StatusUnauthorized},
		{"a user without get on /metrics", "Bearer other-token", false, http.StatusForbidden},
		{"a user bound to captf-metrics-reader", "Bearer reader-token", false, http.StatusOK},
		{"the API server fails", "Bearer reader-token", true, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube, _ := fakeReviews(users, allowed, tc.fail)
			h := (&Authorizer{Kube: kube}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("series")) }))
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d, want %d (%s)", rec.Code, tc.want, rec.Body)
			}
			if (rec.Body.String() == "series") != (tc.want == http.StatusOK) {
				t.Errorf("body %q", rec.Body)
			}
		})
	}
}

// TestAuthorizerCaches: a scraper every few seconds costs one review pair
// per token until the answer expires; failures are not cached.
func TestAuthorizerCaches(t *testing.T) {
	kube, calls := fakeReviews(map[string]string{"reader-token": "reader", "other-token": "other"}, map[string]bool{"reader": true}, false)
	a := &Authorizer{Kube: kube}
	h := a.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	scrape := func(token string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 5 {
		if code := scrape("reader-token"); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
		if code := scrape("other-token"); code != http.StatusForbidden {
			t.Fatalf("status %d", code)
		}
	}
	if *calls != 4 {
		t.Errorf("%d reviews for 10 scrapes by two tokens, want 4 (a TokenReview and a SubjectAccessReview each)", *calls)
	}
}
