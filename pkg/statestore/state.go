package statestore

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/retry"
	"github.com/captf/captf/pkg/run"
)

// Annotations of state and backup Secrets.
const (
	annotationEncoding   = "captf.io/encoding"
	annotationChunks     = "captf.io/chunks"
	annotationGeneration = "captf.io/generation"
	annotationSHA256     = "captf.io/sha256"
	annotationStateSum   = "captf.io/state-sha256"
	annotationBackups    = "captf.io/backups"
	annotationSize       = "captf.io/uncompressed-bytes"
	annotationBackupOf   = "captf.io/backup-of"
	// AnnotationHolds says what a state (and each backup of it) holds,
	// "serial N, M resources", written with it: kubectl captf lists
	// backups by their metadata, reading none of them.
	AnnotationHolds  = "captf.io/holds"
	AnnotationHolder = "captf.io/lock-holder"
	// AnnotationApplied marks a state a run ended well with;
	// annotationLastGood names the newest backup of such a state.
	AnnotationApplied  = "captf.io/applied"
	annotationLastGood = "captf.io/last-good-backup"
	dataKey            = "tfstate"
)

// DefaultChunkSize keeps every Secret well under the 1 MiB object limit and
// etcd's 1.5 MiB request limit.
const DefaultChunkSize = 768 << 10

// Errors a caller turns into conditions.
var (
	// ErrNotABackup is ReadBackup's error for a Secret that is not a backup
	// of this state.
	ErrNotABackup = errors.New("not a state backup")
	// ErrStateTooLarge: a state or backup is over the read limit.
	ErrStateTooLarge = errors.New("state is over the size limit")
	// ErrStateCorrupt: a state or backup fails its sum, or is not gzip.
	ErrStateCorrupt = errors.New("state is corrupt")
	// ErrStateMissing: the object was applied but its state Secret is gone.
	ErrStateMissing = errors.New("state secret is missing")
	// ErrOtherOwner: the state Secret belongs to another object.
	ErrOtherOwner = errors.New("state secret belongs to another object")
	// ErrChangedSincePlan: the state was written after this run planned
	// from it (a restore, a run whose lock had lapsed): its plan is stale.
	ErrChangedSincePlan = errors.New("the state changed after this run planned from it: its plan is stale, and the next run plans again")
	// ErrFenced: another run took the state lock; this one may not write.
	ErrFenced = errors.New("the state lock was taken over by another run: this run may no longer write the state")
)

// StateStore keeps one object's Terraform state in Secrets: gzip-compressed,
// inline in the state Secret when small, else in chunk Secrets of a new
// generation that the state Secret switches to in one update (a reader never
// sees half a state). The first write of a run that changes the state makes
// the previous state a backup; the newest Backups backups are kept.
//
// Writes are fenced: Claim stamps the state Secret with the run's lock
// holder, and every later write updates exactly the version this store last
// wrote or read. A run that lost its lock to another, which then claimed the
// state, can no longer write a byte of it.
//
// The Secrets carry no owner reference but StateFinalizer: they outlive the
// object until CAPTF releases them (after a successful destroy or an
// abandon).
type StateStore struct {
	Client    kubernetes.Interface
	Namespace string
	Object    names.Object
	// Labels go on every Secret (object identity, managed-by).
	Labels    map[string]string
	Backups   int
	ChunkSize int
	// MaxBytes bounds what a read decompresses (DefaultMaxStateBytes).
	MaxBytes int64
	// Keep is a backup rotation never deletes: the one being restored.
	Keep string
	// Clock names backups and chunk generations; nil is the real one.
	Clock clock.PassiveClock
	// New says the object was never applied: its claim creates the state
	// Secret without reading it first.
	New bool

	// head is the version of the state Secret this store claimed, wrote
	// or (read-only) checked last. The run holds the lock and its writes are
	// fenced, so reads are answered from it and from current: terraform
	// reads the state once per command, and none of those reads is an API
	// request.
	head     *corev1.Secret
	current  []byte // the state head points at, once read or written
	known    bool   // current is head's
	readOnly bool
	backedUp bool
	// createTried: a claim's first create was tried; a retry reads first.
	createTried bool
	// BackupsMade counts backups this store made, BackupErrors the ones it
	// could not make; LastBackup names the newest.
	BackupsMade, BackupErrors int
	LastBackup                string
}

// HasState tells whether a state Secret holds a state (a claim of an object
// never applied leaves an empty one).
func HasState(head metav1.Object) bool { return head.GetAnnotations()[annotationEncoding] != "" }

// StateSize is the uncompressed size of the state a state Secret heads, as
// its last write recorded it.
func StateSize(head metav1.Object) (int64, bool) {
	n, err := strconv.ParseInt(head.GetAnnotations()[annotationSize], 10, 64)
	return n, err == nil
}

// Read returns the current state, or nil when there is none. After a claim
// (or a read-only check) it reads the state the claim found, once.
func (s *StateStore) Read(ctx context.Context) ([]byte, error) {
	if s.head != nil {
		return s.readClaimed(ctx)
	}
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state secret: %w", err)
	}
	if err := s.checkOwner(head); err != nil {
		return nil, err
	}
	if !HasState(head) {
		return nil, nil
	}
	gz, err := s.readBlob(ctx, head)
	if err != nil {
		return nil, err
	}
	return s.gunzip(gz)
}

// readClaimed returns the state the claimed head points at: no request
// when this store read or wrote it before, else only its chunks'.
func (s *StateStore) readClaimed(ctx context.Context) ([]byte, error) {
	if !HasState(s.head) {
		return nil, nil
	}
	if !s.known {
		gz, err := s.readBlob(ctx, s.head)
		if err != nil {
			return nil, err
		}
		if s.current, err = s.gunzip(gz); err != nil {
			return nil, err
		}
		s.known = true
	}
	return s.current, nil
}

// Write stores state as the current state, and keeps it: the caller must
// not change it after.
func (s *StateStore) Write(ctx context.Context, state []byte) error {
	s.current, s.known = nil, false // not two states in memory at once
	gz, err := gzipBytes(state)
	if err != nil {
		return err
	}
	sum := hex.EncodeToString(sha256Of(state))
	holds := Holds(state)
	err = s.write(ctx, newState{
		same: func(head *corev1.Secret) bool { return head.Annotations[annotationStateSum] == sum },
		fill: func(head *corev1.Secret, chunkName func(int) string) (int64, string, error) {
			setHolds(head, holds)
			return int64(len(state)), sum, s.writeBlob(ctx, head, gz, chunkName, names.SecretTypeStateChunk)
		},
	}, false)
	if err == nil {
		s.current, s.known = state, true
	}
	return err
}

// newState is what write stores: same tells a current state that already
// is it, fill puts it into the state Secret (inline or in chunks it
// creates) and tells its uncompressed size and sha256.
type newState struct {
	same func(head *corev1.Secret) bool
	fill func(head *corev1.Secret, chunkName func(int) string) (size int64, sum string, err error)
}

// write stores a new state as the current state. replacing is set when the
// new state is not terraform's next state but another one put in its place
// (a restore): the current state must then become a backup, kept whatever
// the rotation says, or nothing is written.
func (s *StateStore) write(ctx context.Context, state newState, replacing bool) error {
	if s.readOnly {
		return errors.New("this run only plans: it writes no state")
	}
	if s.head == nil {
		if err := s.Claim(ctx, "", false); err != nil {
			return err
		}
	}
	head := s.head.DeepCopy()
	if HasState(head) && state.same(head) {
		return nil // unchanged: no write, and above all no backup
	}
	backups, err := backupsOf(head)
	if err != nil {
		return err
	}
	// The new state goes into chunks of a new generation first (a restore
	// whose backup fails a check then leaves nothing, not even a backup);
	// the current state, which current still heads, is backed up after.
	current := s.head
	oldGen, oldChunks := chunkInfo(current)
	gen := max(s.now().UnixNano(), oldGen+1) // a new name, whatever the clock says
	size, sum, err := state.fill(head, func(i int) string { return s.Object.StateChunk(gen, i) })
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	dropNew := func() {
		_, chunks := chunkInfo(head)
		for i := range chunks { // nothing points at them
			if derr := s.deleteSecret(context.WithoutCancel(ctx), s.Object.StateChunk(gen, i)); derr != nil {
				logger.Error(derr, "Deleting an unused state chunk")
			}
		}
	}
	var dropped []string
	if HasState(current) && !s.backedUp && (s.Backups > 0 || replacing) {
		if backups, dropped, err = s.backUpAndRotate(ctx, current, head, backups, replacing); err != nil {
			dropNew()
			return err
		}
	}
	delete(head.Annotations, AnnotationApplied) // not known good until its run ends well
	head.Annotations[annotationGeneration] = strconv.FormatInt(gen, 10)
	head.Annotations[annotationSize] = strconv.FormatInt(size, 10)
	head.Annotations[annotationStateSum] = sum
	if b, _ := json.Marshal(backups); len(backups) > 0 {
		head.Annotations[annotationBackups] = string(b)
	}
	genValue := head.Annotations[annotationGeneration]
	updated, err := s.updateHead(ctx, head, func(current *corev1.Secret) bool {
		return current.Annotations[annotationGeneration] == genValue
	})
	if err != nil {
		if retry.Transient(err) {
			// Whether the write landed is not known: its chunks may be the
			// state now, and deleting them would lose it.
			return fmt.Errorf("writing state secret (not known whether it was written): %w", err)
		}
		dropNew()
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fmt.Errorf("writing state secret: %w", err)
	}
	s.head, s.known = updated, false
	s.backedUp = true
	s.deleteReplaced(ctx, oldGen, oldChunks, dropped)
	return nil
}

// deleteReplaced deletes the chunks of the state generation just replaced
// and the backups rotation dropped. The state Secret no longer points at
// them: failing to delete them leaves garbage, never a broken state.
func (s *StateStore) deleteReplaced(ctx context.Context, oldGen int64, oldChunks int, dropped []string) {
	logger := klog.FromContext(ctx)
	for i := range oldChunks {
		if err := s.deleteSecret(ctx, s.Object.StateChunk(oldGen, i)); err != nil {
			logger.Error(err, "Deleting an old state chunk")
		}
	}
	for _, b := range dropped {
		if err := s.DeleteBackup(ctx, b); err != nil {
			logger.Error(err, "Deleting an old backup", "backup", b)
		}
	}
}

// MarkApplied records that the run which claimed the state ended well: its
// backup, when the next run changes the state, is kept through rotation.
func (s *StateStore) MarkApplied(ctx context.Context) error {
	if s.head == nil || s.head.Annotations[AnnotationApplied] == "true" || !HasState(s.head) {
		return nil
	}
	head := s.head.DeepCopy()
	head.Annotations[AnnotationApplied] = "true"
	sum := head.Annotations[annotationStateSum]
	updated, err := s.updateHead(ctx, head, func(current *corev1.Secret) bool {
		return current.Annotations[AnnotationApplied] == "true" && current.Annotations[annotationStateSum] == sum
	})
	if err != nil {
		return err
	}
	s.head = updated
	return nil
}

func (s *StateStore) newSecret(name, secretType string) *corev1.Secret {
	return NewStateSecret(s.Namespace, name, s.Object, secretType, s.Labels)
}

// NewStateSecret is a Secret that outlives its object: state, chunks,
// backups and durable inputs.
func NewStateSecret(namespace, name string, obj names.Object, secretType string, labels map[string]string) *corev1.Secret {
	l := map[string]string{}
	for k, v := range labels {
		l[k] = v
	}
	l[names.LabelSecretType], l[names.LabelKind], l[names.LabelObjectName] = secretType, obj.Kind, names.LabelValue(obj.Name)
	// No owner reference: clusterctl move copies the Secret by this label.
	l[names.LabelClusterctlMove] = ""
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: l,
			Annotations: map[string]string{names.AnnotationObjectName: obj.Name},
			Finalizers:  []string{names.StateFinalizer}},
		Type: corev1.SecretTypeOpaque,
	}
}

func (s *StateStore) deleteSecret(ctx context.Context, name string) error {
	return DeleteStateSecret(ctx, s.secrets(), name)
}

// DeleteStateSecret releases a Secret from StateFinalizer and deletes it.
func DeleteStateSecret(ctx context.Context, secrets typedcorev1.SecretInterface, name string) error {
	sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if i := slices.Index(sec.Finalizers, names.StateFinalizer); i >= 0 {
		sec.Finalizers = slices.Delete(sec.Finalizers, i, i+1)
		if sec, err = secrets.Update(ctx, sec, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
	}
	err = secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &sec.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (s *StateStore) secrets() typedcorev1.SecretInterface {
	return s.Client.CoreV1().Secrets(s.Namespace)
}

func (s *StateStore) now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now()
}

// Limit is the largest state (and backup) read: MaxBytes, else the default.
func (s *StateStore) Limit() int64 {
	if s.MaxBytes > 0 {
		return s.MaxBytes
	}
	return run.DefaultMaxStateBytes
}
