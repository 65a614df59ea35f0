package controller

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

// TestLoopRetries: a sync that fails is retried with backoff, one that
// succeeds forgets its failures, and a conflict is retried like a failure.
func TestLoopRetries(t *testing.T) {
	key := cache.ObjectName{Namespace: "ns", Name: "a"}
	tests := map[string]struct {
		err         error
		wantRetries int
	}{
		"success":  {err: nil, wantRetries: 0},
		"failure":  {err: errors.New("boom"), wantRetries: 1},
		"conflict": {err: apierrors.NewConflict(schema.GroupResource{Resource: "x"}, "a", errors.New("changed")), wantRetries: 1},
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
		})
	}
}
