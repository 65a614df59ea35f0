package workspace

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/statestore"
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
		// vouched: the records the status names (the applied one first)
		vouched []string
		want    []string // deleted, newest first
	}{
		"the defaults keep all":     {succeeded: 3, failed: 3},
		"one of each":               {succeeded: 1, failed: 1, want: []string{"r6", "r4", "r3", "r2", "r1"}},
		"none kept but the newest":  {succeeded: 0, failed: 0, want: []string{"r6", "r5", "r4", "r3", "r2", "r1"}},
		"two succeeded, no failure": {succeeded: 2, failed: 0, want: []string{"r3", "r2", "r1"}},
		// Newer look-alikes that claim to be the object's fill the limits:
		// the records the status names stay.
		"the vouched stay": {succeeded: 1, failed: 1, vouched: []string{"r1", "r3"}, want: []string{"r6", "r4", "r2"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			fake := &fakeRunRecords{records: records}
			e := &engine{Records: fake}
			obj := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid"}}
			for i, name := range tc.vouched {
				if i == 0 {
					obj.Status.AppliedRecord = name
					continue
				}
				obj.Status.LastJobs = append(obj.Status.LastJobs, infrav1.JobReference{Operation: infrav1.OperationApply, Name: "j" + name, Record: name})
			}
			r := &Sync{Obj: obj, Names: e.Names(obj), Policy: runnerjob.Policy{SuccessfulJobsHistoryLimit: tc.succeeded, FailedJobsHistoryLimit: tc.failed}}
			e.pruneRecords(ctx, r)
			if !slices.Equal(fake.deleted, tc.want) {
				t.Errorf("deleted %v, want %v", fake.deleted, tc.want)
			}
		})
	}
}

// TestReleaseDeletesLeftovers: once an object's infrastructure is destroyed,
// what its runs left goes with its state: its run inputs (a restore's too,
// of the old UID), and the results and records a restore brought back
// without their owner. Results and
// records the object owns are left to the garbage collector.
func TestReleaseDeletesLeftovers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	obj := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid"}}
	n := names.Object{Kind: "tfc", Name: "c"}
	secret := func(name, secretType, uid string, owned bool) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: names.ObjectLabels("TerraformCluster", "c", types.UID(uid))}}
		s.Labels[names.LabelSecretType] = secretType
		if owned {
			s.OwnerReferences = []metav1.OwnerReference{{UID: types.UID(uid)}}
		}
		return s
	}
	kube := fake.NewClientset(
		statestore.NewStateSecret("ns", n.State(), n, names.SecretTypeState, names.ObjectLabels("TerraformCluster", "c", "uid")),
		secret("tfc-c-apply-1-0", names.SecretTypeRunInputs, "uid", false),
		secret("tfc-c-apply-0-0", names.SecretTypeRunInputs, "old-uid", false),     // restored
		secret("tfc-c-apply-0-0-result", names.SecretTypeResult, "old-uid", false), // restored
		secret("tfc-c-apply-1-0-result", names.SecretTypeResult, "uid", true),
	)
	restored := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "tfc-c-apply-0-0-run-1", Namespace: "ns"}}
	owned := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "tfc-c-apply-1-0-run-2", Namespace: "ns",
		OwnerReferences: []metav1.OwnerReference{{UID: "uid"}}}}
	records := &fakeRunRecords{records: []metav1.PartialObjectMetadata{restored, owned}}
	e := &engine{Records: records, Kube: kube, GVK: infrav1.SchemeGroupVersion.WithKind("TerraformCluster")}
	if err := e.releaseState(ctx, obj); err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, a := range kube.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok && d.GetResource().Resource == "secrets" {
			deleted = append(deleted, d.GetName())
		}
	}
	slices.Sort(deleted)
	if want := []string{"tfc-c-apply-0-0", "tfc-c-apply-0-0-result", "tfc-c-apply-1-0", n.State()}; !slices.Equal(deleted, want) {
		t.Errorf("Secrets deleted %v, want %v", deleted, want)
	}
	if !slices.Equal(records.deleted, []string{restored.Name}) {
		t.Errorf("records deleted %v, want only the restored one", records.deleted)
	}
}
