package workspace

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
)

// fakeRunRecords holds records and records each delete, in order.
type fakeRunRecords struct {
	records []metav1.PartialObjectMetadata
	deleted []string
}

func (f *fakeRunRecords) List(_ context.Context, _ string, _ names.Object) ([]metav1.PartialObjectMetadata, error) {
	return slices.Clone(f.records), nil
}

func (f *fakeRunRecords) Delete(_ context.Context, _, name string) error {
	f.deleted = append(f.deleted, name)
	return nil
}

// TestPruneRecords: records are kept by the history's limits, per
// operation and outcome, newest first; the newest of each operation stays
// even at a limit of 0 (it may hold the plan that waits).
func TestPruneRecords(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rec := func(i int, op, outcome string) metav1.PartialObjectMetadata {
		return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r%d", i), Namespace: "ns",
			OwnerReferences:   []metav1.OwnerReference{{UID: "uid"}},
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute)),
			Labels:            map[string]string{names.LabelOperation: op, names.LabelOutcome: outcome}}}
	}
	records := []metav1.PartialObjectMetadata{
		rec(1, "apply", "Succeeded"), rec(2, "apply", "Failed"), rec(3, "apply", "Failed"), rec(4, "apply", "Blocked"),
		rec(5, "apply", "Succeeded"), rec(6, "drift", "Succeeded"), rec(7, "drift", "Succeeded"), rec(8, "apply", "Failed"),
	}
	// A look-alike that is not the object's: never counted, never deleted.
	forged := rec(9, "apply", "Succeeded")
	forged.OwnerReferences = nil
	records = append(records, forged)
	tests := map[string]struct {
		succeeded, failed int32
		want              []string // deleted, newest first
	}{
		"the defaults keep all":     {succeeded: 3, failed: 3},
		"one of each":               {succeeded: 1, failed: 1, want: []string{"r6", "r4", "r3", "r2", "r1"}},
		"none kept but the newest":  {succeeded: 0, failed: 0, want: []string{"r6", "r5", "r4", "r3", "r2", "r1"}},
		"two succeeded, no failure": {succeeded: 2, failed: 0, want: []string{"r3", "r2", "r1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			fake := &fakeRunRecords{records: records}
			e := &Engine{Records: fake}
			r := &Sync{Obj: &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid"}},
				Policy: Policy{SuccessfulJobsHistoryLimit: tc.succeeded, FailedJobsHistoryLimit: tc.failed}}
			e.pruneRecords(ctx, r)
			if !slices.Equal(fake.deleted, tc.want) {
				t.Errorf("deleted %v, want %v", fake.deleted, tc.want)
			}
		})
	}
}
