package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/captf/captf/pkg/metrics"
)

// TestLoopRetries: a sync that fails is retried with backoff, one that
// succeeds forgets its failures, and a conflict is retried like a failure.
func TestLoopRetries(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "a"}
	tests := map[string]struct {
		err         error
		wantRetries int
		// wantResult is the result controller_runtime_reconcile_total
		// counts; wantErrors the errors each name counts: CAPTF's own,
		// controller-runtime's (which counts a conflict).
		wantResult               string
		wantErrors, wantCRErrors float64
	}{
		"success":  {err: nil, wantRetries: 0, wantResult: "success"},
		"failure":  {err: errors.New("boom"), wantRetries: 1, wantResult: "error", wantErrors: 1, wantCRErrors: 1},
		"conflict": {err: apierrors.NewConflict(schema.GroupResource{Resource: "x"}, "a", errors.New("changed")), wantRetries: 1, wantResult: "error", wantCRErrors: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := NewLoop(ctx, "test-"+name, Context{Kube: fake.NewClientset()})
			defer l.Queue.ShutDown()
			var synced []cache.ObjectName
			l.Sync = func(_ context.Context, k cache.ObjectName) error {
				synced = append(synced, k)
				return tc.err
			}
			l.Queue.Add(key)
			if !l.processNextWorkItem(ctx) {
				t.Fatal("the loop stopped")
			}
			if len(synced) != 1 || synced[0] != key {
				t.Fatalf("synced %v, want %v once", synced, key)
			}
			if got := l.Queue.NumRequeues(key); got != tc.wantRetries {
				t.Errorf("requeues = %d, want %d", got, tc.wantRetries)
			}
			for _, result := range metrics.ReconcileResults {
				want := 0.0
				if result == tc.wantResult {
					want = 1
				}
				if got := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(l.Name, result)); got != want {
					t.Errorf("controller_runtime_reconcile_total{result=%q} = %v, want %v", result, got, want)
				}
			}
			if got := testutil.ToFloat64(metrics.ReconcileErrors.WithLabelValues(l.Name)); got != tc.wantErrors {
				t.Errorf("captf_reconcile_errors_total = %v, want %v", got, tc.wantErrors)
			}
			if got := testutil.ToFloat64(metrics.ReconcileErrorsCR.WithLabelValues(l.Name)); got != tc.wantCRErrors {
				t.Errorf("controller_runtime_reconcile_errors_total = %v, want %v", got, tc.wantCRErrors)
			}
		})
	}
}
