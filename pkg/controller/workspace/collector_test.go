package workspace

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

var t0 = time.Unix(1_000_000, 0)

func collectedCluster(name string, mutate func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name + "-uid")}}
	if mutate != nil {
		mutate(tc)
	}
	return tc
}

func collectedJob(object, op string, age time.Duration, failed *bool, annotations map[string]string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: object + "-" + op + "-" + age.String(), Namespace: "ns",
		CreationTimestamp: metav1.NewTime(t0.Add(-age)), Annotations: annotations,
		Labels:          map[string]string{names.LabelObjectUID: object + "-uid", names.LabelOperation: op},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformCluster", Name: object, UID: types.UID(object + "-uid"), Controller: ptr.To(true)}}}}
	if failed != nil {
		c := batchv1.JobComplete
		if *failed {
			c = batchv1.JobFailed
		}
		j.Status.Conditions = []batchv1.JobCondition{{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-age + time.Minute))}}
	}
	return j
}

func condition(t, reason string, status metav1.ConditionStatus) metav1.Condition {
	return metav1.Condition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}
}

// TestCollector: the series come from the caches as they are now: Ready
// with its reason, drift, a missing state, the newest finished Job of each
// operation, the last success (status or Job), deletion, sizes, active Jobs.
func TestCollector(t *testing.T) {
	applied := metav1.NewTime(t0.Add(-2 * time.Hour))
	driftCheck := metav1.NewTime(t0.Add(-30 * time.Minute))
	deleted := metav1.NewTime(t0.Add(-10 * time.Minute))
	objects := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, tc := range []*infrav1.TerraformCluster{
		collectedCluster("healthy", func(tc *infrav1.TerraformCluster) {
			tc.Status.AppliedInputsHash, tc.Status.LastAppliedTime, tc.Status.LastDriftCheckTime = "h", &applied, &driftCheck
			tc.Status.Conditions = []metav1.Condition{condition("Ready", "Applied", metav1.ConditionTrue), condition("Drifted", ReasonNoDrift, metav1.ConditionFalse)}
		}),
		// Its last drift check failed: that is no success.
		collectedCluster("checkfails", func(tc *infrav1.TerraformCluster) {
			tc.Status.AppliedInputsHash, tc.Status.LastAppliedTime, tc.Status.LastDriftCheckTime = "h", &applied, &driftCheck
			tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Minute}}
			tc.Status.Conditions = []metav1.Condition{condition("Ready", "Applied", metav1.ConditionTrue), condition("Drifted", ReasonDriftCheckFailed, metav1.ConditionUnknown)}
		}),
		collectedCluster("broken", func(tc *infrav1.TerraformCluster) {
			tc.Status.Conditions = []metav1.Condition{condition("Ready", ReasonApplyFailed, metav1.ConditionFalse)}
		}),
		// Never applied, its first plan waits for an approval.
		collectedCluster("waiting", func(tc *infrav1.TerraformCluster) {
			tc.Status.Conditions = []metav1.Condition{condition("Ready", "PlanAwaitingApproval", metav1.ConditionFalse),
				condition("PlanAwaitingApproval", ReasonAwaitingApproval, metav1.ConditionTrue),
				condition("DestructivePlanBlocked", ReasonNoPlanAwaitingApproval, metav1.ConditionFalse)}
		}),
		collectedCluster("lost", func(tc *infrav1.TerraformCluster) {
			tc.Status.AppliedInputsHash = "h"
			tc.Spec.Drift = &infrav1.DriftPolicy{Enabled: ptr.To(false)}
			tc.DeletionTimestamp = &deleted
			tc.Status.Conditions = []metav1.Condition{condition("Ready", ReasonStateMissing, metav1.ConditionFalse),
				condition("StateMissing", ReasonStateMissing, metav1.ConditionTrue), condition("Drifted", ReasonDriftDetected, metav1.ConditionTrue)}
		}),
	} {
		if err := objects.Add(tc); err != nil {
			t.Fatal(err)
		}
	}
	yes, no := true, false
	jobs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, runnerjob.Indexers)
	for _, j := range []*batchv1.Job{
		// healthy: a drift check that succeeded 5 minutes ago (newer than
		// its status), and one running now.
		collectedJob("healthy", "drift", 6*time.Minute, &no, nil),
		collectedJob("healthy", "drift", time.Second, nil, nil),
		collectedJob("healthy", "apply", 3*time.Hour, &no, map[string]string{names.AnnotationInputsBytes: "2048"}),
		// broken: failed, then a retry runs: still failing.
		collectedJob("broken", "apply", 3*time.Minute, &yes, map[string]string{names.AnnotationInputsBytes: "900"}),
		collectedJob("broken", "apply", 2*time.Minute, nil, map[string]string{names.AnnotationInputsBytes: "1000"}),
		// A destroy that failed before one that succeeded: not failing.
		collectedJob("lost", "destroy", 20*time.Minute, &yes, nil),
		collectedJob("lost", "destroy", 10*time.Minute, &no, nil),
	} {
		if err := jobs.Add(runnerjob.Trim(j)); err != nil {
			t.Fatal(err)
		}
	}
	states := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	head := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: names.Object{Kind: "tfc", Name: "healthy"}.State(), Namespace: "ns",
		Annotations: map[string]string{"captf.io/uncompressed-bytes": "4096"}}}
	if err := states.Add(CacheStateSecret(head)); err != nil {
		t.Fatal(err)
	}
	e := &engine{GVK: infrav1.SchemeGroupVersion.WithKind("TerraformCluster"), JobIndex: jobs, DriftDefaultInterval: 30 * time.Minute,
		StateSecrets: states}
	c := &Collector{MaxStateBytes: 1 << 20}
	c.add(e, objects)

	want := `
# HELP captf_deletion_timestamp_seconds When the object was deleted, while CAPTF still holds it (destroying, or waiting).
# TYPE captf_deletion_timestamp_seconds gauge
captf_deletion_timestamp_seconds{kind="TerraformCluster",name="lost",namespace="ns"} 999400
# HELP captf_drift_interval_seconds The drift check interval of an applied object whose drift checks are on.
# TYPE captf_drift_interval_seconds gauge
captf_drift_interval_seconds{kind="TerraformCluster",name="checkfails",namespace="ns"} 600
captf_drift_interval_seconds{kind="TerraformCluster",name="healthy",namespace="ns"} 1800
# HELP captf_drifted 1 when the object's last drift check found its infrastructure changed outside CAPTF.
# TYPE captf_drifted gauge
captf_drifted{kind="TerraformCluster",name="broken",namespace="ns"} 0
captf_drifted{kind="TerraformCluster",name="checkfails",namespace="ns"} 0
captf_drifted{kind="TerraformCluster",name="healthy",namespace="ns"} 0
captf_drifted{kind="TerraformCluster",name="lost",namespace="ns"} 1
captf_drifted{kind="TerraformCluster",name="waiting",namespace="ns"} 0
# HELP captf_inputs_bytes Size of the inputs rendered for the object's newest Job.
# TYPE captf_inputs_bytes gauge
captf_inputs_bytes{kind="TerraformCluster",name="broken",namespace="ns"} 1000
captf_inputs_bytes{kind="TerraformCluster",name="healthy",namespace="ns"} 2048
# HELP captf_job_failing 1 when the newest finished Job of the operation failed (retries with backoff keep it 1 until one succeeds), else 0.
# TYPE captf_job_failing gauge
captf_job_failing{kind="TerraformCluster",name="broken",namespace="ns",operation="apply"} 1
captf_job_failing{kind="TerraformCluster",name="healthy",namespace="ns",operation="apply"} 0
captf_job_failing{kind="TerraformCluster",name="healthy",namespace="ns",operation="drift"} 0
captf_job_failing{kind="TerraformCluster",name="lost",namespace="ns",operation="destroy"} 0
# HELP captf_jobs_active Runner Jobs not finished, by kind and operation.
# TYPE captf_jobs_active gauge
captf_jobs_active{kind="TerraformCluster",operation="apply"} 1
captf_jobs_active{kind="TerraformCluster",operation="destroy"} 0
captf_jobs_active{kind="TerraformCluster",operation="drift"} 1
# HELP captf_last_success_timestamp_seconds When a Job of the object last succeeded (apply, refresh or drift check).
# TYPE captf_last_success_timestamp_seconds gauge
captf_last_success_timestamp_seconds{kind="TerraformCluster",name="checkfails",namespace="ns"} 992800
captf_last_success_timestamp_seconds{kind="TerraformCluster",name="healthy",namespace="ns"} 999700
captf_last_success_timestamp_seconds{kind="TerraformCluster",name="lost",namespace="ns"} 999460
# HELP captf_ready 1 when the object's Ready condition is True, else 0; reason is the condition's reason.
# TYPE captf_ready gauge
captf_ready{kind="TerraformCluster",name="broken",namespace="ns",reason="ApplyFailed"} 0
captf_ready{kind="TerraformCluster",name="checkfails",namespace="ns",reason="Applied"} 1
captf_ready{kind="TerraformCluster",name="healthy",namespace="ns",reason="Applied"} 1
captf_ready{kind="TerraformCluster",name="lost",namespace="ns",reason="StateMissing"} 0
captf_ready{kind="TerraformCluster",name="waiting",namespace="ns",reason="PlanAwaitingApproval"} 0
# HELP captf_state_bytes Uncompressed size of the object's Terraform state.
# TYPE captf_state_bytes gauge
captf_state_bytes{kind="TerraformCluster",name="healthy",namespace="ns"} 4096
# HELP captf_state_max_bytes The largest state CAPTF reads (--max-state-bytes): a larger one stops the object with StateTooLarge.
# TYPE captf_state_max_bytes gauge
captf_state_max_bytes 1.048576e+06
# HELP captf_state_missing 1 while an applied object's state Secret is missing: nothing runs for it until a backup is restored.
# TYPE captf_state_missing gauge
captf_state_missing{kind="TerraformCluster",name="broken",namespace="ns"} 0
captf_state_missing{kind="TerraformCluster",name="checkfails",namespace="ns"} 0
captf_state_missing{kind="TerraformCluster",name="healthy",namespace="ns"} 0
captf_state_missing{kind="TerraformCluster",name="lost",namespace="ns"} 1
captf_state_missing{kind="TerraformCluster",name="waiting",namespace="ns"} 0
# HELP captf_waiting_since_timestamp_seconds Since when the object waits: since its Ready condition turned False (reason: Ready's), or since a plan of it began to wait for an approval (reason: PlanAwaitingApproval or DestructivePlanBlocked). None while it waits for nothing.
# TYPE captf_waiting_since_timestamp_seconds gauge
captf_waiting_since_timestamp_seconds{kind="TerraformCluster",name="broken",namespace="ns",reason="ApplyFailed"} 996400
captf_waiting_since_timestamp_seconds{kind="TerraformCluster",name="lost",namespace="ns",reason="StateMissing"} 996400
captf_waiting_since_timestamp_seconds{kind="TerraformCluster",name="waiting",namespace="ns",reason="PlanAwaitingApproval"} 996400
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "captf_ready", "captf_drifted", "captf_state_missing", "captf_job_failing",
		"captf_last_success_timestamp_seconds", "captf_drift_interval_seconds", "captf_deletion_timestamp_seconds", "captf_state_bytes",
		"captf_inputs_bytes", "captf_jobs_active", "captf_state_max_bytes", "captf_waiting_since_timestamp_seconds"); err != nil {
		t.Error(err)
	}

	// A deleted object's series go with it.
	if err := objects.Delete(collectedCluster("lost", nil)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "captf_ready"); n != 4 {
		t.Errorf("%d captf_ready series after a delete, want 4", n)
	}
}
