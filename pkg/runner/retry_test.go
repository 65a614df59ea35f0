package runner

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/captf/captf/pkg/names"
)

// TestWriteResultRetries: a result whose write loses its connection (the
// manager's pod replaced, say) is written again, not lost; an answer that
// refuses it is not retried.
func TestWriteResultRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  []error
		wantErr   bool
		wantCalls int
	}{
		{name: "connection lost once", failures: []error{errors.New("http2: client connection lost")}, wantCalls: 2},
		{name: "service unavailable twice", failures: []error{apierrors.NewServiceUnavailable("no endpoints"), apierrors.NewServiceUnavailable("no endpoints")}, wantCalls: 3},
		{name: "forbidden", failures: []error{apierrors.NewForbidden(corev1.Resource("secrets"), "x", errors.New("no"))}, wantErr: true, wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			calls := 0
			client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= len(tc.failures) {
					return true, nil, tc.failures[calls-1]
				}
				return false, nil, nil
			})
			r := &Runner{Client: client, Config: Config{Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "c", ObjectUID: "uid", Job: "job"},
				obj: names.Object{Kind: "tfc", Name: "c"}}
			err := r.writeResult(context.Background(), &Result{Outcome: OutcomeSucceeded})
			if (err != nil) != tc.wantErr {
				t.Fatalf("writeResult: %v, want error %v", err, tc.wantErr)
			}
			if calls != tc.wantCalls {
				t.Errorf("%d creates, want %d", calls, tc.wantCalls)
			}
			if !tc.wantErr {
				if _, err := client.CoreV1().Secrets("ns").Get(context.Background(), r.obj.Result("job"), metav1.GetOptions{}); err != nil {
					t.Errorf("the result is not there: %v", err)
				}
			}
		})
	}
}
