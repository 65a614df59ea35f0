package statestore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/names"
)

// Backups: the previous state kept on each change, rotated to the newest
// Backups; rescues of a state a run could not save; restores.

// backUpAndRotate makes current, the state head still points at, a backup
// and rotates the backups listed in head. It returns the backups head is to
// list and those to delete once the new state is written. A failed backup
// is an error only when replacing: otherwise the new state matters more
// than a copy of the old one (a quota on Secrets, or a terminating
// namespace, which refuses creates, not updates, must not cost it).
func (s *StateStore) backUpAndRotate(ctx context.Context, current, head *corev1.Secret, backups []string, replacing bool) (kept, dropped []string, err error) {
	name, err := s.backup(ctx, current)
	switch {
	case err != nil && replacing:
		return nil, nil, fmt.Errorf("backing up the current state before replacing it: %w", err)
	case err != nil:
		klog.FromContext(ctx).Error(err, "Backing up the previous state; writing the new state without a backup")
		s.BackupErrors++
	default:
		s.LastBackup = name
		backups = append([]string{name}, backups...)
		if head.Annotations[AnnotationApplied] == "true" {
			head.Annotations[annotationLastGood] = name
		}
	}
	// Rotation keeps the backup being restored, and the last state a run
	// ended well with: a run failing again and again changes the state each
	// time, and must not rotate the good one away.
	keep := []string{s.Keep, head.Annotations[annotationLastGood]}
	if replacing {
		keep = append(keep, s.LastBackup)
	}
	for i := len(backups) - 1; len(backups) > s.Backups && i >= 0; i-- {
		if !slices.Contains(keep, backups[i]) {
			dropped = append(dropped, backups[i])
			backups = slices.Delete(backups, i, i+1)
		}
	}
	return backups, dropped, nil
}

// Restore makes a backup the current state, the current one a backup first;
// the restored backup stays. The state is copied compressed, one chunk at a
// time, and checked (its sum, the size limit) as it is copied: whatever the
// backup holds, the caller never holds more than one chunk of it.
func (s *StateStore) Restore(ctx context.Context, backup string) error {
	sec, err := s.backupSecret(ctx, backup)
	if err != nil {
		return err
	}
	s.Keep = backup
	return s.write(ctx, newState{
		same: func(head *corev1.Secret) bool {
			return head.Annotations[annotationSHA256] != "" && head.Annotations[annotationSHA256] == sec.Annotations[annotationSHA256]
		},
		fill: func(head *corev1.Secret, chunkName func(int) string) (int64, string, error) {
			setHolds(head, sec.Annotations[AnnotationHolds])
			return s.copyBlob(ctx, sec, head, chunkName, names.SecretTypeStateChunk, true)
		},
	}, true)
}

// SaveRescue stores a state terraform could not save as a backup of its own
// (named by Rescue), restorable with captf.io/restore-state.
func (s *StateStore) SaveRescue(ctx context.Context, state []byte) (string, error) {
	gz, err := gzipBytes(state)
	if err != nil {
		return "", err
	}
	return s.saveBackup(ctx, s.Object.Rescue, strconv.Itoa(len(state)), func(sec *corev1.Secret, chunkName func(int) string) error {
		setHolds(sec, Holds(state))
		return s.writeBlob(ctx, sec, gz, chunkName, names.SecretTypeBackupChunk)
	})
}

// backup copies the state head points at into a new backup Secret, a chunk
// at a time.
func (s *StateStore) backup(ctx context.Context, head *corev1.Secret) (string, error) {
	name, err := s.saveBackup(ctx, s.Object.Backup, head.Annotations[annotationSize], func(sec *corev1.Secret, chunkName func(int) string) error {
		// Not decompressed: a state that is no longer valid gzip, or over
		// a lowered size limit, is still kept before it is replaced.
		setHolds(sec, head.Annotations[AnnotationHolds])
		_, _, err := s.copyBlob(ctx, head, sec, chunkName, names.SecretTypeBackupChunk, false)
		return err
	})
	if err == nil {
		s.BackupsMade++
	}
	return name, err
}

// saveBackup creates a backup Secret named by nameOf, after fill has put
// the state into it (inline, or in chunks it created first).
func (s *StateStore) saveBackup(ctx context.Context, nameOf func(stamp string) string, size string, fill func(sec *corev1.Secret, chunkName func(int) string) error) (string, error) {
	stamp := s.now().UTC().Format("20060102-150405")
	for i := 0; ; i++ {
		name := nameOf(stamp)
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i)
		}
		if _, err := s.secrets().Get(ctx, name, metav1.GetOptions{}); err == nil {
			continue // taken: do not copy the state only to learn it
		} else if !apierrors.IsNotFound(err) {
			return "", err
		}
		sec := s.newSecret(name, names.SecretTypeBackup)
		sec.Annotations[annotationBackupOf] = s.Object.State()
		sec.Annotations[annotationSize] = size
		if err := fill(sec, func(c int) string { return s.Object.BackupChunk(name, c) }); err != nil {
			return "", err
		}
		_, err := s.secrets().Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
}

// ListBackups lists the backups of the state, newest first.
func (s *StateStore) ListBackups(ctx context.Context) ([]string, error) {
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return backupsOf(head)
}

// backupsOf reads the state Secret's list of backups, newest first.
func backupsOf(head *corev1.Secret) ([]string, error) { return BackupsOf(head.Annotations) }

// BackupsOf reads the backups a state Secret's annotations list, newest
// first: those its state store made and rotates, not every Secret that
// looks like a backup.
func BackupsOf(annotations map[string]string) ([]string, error) {
	var backups []string
	if v := annotations[annotationBackups]; v != "" {
		if err := json.Unmarshal([]byte(v), &backups); err != nil {
			return nil, fmt.Errorf("state secret annotation %s: %w", annotationBackups, err)
		}
	}
	return backups, nil
}

// ReadBackup returns the state saved in a backup.
func (s *StateStore) ReadBackup(ctx context.Context, name string) ([]byte, error) {
	sec, err := s.backupSecret(ctx, name)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := s.inflate(s.blobReader(ctx, sec), &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// backupSecret reads a backup's Secret (not its chunks), refusing a Secret
// that is not a backup of this state.
func (s *StateStore) backupSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	sec, err := s.secrets().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if sec.Labels[names.LabelSecretType] != names.SecretTypeBackup || sec.Annotations[annotationBackupOf] != s.Object.State() {
		return nil, fmt.Errorf("%w: secret %s is not a state backup of %s", ErrNotABackup, name, s.Object.State())
	}
	return sec, nil
}

// CheckBackup reads a backup through, a chunk at a time, without keeping
// it: it exists, is a backup of this state, is intact and within the size
// limit.
func (s *StateStore) CheckBackup(ctx context.Context, name string) error {
	sec, err := s.backupSecret(ctx, name)
	if err != nil {
		return err
	}
	_, err = s.inflate(s.blobReader(ctx, sec), io.Discard)
	return err
}

// DeleteBackup deletes a backup and its chunks.
func (s *StateStore) DeleteBackup(ctx context.Context, name string) error {
	sec, err := s.secrets().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	_, chunks := chunkInfo(sec)
	for i := range chunks {
		if err := s.deleteSecret(ctx, s.Object.BackupChunk(name, i)); err != nil {
			return err
		}
	}
	return s.deleteSecret(ctx, name)
}
