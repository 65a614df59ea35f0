package manager

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/intern"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

// TestCacheTransform: what the informers cache keeps every field CAPTF
// reads, without managedFields, a Job without its spec; applied again (an
// informer may hand a transformed object back) it changes nothing.
func TestCacheTransform(t *testing.T) {
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "obj", Namespace: "tenant", UID: "u1", ResourceVersion: "7",
			Labels:          map[string]string{names.LabelOperation: "apply", names.LabelObjectUID: "u1"},
			Annotations:     map[string]string{names.AnnotationInputsBytes: "100"},
			Finalizers:      []string{"infrastructure.cluster.x-k8s.io/captf"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: "c", UID: "c1"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}
	}
	withoutManagedFields := meta()
	withoutManagedFields.ManagedFields = nil
	asCachedObject := withoutManagedFields // a Job's annotation, not one a Terraform* object keeps
	asCachedObject.Annotations = nil
	yes, zero, two := true, int32(0), int32(2)
	start, done := metav1.Unix(100, 0), metav1.Unix(200, 0)
	jobMeta := metav1.ObjectMeta{Name: "tfm-m-drift-h-1", Namespace: "tenant", UID: "j1", ResourceVersion: "7", Generation: 1, CreationTimestamp: start,
		Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelObjectUID: "u1", names.LabelObjectName: "m", names.LabelKind: "tfm",
			names.LabelOperation: "drift", names.LabelInputsHash: "h", names.LabelAttempt: "1", names.LabelApprovedPlan: "p"},
		Annotations: map[string]string{names.AnnotationInputsBytes: "100"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: "c", UID: "c1"},
			{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformMachine", Name: "m", UID: "u1", Controller: &yes, BlockOwnerDeletion: &yes}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}}
	jobStatus := batchv1.JobStatus{StartTime: &start, CompletionTime: &done, Succeeded: 1, Ready: &zero, Terminating: &zero,
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{}, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"}}}
	cachedJob := &runnerjob.Cached{Name: "tfm-m-drift-h-1", Namespace: "tenant", UID: "j1", ResourceVersion: "7", CreationTimestamp: start,
		Controller: runnerjob.JobController{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformMachine", Name: "m", UID: "u1"},
		ObjectUID:  "u1", Operation: infrav1.OperationDrift, InputsHash: "h", Attempt: 1, ApprovedPlan: "p", InputsBytes: 100,
		Status: runnerjob.CachedStatus{StartTime: &start, CompletionTime: &done, Succeeded: 1,
			Finished: true, Complete: true, EndReason: "CompletionsReached", EndTime: done}}
	tcStatus := infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Applied", Message: "applied"}}}}
	for name, tc := range map[string]struct {
		trim func(any) any
		in   any
		want any
	}{
		"a Job keeps what CAPTF reads of it": {trim: runnerjob.Trim,
			in: &batchv1.Job{ObjectMeta: jobMeta, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "runner", Image: "captf"}}}}}, Status: jobStatus},
			want: cachedJob},
		"a failed Job keeps why, and its terminating pods": {trim: runnerjob.Trim,
			in: &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "tenant"}, Status: batchv1.JobStatus{Failed: 1, Terminating: &two, Conditions: []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastProbeTime: done, LastTransitionTime: done, Reason: "DeadlineExceeded", Message: "Job was active longer than specified deadline"}}}},
			want: &runnerjob.Cached{Name: "f", Namespace: "tenant", Status: runnerjob.CachedStatus{Failed: 1, Terminating: 2,
				Finished: true, EndReason: "DeadlineExceeded", EndMessage: "Job was active longer than specified deadline", EndTime: done}}},
		"a TerraformCluster keeps its spec and status": {
			in:   &infrav1.TerraformCluster{ObjectMeta: meta(), Status: tcStatus},
			want: &infrav1.TerraformCluster{ObjectMeta: asCachedObject, Status: tcStatus}},
		"a TerraformMachine keeps the annotations CAPTF and Cluster API read": {
			in: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{}}`, "example.com/note": "big", "captf": "x",
				infrav1.AnnotationApprovePlan: "1111111111111111", "cluster.x-k8s.io/paused": "", "clusterctl.cluster.x-k8s.io/block-move": ""}}},
			want: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{
				infrav1.AnnotationApprovePlan: "1111111111111111", "cluster.x-k8s.io/paused": "", "clusterctl.cluster.x-k8s.io/block-move": ""}}}},
		"a TerraformMachine keeps no other captf.io or Cluster API annotation, and bounds what it keeps": {
			in: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{
				"captf.io/anything": strings.Repeat("x", 4096), "cluster.x-k8s.io/anything": "y", "machine.cluster.x-k8s.io/certificates-expiry": "2027",
				"cluster.x-k8s.io/paused": strings.Repeat("p", 4096)}}},
			want: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{
				"cluster.x-k8s.io/paused": strings.Repeat("p", 1024)}}}},
		"a TerraformMachine with only others' annotations keeps none": {
			in:   &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"example.com/note": "big"}}},
			want: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}},
		"a state head keeps what the checks read": {trim: workspace.CacheStateSecret,
			in: &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{
				Name: "captf-tfm-m-state", Namespace: "tenant", UID: "s1", ResourceVersion: "9", CreationTimestamp: start,
				Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: "tfm", names.LabelObjectName: "m",
					names.LabelObjectUID: "u1", names.LabelSecretType: names.SecretTypeState, names.LabelAbandoned: "true"},
				Annotations: map[string]string{names.AnnotationObjectName: "m", "captf.io/encoding": "gzip", "captf.io/uncompressed-bytes": "1234",
					"captf.io/generation": "3", "captf.io/state-sha256": "abc", "captf.io/backups": `["b1","b2"]`, "captf.io/lock-holder": "tfm-m-apply-h-1"},
				Finalizers:      []string{names.StateFinalizer},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "x1"}},
				ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "captf"}}}},
			want: &workspace.StateSecretMeta{Name: "captf-tfm-m-state", Namespace: "tenant", ResourceVersion: "9",
				Kind: "tfm", Abandoned: true, ObjectName: "m", NamesObject: true, HasState: true, Size: 1234, Owned: true, Protected: true}},
		"durable inputs keep that they exist": {trim: workspace.CacheStateSecret,
			in: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "captf-tfm-m-inputs", Namespace: "tenant", ResourceVersion: "7",
				Labels: map[string]string{names.LabelKind: "tfm", names.LabelSecretType: names.SecretTypeDurableInput}, DeletionTimestamp: &start}},
			want: &workspace.StateSecretMeta{Name: "captf-tfm-m-inputs", Namespace: "tenant", ResourceVersion: "7", DeletionTimestamp: &start,
				Kind: "tfm", Size: -1}},
		"metadata only": {
			in:   &metav1.PartialObjectMetadata{ObjectMeta: meta()},
			want: &metav1.PartialObjectMetadata{ObjectMeta: withoutManagedFields}},
	} {
		t.Run(name, func(t *testing.T) {
			transform := cacheTransform(&intern.Pool{LabelValues: map[string]bool{names.LabelOperation: true}}, tc.trim)
			got, err := transform(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("cached\n%+v\nwant\n%+v", got, tc.want)
			}
			again, err := transform(got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again, tc.want) {
				t.Errorf("transformed twice\n%+v\nwant\n%+v", again, tc.want)
			}
		})
	}
}

// TestCacheTransformGivesBackRoom: the slices decoding grew by doubling
// keep no room beyond their elements in the cache (BenchmarkObjectCache).
func TestCacheTransformGivesBackRoom(t *testing.T) {
	conds := make([]metav1.Condition, 5)
	for i := range conds {
		conds[i] = metav1.Condition{Type: fmt.Sprintf("T%d", i), Status: metav1.ConditionTrue, Reason: "R"}
	}
	jobs := []infrav1.JobReference{{Name: "j1"}, {Name: "j2"}, {Name: "j3"}}
	for _, obj := range []workspace.Object{
		&infrav1.TerraformCluster{Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{
			Conditions: append(make([]metav1.Condition, 0, 8), conds...), LastJobs: append(make([]infrav1.JobReference, 0, 4), jobs...)}}},
		&infrav1.TerraformMachine{Status: infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: slices.Clip(conds), LastJobs: slices.Clip(jobs)}}},
	} {
		got, err := cacheTransform(newSharedStrings(), nil)(obj)
		if err != nil {
			t.Fatal(err)
		}
		st := got.(workspace.Object).WorkspaceStatus()
		if cap(st.Conditions) != 5 || cap(st.LastJobs) != 3 || !reflect.DeepEqual(st.Conditions, conds) || !reflect.DeepEqual(st.LastJobs, jobs) {
			t.Errorf("%T: conditions %d of room %d, last Jobs %d of room %d; want their elements, and no room beyond", obj, len(st.Conditions), cap(st.Conditions), len(st.LastJobs), cap(st.LastJobs))
		}
	}
}
