package workspace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/statestore"
)

// Reasons of the StateRestored condition.
const (
	ReasonRestored       = "Restored"
	ReasonBackupNotFound = "BackupNotFound"
	ReasonRestoreWaiting = "WaitingForJob"
	ReasonRestoreFailed  = "RestoreFailed"
	ReasonBackupTooLarge = "BackupTooLarge"
	ReasonBackupCorrupt  = "BackupCorrupt"
)

// restoreLockHolder holds the state Lease while the manager restores.
const restoreLockHolder = "captf-manager"

// restore carries out captf.io/restore-state: the named backup becomes the
// current state, the current state a backup first; then the annotation
// goes, and the next apply plans against the restored state. It runs in
// the manager, holding the state lock, when no Job runs. It returns false
// when the sync stops here.
func (e *engine) restore(ctx context.Context, r *Sync) (bool, error) {
	obj := r.Obj
	backup, ok := obj.GetAnnotations()[infrav1.AnnotationRestoreState]
	if !ok {
		return true, nil
	}
	if active := runnerjob.Active(r.Jobs); active != nil {
		SetCondition(obj, infrav1.ConditionStateRestored, metav1.ConditionFalse, ReasonRestoreWaiting,
			fmt.Sprintf("Restoring %s once Job %s finishes", backup, active.Name))
		return false, nil
	}
	if c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, infrav1.ConditionStateRestored); c != nil && c.Status == metav1.ConditionFalse &&
		(c.Reason == ReasonBackupCorrupt || c.Reason == ReasonBackupTooLarge) && strings.Contains(c.Message, " names "+backup+", ") {
		return true, nil // read through once already: a backup does not change
	}
	n := e.Names(obj)
	store := e.stateStore(obj)
	if refused, err := e.backupRefused(ctx, obj, store, backup); refused || err != nil {
		return refused, err
	}
	lock := &statestore.Lock{Client: e.Kube, Namespace: obj.GetNamespace(), Name: n.Lock(), Holder: restoreLockHolder, Labels: store.Labels, Clock: e.Clock}
	if err := lock.Acquire(ctx, 0); err != nil {
		SetCondition(obj, infrav1.ConditionStateRestored, metav1.ConditionFalse, ReasonRestoreWaiting, "Waiting for the state lock: "+err.Error())
		r.Requeue = 5 * time.Second
		return false, nil
	}
	defer func() {
		if err := lock.Release(context.WithoutCancel(ctx)); err != nil {
			e.Recorder.Eventf(obj, corev1.EventTypeWarning, ReasonRestoreFailed, "Releasing the state lock after a restore: %v", err)
		}
	}()
	err := store.Claim(ctx, restoreLockHolder, false)
	if err == nil {
		err = store.Restore(ctx, backup)
	}
	if err != nil {
		e.warnOnChange(obj, infrav1.ConditionStateRestored, metav1.ConditionFalse, ReasonRestoreFailed, ReasonRestoreFailed, fmt.Sprintf("Restoring %s: %v", backup, err))
		return false, err
	}
	annotations := obj.GetAnnotations()
	delete(annotations, infrav1.AnnotationRestoreState)
	obj.SetAnnotations(annotations)
	if err := r.Update(ctx); err != nil {
		// The state is restored; the annotation stays and a later sync
		// restores the same backup again, which only adds a backup.
		return false, err
	}
	st := obj.WorkspaceStatus()
	recordRestore(st, backup, store.LastBackup, e.Clock.Now())
	msg := fmt.Sprintf("The state is restored from backup %s; the state before it is backup %s. The next apply plans against it.", backup, store.LastBackup)
	SetCondition(obj, infrav1.ConditionStateRestored, metav1.ConditionTrue, ReasonRestored, msg)
	e.Recorder.Event(obj, corev1.EventTypeNormal, infrav1.ConditionStateRestored, msg)
	return true, nil
}

// backupRefused checks the backup a restore names before anything changes:
// one that is not a backup of obj, is over the size limit or is damaged is
// refused in StateRestored (refused true), and the annotation stays for
// the user to fix.
func (e *engine) backupRefused(ctx context.Context, obj Object, store *statestore.StateStore, backup string) (bool, error) {
	err := store.CheckBackup(ctx, backup)
	var reason, msg string
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err) || errors.Is(err, statestore.ErrNotABackup):
		backups, lerr := e.listBackups(ctx, obj)
		if lerr != nil {
			return false, lerr
		}
		list := "none"
		if len(backups) > 0 {
			list = strings.Join(backups, ", ")
		}
		reason, msg = ReasonBackupNotFound, fmt.Sprintf("%s names %s, which is not a state backup of this object; nothing was changed. Its backups, newest first: %s",
			infrav1.AnnotationRestoreState, backup, list)
	case errors.Is(err, statestore.ErrStateTooLarge):
		reason, msg = ReasonBackupTooLarge, fmt.Sprintf("%s names %s, which CAPTF will not read: %v (--max-state-bytes); nothing was changed", infrav1.AnnotationRestoreState, backup, err)
	case errors.Is(err, statestore.ErrStateCorrupt):
		reason, msg = ReasonBackupCorrupt, fmt.Sprintf("%s names %s, which is damaged: %v; nothing was changed. Name another backup", infrav1.AnnotationRestoreState, backup, err)
	default:
		return false, fmt.Errorf("reading state backup %s: %w", backup, err)
	}
	e.warnOnChange(obj, infrav1.ConditionStateRestored, metav1.ConditionFalse, reason, reason, msg)
	return true, nil
}
