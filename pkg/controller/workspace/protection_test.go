package workspace_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// TestProtectionTravelsWithState (issue 50, item 1): a TerraformCluster of
// another UID that takes a state up is held to the approval policy and
// spec.protect the state was kept under, until its own covers them or an
// approver lets them go; only then is its own recorded.
func TestProtectionTravelsWithState(t *testing.T) {
	k := kinds[0]
	obj := names.Object{Kind: k.short, Name: "prod"}
	earlier := `{"uid":"earlier-uid","policy":"Manual","protect":["net.*"]}`
	cases := []struct {
		name        string
		recorded    string
		mutate      func(o workspace.Object)
		wantProtect string // the destroy Job's names.LabelProtect, "" none
		wantCond    metav1.ConditionStatus
		wantRecord  string // the head's annotation after the sync
		wantReady   string
	}{
		{name: "its own: nothing held", recorded: ownProtection, wantRecord: ownProtection},
		{name: "an earlier object's: held to it", recorded: earlier, wantProtect: names.ProtectHash([]string{"net.*"}),
			wantCond: metav1.ConditionTrue, wantRecord: earlier},
		{name: "an earlier object's, covered by its own: recorded as its own", recorded: earlier, mutate: func(o workspace.Object) {
			tc := o.(*infrav1.TerraformCluster)
			tc.Spec.ApprovalPolicy, tc.Spec.Protect = infrav1.ApprovalPolicyManual, []string{"db", "net.*"}
		}, wantProtect: names.ProtectHash([]string{"db", "net.*"}), wantRecord: `{"uid":"obj-uid","policy":"Manual","protect":["db","net.*"]}`},
		{name: "an earlier object's, its policy but not its patterns: held to them", recorded: earlier, mutate: func(o workspace.Object) {
			o.(*infrav1.TerraformCluster).Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
		}, wantProtect: names.ProtectHash([]string{"net.*"}), wantCond: metav1.ConditionTrue, wantRecord: earlier},
		{name: "an earlier object's, let go by an approver", recorded: earlier, mutate: func(o workspace.Object) {
			o.SetAnnotations(map[string]string{infrav1.AnnotationAdoptState: "earlier-uid"})
		}, wantRecord: ownProtection},
		{name: "an approval of another UID lets nothing go", recorded: earlier, mutate: func(o workspace.Object) {
			o.SetAnnotations(map[string]string{infrav1.AnnotationAdoptState: "obj-uid"})
		}, wantProtect: names.ProtectHash([]string{"net.*"}), wantCond: metav1.ConditionTrue, wantRecord: earlier},
		{name: "none recorded: its own is", wantRecord: ownProtection},
		{name: "its own, changed since: recorded anew", recorded: ownProtection, mutate: func(o workspace.Object) {
			o.(*infrav1.TerraformCluster).Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
		}, wantRecord: `{"uid":"obj-uid","policy":"Manual"}`},
		{name: "unreadable: nothing runs", recorded: `{"protect":"x"}`, wantCond: metav1.ConditionUnknown,
			wantRecord: `{"protect":"x"}`, wantReady: workspace.ReasonProtectionUnreadable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			head := statestore.NewStateSecret("ns", obj.State(), obj, names.SecretTypeState, names.ObjectLabels(k.kind, "prod", "earlier-uid"))
			head.Annotations["captf.io/encoding"] = "gzip"
			if tc.recorded != "" {
				head.Annotations[names.AnnotationProtection] = tc.recorded
			}
			deleting := func(o workspace.Object) {
				o.WorkspaceStatus().AppliedInputsHash = "applied"
				o.SetDeletionTimestamp(&metav1.Time{})
				if tc.mutate != nil {
					tc.mutate(o)
				}
			}
			f := newFixture(t, k, newObject(k, withFinalizer(k), deleting), k.capi, append(k.kube, runtime.Object(head))...)
			f.sync()
			jobs := f.createdJobs()
			if tc.wantReady != "" {
				if r := f.readyReason(); r != tc.wantReady {
					t.Errorf("Ready reason %q, want %q", r, tc.wantReady)
				}
				if len(jobs) > 0 {
					t.Errorf("Jobs %v", jobNames(jobs))
				}
			} else if len(jobs) != 1 || jobs[0].Labels[names.LabelProtect] != tc.wantProtect {
				t.Errorf("Jobs %v, want one destroy with %s=%q", jobNames(jobs), names.LabelProtect, tc.wantProtect)
			}
			c := f.condition(infrav1.ConditionProtectionInherited)
			switch {
			case tc.wantCond == "" && c != nil && c.Status != metav1.ConditionFalse:
				t.Errorf("%s: %+v", infrav1.ConditionProtectionInherited, c)
			case tc.wantCond != "" && (c == nil || c.Status != tc.wantCond):
				t.Errorf("%s: %+v, want %s", infrav1.ConditionProtectionInherited, c, tc.wantCond)
			case tc.wantCond == metav1.ConditionTrue && !strings.Contains(c.Message, "kubectl annotate terraformcluster -n ns prod captf.io/adopt-state=earlier-uid"):
				t.Errorf("%s message %q names no way out", infrav1.ConditionProtectionInherited, c.Message)
			}
			got, err := f.kube.CoreV1().Secrets("ns").Get(context.Background(), obj.State(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if a := got.Annotations[names.AnnotationProtection]; a != tc.wantRecord {
				t.Errorf("recorded %q, want %q", a, tc.wantRecord)
			}
		})
	}
}

// TestProtectionNotRecordedUnderARunningJob: the runner of a running Job
// writes the state head at the version it read; a record written meanwhile
// would fence its state saves. The record waits for the Job to end.
func TestProtectionNotRecordedUnderARunningJob(t *testing.T) {
	k := kinds[0]
	obj := names.Object{Kind: k.short, Name: "prod"}
	head := statestore.NewStateSecret("ns", obj.State(), obj, names.SecretTypeState, names.ObjectLabels(k.kind, "prod", "obj-uid"))
	head.Annotations["captf.io/encoding"] = "gzip"
	head.Annotations[names.AnnotationProtection] = ownProtection
	f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, append(k.kube, runtime.Object(head))...)
	f.sync()
	jobs := f.createdJobs()
	if len(jobs) != 1 {
		t.Fatalf("Jobs %v, want the apply", jobNames(jobs))
	}
	f.observe(jobs...)
	f.change(func(o workspace.Object) {
		o.(*infrav1.TerraformCluster).Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	})
	f.sync()
	recorded := func() string {
		got, err := f.kube.CoreV1().Secrets("ns").Get(context.Background(), obj.State(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Annotations[names.AnnotationProtection]
	}
	if r := recorded(); r != ownProtection {
		t.Errorf("recorded %q under a running Job, want it left %q", r, ownProtection)
	}
}
