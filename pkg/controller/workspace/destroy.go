package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/statestore"
)

// Destroy drives the destroy of the object's infrastructure, with the inputs
// of its last successful apply (or, when a first apply failed half-way, with
// what render gives). It returns true once nothing is left to destroy and
// the object's state is released, or the object is abandoned: the caller
// then removes its finalizer.
func (e *engine) Destroy(ctx context.Context, r *Sync, render func() (*Inputs, error)) (bool, error) {
	obj := r.Obj
	if obj.GetAnnotations()[infrav1.AnnotationAbandonInfrastructure] == "true" {
		return e.deleteAbandoned(ctx, r)
	}
	if active := runnerjob.Active(r.Jobs); active != nil {
		e.RecordJob(r, active, "Running", nil)
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Waiting for Job %s to finish before destroying", active.Name))
		return false, nil
	}
	if destroySucceeded(r.Jobs) {
		// Destroyed; only releasing the state (or the finalizer) failed.
		return e.release(ctx, r)
	}
	hash, data, done, err := e.destroyInputs(ctx, r, render)
	if err != nil || done || hash == "" {
		return done, err
	}
	attempt := 0
	if latest := runnerjob.Latest(r.Jobs, infrav1.OperationDestroy, hash); latest != nil {
		var retry bool
		if attempt, retry = e.failed(ctx, r, latest, ReasonDestroyFailed, "terraform destroy failed"); !retry {
			return false, nil
		}
	}
	return false, e.start(ctx, r, infrav1.OperationDestroy, hash, attempt, data)
}

// deleteAbandoned lets an abandoned object go without a destroy, once no
// Job of it runs: a Job still running would write state after the abandon,
// so it is stopped first, and its pod waited for.
func (e *engine) deleteAbandoned(ctx context.Context, r *Sync) (bool, error) {
	if running := runnerjob.Unfinished(r.Jobs); running != nil {
		if running.DeletionTimestamp == nil {
			if err := e.JobControl.Delete(ctx, running, metav1.DeletePropagationForeground); err != nil {
				return false, err
			}
		}
		e.SetReady(r, metav1.ConditionFalse, ReasonAbandoning, fmt.Sprintf("Stopping Job %s before abandoning: the state it writes is kept", running.Name))
		return false, nil
	}
	if err := e.abandon(ctx, r.Obj); err != nil {
		return false, err
	}
	e.Recorder.Eventf(r.Obj, corev1.EventTypeNormal, ReasonAbandoned, "Deleted without destroy (%s): state and backups are kept with label %s=true",
		infrav1.AnnotationAbandonInfrastructure, names.LabelAbandoned)
	return true, nil
}

// destroyInputs are the inputs a destroy runs with: the durable inputs of
// the last successful apply (data nil: the runner reads them), else, for a
// state no apply finished with, the object's own. With no state at all,
// an object never applied is done (its state released) and one applied
// waits (StateMissing). An empty hash with done false: nothing to start yet.
func (e *engine) destroyInputs(ctx context.Context, r *Sync, render func() (*Inputs, error)) (hash string, data map[string][]byte, done bool, err error) {
	n := r.Names
	secrets := e.Kube.CoreV1().Secrets(r.Obj.GetNamespace())
	durable, err := secrets.Get(ctx, n.DurableInputs(), metav1.GetOptions{})
	if err == nil {
		return HashSecretData(durable.Data), nil, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return "", nil, false, err
	}
	head, err := secrets.Get(ctx, n.State(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", nil, false, err
	}
	if err != nil || !statestore.HasState(head) {
		if ok, _, err := e.checkState(ctx, r); err != nil || !ok {
			return "", nil, false, err // applied, and the state is gone
		}
		return "", nil, true, e.releaseState(ctx, r.Obj) // never applied: nothing to destroy
	}
	in, err := render()
	if err != nil {
		e.SetReady(r, metav1.ConditionFalse, ReasonDestroyFailed, "No inputs to destroy with: "+err.Error())
		r.Requeue = time.Minute
		return "", nil, false, nil
	}
	return in.Hash, in.SecretData(), false, nil
}

// release releases the state of an object whose destroy succeeded.
func (e *engine) release(ctx context.Context, r *Sync) (bool, error) {
	if err := e.releaseState(ctx, r.Obj); err != nil {
		return false, fmt.Errorf("releasing the state of a destroyed object: %w", err)
	}
	e.Recorder.Event(r.Obj, corev1.EventTypeNormal, ReasonDestroyed, "The module's infrastructure is destroyed")
	return true, nil
}

// destroySucceeded tells whether the newest destroy Job succeeded after
// every apply.
func destroySucceeded(jobs []*runnerjob.Cached) bool {
	for _, j := range jobs { // newest first
		switch j.Operation {
		case infrav1.OperationApply, infrav1.OperationRefresh:
			return false
		case infrav1.OperationDestroy:
			_, succeeded := runnerjob.Finished(j)
			return succeeded
		}
	}
	return false
}

// releaseState runs once obj's infrastructure is destroyed: its state
// Secrets, lock and what its runs left go.
func (e *engine) releaseState(ctx context.Context, obj Object) error {
	secrets, leftovers, err := e.objectSecrets(ctx, obj)
	if err != nil {
		return err
	}
	errs := []error{e.deleteLeftovers(ctx, obj, leftovers)}
	for _, s := range secrets {
		errs = append(errs, statestore.DeleteStateSecret(ctx, e.Kube.CoreV1().Secrets(s.Namespace), s.Name))
	}
	err = e.Kube.CoordinationV1().Leases(obj.GetNamespace()).Delete(ctx, e.Names(obj).Lock(), metav1.DeleteOptions{})
	if !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
