package workspace

import (
	"cmp"
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// RunRecords lists and deletes run records (the ConfigMaps runners keep
// their plans and logs in): by their metadata, never reading the plans.
type RunRecords interface {
	// List lists the run records labelled as the object's.
	List(ctx context.Context, namespace string, obj names.Object) ([]metav1.PartialObjectMetadata, error)
	// Delete deletes a run record; one already gone is no error.
	Delete(ctx context.Context, namespace, name string) error
}

// APIRunRecords is the RunRecords of the API server.
type APIRunRecords struct {
	Meta metadata.Interface
}

func (a *APIRunRecords) configMaps(namespace string) metadata.ResourceInterface {
	return a.Meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(namespace)
}

// List lists the run records labelled as the object's.
func (a *APIRunRecords) List(ctx context.Context, namespace string, obj names.Object) ([]metav1.PartialObjectMetadata, error) {
	list, err := a.configMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set(names.RecordLabels(obj)).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Delete deletes a run record.
func (a *APIRunRecords) Delete(ctx context.Context, namespace, name string) error {
	err := a.configMaps(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// pruneRecords keeps the object's run records within its Job history
// limits, by operation and outcome, newest first: a record outlives its
// Job (deleted by hand, by a TTL, by the history) but not the history's
// count. The newest record of each operation stays whatever the limits:
// it may hold the plan that waits for approval; so do those the status
// vouches for.
func (e *engine) pruneRecords(ctx context.Context, r *Sync) {
	if e.Records == nil {
		return
	}
	logger := klog.FromContext(ctx)
	listed, err := e.Records.List(ctx, r.Obj.GetNamespace(), r.Names)
	if err != nil {
		logger.Error(err, "Listing run records to prune")
		return
	}
	var records []metav1.PartialObjectMetadata
	for _, rec := range listed {
		if names.OwnedBy(&rec, r.Obj.GetUID()) {
			records = append(records, rec)
		}
	}
	slices.SortFunc(records, func(a, b metav1.PartialObjectMetadata) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(b.Name, a.Name))
	})
	// The records the status vouches for (the last run of each operation,
	// the last apply) stay whatever the count: a look-alike someone made
	// counts as a record too, and newer ones must not push the real plan
	// or the applied code's files out.
	st := r.Obj.WorkspaceStatus()
	vouched := map[string]bool{st.AppliedRecord: true}
	for _, j := range st.LastJobs {
		vouched[j.Record] = true
	}
	delete(vouched, "")
	kept, newest := map[string]int32{}, map[string]bool{}
	for _, rec := range records {
		op, outcome := rec.Labels[names.LabelOperation], rec.Labels[names.LabelOutcome]
		limit := r.Policy.SuccessfulJobsHistoryLimit
		if outcome == run.OutcomeFailed {
			limit = r.Policy.FailedJobsHistoryLimit
		}
		if !newest[op] {
			newest[op] = true
			limit = max(limit, 1)
		}
		k := op + "/" + outcome
		if outcome == run.OutcomeBlocked {
			k = op + "/" + run.OutcomeSucceeded // its Job succeeded: counted alike
		}
		if kept[k] < limit || vouched[rec.Name] {
			kept[k]++
			continue
		}
		if err := e.Records.Delete(ctx, rec.Namespace, rec.Name); err != nil {
			logger.Error(err, "Deleting a run record beyond the history limits", "configMap", klog.KRef(rec.Namespace, rec.Name))
		}
	}
}

// mayHaveRecord tells whether the run of a Job the history drops kept a
// record: all but drift checks that succeeded and found nothing do.
func mayHaveRecord(job *runnerjob.Cached, succeeded, drifted bool) bool {
	return job.Operation != infrav1.OperationDrift || !succeeded || drifted
}
