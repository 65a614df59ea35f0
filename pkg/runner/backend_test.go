package runner

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestBackendTellsTerraformWhatIsFinal: a state write the runner API
// refuses because the run is no longer the lock's holder (its pod gone, its
// Job refused, another run's claim) is answered 409, which terraform does
// not retry; another failure is a 500, which it retries.
func TestBackendTellsTerraformWhatIsFinal(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"the run's pod is gone":    {err: apierrors.NewUnauthorized("the token's pod is gone"), want: http.StatusConflict},
		"the run's Job is refused": {err: apierrors.NewForbidden(corev1.Resource("pods"), "p", errors.New("the pod's Job is gone")), want: http.StatusConflict},
		"another run claimed it":   {err: apierrors.NewConflict(corev1.Resource("secrets"), "tfc-c-state", errors.New("changed")), want: http.StatusConflict},
		"a bad request":            {err: apierrors.NewBadRequest("no"), want: http.StatusInternalServerError},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			s := &statestore.StateStore{Client: client, Namespace: "ns", Object: names.Object{Kind: "tfc", Name: "c"}, Backups: 2, ChunkSize: 128 << 10}
			if err := s.Claim(ctx, "run-1", false); err != nil {
				t.Fatal(err)
			}
			client.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			b := &Backend{Store: s}
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer b.Stop()
			req, _ := http.NewRequest(http.MethodPost, b.addr, bytes.NewReader([]byte(`{"serial":1}`)))
			req.SetBasicAuth("captf", b.password)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("state write refused with %v: terraform got %d, want %d", tc.err, resp.StatusCode, tc.want)
			}
		})
	}
}
