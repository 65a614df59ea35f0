package workspace

import (
	"context"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/runnerjob"
)

// Lifecycle is what a kind adds to the part of a sync every kind shares, in
// Cluster API's order: the owner, the finalizer, pause, deletion.
type Lifecycle struct {
	Finalizer string
	// OwnerMissing is set, with CAPI's reason and a message, while Cluster
	// API has not made the object's owner yet.
	OwnerMissing *Wait
	// Render renders the inputs a destroy falls back on when no durable
	// inputs were saved.
	Render func() (*Inputs, error)
}

// Wait is why an object waits: a Ready reason and message.
type Wait struct{ Reason, Message string }

// Reconcile runs the shared part of a sync. It returns true when the object
// is owned, unpaused, not being deleted and carries its finalizer: the
// caller goes on with its own work.
func (e *engine) Reconcile(ctx context.Context, r *Sync, l Lifecycle) (bool, error) {
	obj := r.Obj
	why, paused := capi.Paused(r.Cluster, obj, e.GVK.Kind)
	_, moveBlocked := obj.GetAnnotations()[capi.BlockMoveAnnotation]
	_, restoreAsked := obj.GetAnnotations()[infrav1.AnnotationRestoreState]
	d := decideLifecycle(lifecycleFacts{Deleting: obj.GetDeletionTimestamp() != nil, OwnerMissing: l.OwnerMissing != nil,
		Age: e.Clock.Since(obj.GetCreationTimestamp().Time), Reported: len(obj.WorkspaceStatus().Conditions) > 0,
		HasFinalizer: HoldsFinalizer(obj, l.Finalizer), Paused: paused, JobMayRun: runnerjob.Unfinished(r.Jobs) != nil, MoveBlocked: moveBlocked,
		RestoreAsked: restoreAsked})
	switch {
	case d.QuietFor > 0:
		r.NoStatus = true
		r.requeueWithin(d.QuietFor)
		return false, nil
	case d.OwnerMissing:
		e.SetReady(r, metav1.ConditionFalse, l.OwnerMissing.Reason, l.OwnerMissing.Message)
		return false, nil
	case d.AddFinalizer:
		obj.SetFinalizers(append(obj.GetFinalizers(), l.Finalizer))
		if d.BlockMove {
			addBlockMove(obj)
		}
		if err := r.Update(ctx); err != nil {
			return false, err
		}
	case d.UnblockMove:
		// Written by the sync's next update of the object (the provider
		// ID of the apply that just ended, say) or at its end.
		r.Unwritten = unblockMove(obj) || r.Unwritten
	}
	if d.Paused {
		SetCondition(obj, infrav1.ConditionPaused, metav1.ConditionTrue, ReasonPaused, why)
		return false, nil
	}
	SetCondition(obj, infrav1.ConditionPaused, metav1.ConditionFalse, ReasonNotPaused, "")
	if d.Restore {
		if ok, err := e.restore(ctx, r); err != nil || !ok {
			return false, err
		}
	}
	if d.Go || !d.Destroy {
		return d.Go, nil
	}
	done, err := e.Destroy(ctx, r, l.Render)
	if err != nil || !done {
		return false, err
	}
	obj.SetFinalizers(slices.DeleteFunc(obj.GetFinalizers(), func(f string) bool { return f == l.Finalizer }))
	return false, r.Update(ctx)
}

// HoldsFinalizer tells whether obj carries finalizer, or the name an earlier
// release gave it.
func HoldsFinalizer(obj metav1.Object, finalizer string) bool {
	return slices.Contains(obj.GetFinalizers(), finalizer)
}

// unblockMove takes clusterctl's block-move annotation off obj, and tells
// whether it was there.
func unblockMove(obj Object) bool {
	if _, ok := obj.GetAnnotations()[capi.BlockMoveAnnotation]; !ok {
		return false
	}
	annotations := maps.Clone(obj.GetAnnotations())
	delete(annotations, capi.BlockMoveAnnotation)
	obj.SetAnnotations(annotations)
	return true
}
