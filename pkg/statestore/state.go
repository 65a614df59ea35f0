package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
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

// Claim makes the state this run's: it checks the state Secret belongs to
// the object, stamps it with holder (creating an empty one when there is no
// state yet) and remembers its version; writes of a run that claims after
// this one fail with ErrFenced. expectState refuses a missing state: the
// object was applied, and running on an empty state would create everything
// again.
func (s *StateStore) Claim(ctx context.Context, holder string, expectState bool) error {
	create := func() (bool, error) {
		head := s.newSecret(s.Object.State(), names.SecretTypeState)
		head.Annotations[AnnotationHolder] = holder
		created, err := s.secrets().Create(ctx, head, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("creating state secret: %w", err)
		}
		s.head, s.known = created, false
		return true, nil
	}
	// An object never applied has no state yet, as a rule. One that is
	// there (left by a first apply that failed) is read and claimed as
	// below, and so is one a claim whose answer was lost created.
	if s.New && !s.createTried {
		s.createTried = true
		if created, err := create(); created || err != nil {
			return err
		}
	}
	head, err := s.checkedHead(ctx, expectState)
	if err != nil {
		return err
	}
	if head == nil {
		created, err := create()
		if err == nil && !created {
			return fmt.Errorf("%w: the state Secret appeared while claiming it", ErrFenced)
		}
		return err
	}
	updated, err := s.secrets().Update(ctx, s.stamped(head, holder), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: the state Secret changed while claiming it", ErrFenced)
	}
	if err != nil {
		return fmt.Errorf("claiming state secret: %w", err)
	}
	s.head, s.known = updated, false
	return nil
}

// stamped is a copy of head claimed by holder.
func (s *StateStore) stamped(head *corev1.Secret, holder string) *corev1.Secret {
	head = head.DeepCopy()
	head.Annotations[AnnotationHolder] = holder
	for k, v := range s.Labels { // a restored or moved object adopts its state
		head.Labels[k] = v
	}
	if !slices.Contains(head.Finalizers, names.StateFinalizer) {
		head.Finalizers = append(head.Finalizers, names.StateFinalizer)
	}
	return head
}

// ClaimPlanned claims, after CheckReadOnly, the state the check found: an
// apply plans read-only and claims only once its plan may apply, so that a
// plan that waits for an approver writes nothing. A state written since the
// check is not the one the plan was made from: the run is fenced.
func (s *StateStore) ClaimPlanned(ctx context.Context, holder string) error {
	if !s.readOnly {
		return errors.New("a planned claim follows a read-only check")
	}
	planned := s.head
	var err error
	if planned == nil {
		var created *corev1.Secret
		head := s.newSecret(s.Object.State(), names.SecretTypeState)
		head.Annotations[AnnotationHolder] = holder
		if created, err = s.secrets().Create(ctx, head, metav1.CreateOptions{}); err == nil {
			s.head, s.known, s.readOnly = created, false, false
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating state secret: %w", err)
		}
	} else {
		var updated *corev1.Secret
		if updated, err = s.secrets().Update(ctx, s.stamped(planned, holder), metav1.UpdateOptions{}); err == nil {
			s.head, s.readOnly = updated, false // the same state: what was read stays known
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("claiming state secret: %w", err)
		}
	}
	// This claim's own write, whose answer was lost, or another's.
	current, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading state secret: %w", err)
	}
	if current.Annotations[AnnotationHolder] != holder || !sameState(planned, current) {
		return ErrChangedSincePlan
	}
	s.head, s.readOnly = current, false
	s.known = s.known && planned != nil
	return nil
}

// sameState tells whether head holds the state planned held (none, when
// planned is nil).
func sameState(planned, head *corev1.Secret) bool {
	if planned == nil || !HasState(planned) {
		return !HasState(head)
	}
	return HasState(head) && head.Annotations[annotationStateSum] == planned.Annotations[annotationStateSum]
}

// CheckReadOnly makes the checks of Claim without writing, and refuses every
// later write: for runs that only plan, and for an apply until its plan may
// apply (ClaimPlanned).
func (s *StateStore) CheckReadOnly(ctx context.Context, _ string, expectState bool) error {
	s.readOnly = true
	head, err := s.checkedHead(ctx, expectState)
	if err != nil {
		return err
	}
	s.head = head
	return nil
}

// checkedHead reads the state Secret (nil when there is none) and refuses
// another object's, and a missing state when one is expected.
func (s *StateStore) checkedHead(ctx context.Context, expectState bool) (*corev1.Secret, error) {
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		head = nil
	case err != nil:
		return nil, fmt.Errorf("reading state secret: %w", err)
	default:
		if err := s.checkOwner(head); err != nil {
			return nil, err
		}
	}
	if expectState && (head == nil || !HasState(head)) {
		return nil, fmt.Errorf("%w: %s holds no state", ErrStateMissing, s.Object.State())
	}
	return head, nil
}

// checkOwner refuses a state Secret recorded for another object.
func (s *StateStore) checkOwner(head *corev1.Secret) error {
	name, ok := head.Annotations[names.AnnotationObjectName]
	if !ok {
		name = head.Labels[names.LabelObjectName] // written before the annotation existed
		if name == names.LabelValue(s.Object.Name) {
			name = s.Object.Name
		}
	}
	if name != s.Object.Name || head.Labels[names.LabelKind] != s.Object.Kind {
		return fmt.Errorf("%w: %s records %s %q as its owner", ErrOtherOwner, head.Name, head.Labels[names.LabelKind], name)
	}
	if head.Labels[names.LabelAbandoned] == "true" {
		// A former object of this name left it: taking it up is a decision.
		return fmt.Errorf("%w: %s is the abandoned state of a former object of this name", ErrOtherOwner, head.Name)
	}
	return nil
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

// updateHead writes head, fenced by its resourceVersion. When an answer is
// lost (the runner API's pod killed mid-request), the write may have landed:
// the head is read back and written tells whether it holds this write;
// writing again blindly would find a conflict with itself and fail the run.
// A conflict with another writer is ErrFenced.
func (s *StateStore) updateHead(ctx context.Context, head *corev1.Secret, written func(current *corev1.Secret) bool) (*corev1.Secret, error) {
	var updated *corev1.Secret
	uncertain := false
	err := retry.Transiently(ctx, func() error {
		if uncertain {
			current, err := s.secrets().Get(ctx, head.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if current.ResourceVersion != head.ResourceVersion {
				if written(current) && current.Annotations[AnnotationHolder] == head.Annotations[AnnotationHolder] {
					updated = current
					return nil
				}
				return ErrFenced
			}
		}
		var err error
		updated, err = s.secrets().Update(ctx, head, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return ErrFenced
		}
		uncertain = err != nil && retry.Transient(err)
		return err
	})
	return updated, err
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

// Holds says what a terraform state holds, for AnnotationHolds: its serial
// and how many instances of managed resources; "" when it is not a plain
// state (encrypted, or not JSON).
func Holds(state []byte) string {
	var st struct {
		Serial    *int `json:"serial"`
		Resources []struct {
			Mode      string            `json:"mode"`
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if json.Unmarshal(state, &st) != nil || st.Serial == nil {
		return ""
	}
	n := 0
	for _, r := range st.Resources {
		if r.Mode == "managed" {
			n += len(r.Instances)
		}
	}
	return fmt.Sprintf("serial %d, %d resources", *st.Serial, n)
}

func setHolds(sec *corev1.Secret, holds string) {
	if holds == "" {
		delete(sec.Annotations, AnnotationHolds)
		return
	}
	sec.Annotations[AnnotationHolds] = holds
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

// writeBlob stores gz in sec (inline) or in chunk Secrets it creates first.
func (s *StateStore) writeBlob(ctx context.Context, sec *corev1.Secret, gz []byte, chunkName func(int) string, chunkType string) error {
	size := s.chunkSize()
	sum := sha256.Sum256(gz)
	sec.Annotations[annotationEncoding] = "gzip"
	sec.Annotations[annotationSHA256] = hex.EncodeToString(sum[:])
	if len(gz) <= size {
		sec.Data = map[string][]byte{dataKey: gz}
		delete(sec.Annotations, annotationChunks)
		return nil
	}
	n := 0
	for off := 0; off < len(gz); off += size {
		if err := s.createChunk(ctx, chunkName(n), chunkType, gz[off:min(off+size, len(gz))]); err != nil {
			return err
		}
		n++
	}
	sec.Data = nil
	sec.Annotations[annotationChunks] = strconv.Itoa(n)
	return nil
}

// createChunk creates one chunk Secret holding data.
func (s *StateStore) createChunk(ctx context.Context, name, chunkType string, data []byte) error {
	chunk := s.newSecret(name, chunkType)
	chunk.Data = map[string][]byte{dataKey: data}
	// A chunk's name is this write's alone: one that exists after a cut
	// connection is the one this write sent (and the blob's sum is checked
	// on every read).
	cut := false
	err := retry.Transiently(ctx, func() error {
		_, err := s.secrets().Create(ctx, chunk, metav1.CreateOptions{})
		if cut && apierrors.IsAlreadyExists(err) {
			return nil
		}
		cut = err != nil && retry.Transient(err)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing chunk %s: %w", name, err)
	}
	return nil
}

// readBlob returns the gzip bytes sec holds or points at, checked and
// bounded.
func (s *StateStore) readBlob(ctx context.Context, sec *corev1.Secret) ([]byte, error) {
	return io.ReadAll(s.blobReader(ctx, sec))
}

// blobReader reads the gzip bytes sec holds or points at, one chunk Secret
// at a time, bounded by the size limit (a forged chunk count cannot make
// it read without end); at the end it checks their sha256 against sec's.
func (s *StateStore) blobReader(ctx context.Context, sec *corev1.Secret) *blobReader {
	gen, chunks := chunkInfo(sec)
	return &blobReader{ctx: ctx, store: s, sec: sec, gen: gen, chunks: chunks, sum: sha256.New()}
}

type blobReader struct {
	ctx    context.Context
	store  *StateStore
	sec    *corev1.Secret
	gen    int64
	chunks int
	// onPiece, when set, sees every piece (the inline data, or chunk i)
	// as it is read: a copy writes it out before the next is read.
	onPiece func(i int, piece []byte) error

	next  int    // the next piece
	piece []byte // what is left of the current piece
	read  int64  // bytes read so far
	sum   hash.Hash
	err   error
}

func (b *blobReader) Read(p []byte) (int, error) {
	for len(b.piece) == 0 { // an empty inline state reads as nothing, then EOF
		if b.err != nil {
			return 0, b.err
		}
		b.err = b.advance()
	}
	n := copy(p, b.piece)
	b.piece = b.piece[n:]
	return n, nil
}

// advance reads the next piece, or ends with io.EOF once the sum is right.
func (b *blobReader) advance() error {
	s, sec := b.store, b.sec
	if int64(b.chunks) > s.Limit()/int64(s.chunkSize())+1 {
		return fmt.Errorf("%w: %s has %d chunks (limit %d bytes)", ErrStateTooLarge, sec.Name, b.chunks, s.Limit())
	}
	var piece []byte
	switch {
	case b.next == max(b.chunks, 1):
		got := hex.EncodeToString(b.sum.Sum(nil))
		if want := sec.Annotations[annotationSHA256]; want != "" && want != got {
			return fmt.Errorf("%w: %s: sha256 %s, want %s", ErrStateCorrupt, sec.Name, got, want)
		}
		return io.EOF
	case b.chunks == 0:
		piece = sec.Data[dataKey]
	default:
		name := s.Object.StateChunk(b.gen, b.next)
		if sec.Labels[names.LabelSecretType] == names.SecretTypeBackup {
			name = s.Object.BackupChunk(sec.Name, b.next)
		}
		c, err := s.secrets().Get(b.ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading chunk %s of %s: %w", name, sec.Name, err)
		}
		if piece = c.Data[dataKey]; len(piece) == 0 {
			return fmt.Errorf("%w: chunk %s of %s is empty", ErrStateCorrupt, name, sec.Name)
		}
	}
	if b.read += int64(len(piece)); b.read > s.Limit() {
		return fmt.Errorf("%w: %s is over %d bytes compressed", ErrStateTooLarge, sec.Name, s.Limit())
	}
	b.sum.Write(piece)
	if b.onPiece != nil {
		if err := b.onPiece(b.next, piece); err != nil {
			return err
		}
	}
	b.next++
	b.piece = piece
	return nil
}

// copyBlob copies the blob src holds or points at into dst: inline, or as
// chunks (named by chunkName) of the same sizes, each written before the
// next is read. It checks the copy as it goes (sha256, the size limit and,
// when decompress is set, gzip: then it tells the uncompressed size and
// sha256); a copy that fails leaves no chunk behind.
func (s *StateStore) copyBlob(ctx context.Context, src, dst *corev1.Secret, chunkName func(int) string, chunkType string, decompress bool) (int64, string, error) {
	_, chunks := chunkInfo(src)
	r := s.blobReader(ctx, src)
	var written []string
	r.onPiece = func(i int, piece []byte) error {
		if chunks == 0 {
			dst.Data = map[string][]byte{dataKey: piece}
			return nil
		}
		dst.Data = nil
		name := chunkName(i)
		if err := s.createChunk(ctx, name, chunkType, piece); err != nil {
			return err
		}
		written = append(written, name)
		return nil
	}
	h := sha256.New()
	var size int64
	var err error
	if decompress {
		size, err = s.inflate(r, h)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, r) // what follows the gzip stream is copied and summed too
	}
	if err != nil {
		for _, name := range written {
			if derr := s.deleteSecret(context.WithoutCancel(ctx), name); derr != nil {
				klog.FromContext(ctx).Error(derr, "Deleting a chunk of a copy that failed", "chunk", name)
			}
		}
		return 0, "", err
	}
	dst.Annotations[annotationEncoding] = "gzip"
	dst.Annotations[annotationSHA256] = hex.EncodeToString(r.sum.Sum(nil))
	if chunks == 0 {
		delete(dst.Annotations, annotationChunks)
	} else {
		dst.Annotations[annotationChunks] = strconv.Itoa(chunks)
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

func chunkInfo(sec *corev1.Secret) (gen int64, chunks int) {
	gen, _ = strconv.ParseInt(sec.Annotations[annotationGeneration], 10, 64)
	chunks, _ = strconv.Atoi(sec.Annotations[annotationChunks])
	return gen, max(chunks, 0)
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

func (s *StateStore) chunkSize() int {
	if s.ChunkSize > 0 {
		return s.ChunkSize
	}
	return DefaultChunkSize
}

// Limit is the largest state (and backup) read: MaxBytes, else the default.
func (s *StateStore) Limit() int64 {
	if s.MaxBytes > 0 {
		return s.MaxBytes
	}
	return run.DefaultMaxStateBytes
}

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gunzip decompresses at most the size limit: a gzip bomb is an error, not
// an out-of-memory kill.
func (s *StateStore) gunzip(gz []byte) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := s.inflate(bytes.NewReader(gz), &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// inflate decompresses gz into w, at most the size limit, and tells how
// many bytes it wrote.
func (s *StateStore) inflate(gz io.Reader, w io.Writer) (int64, error) {
	r, err := gzip.NewReader(gz)
	if errors.Is(err, io.EOF) {
		return 0, errors.New("state secret holds no data")
	}
	if errors.Is(err, ErrStateTooLarge) || errors.Is(err, ErrStateCorrupt) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("%w: not gzip: %w", ErrStateCorrupt, err)
	}
	n, err := io.Copy(w, io.LimitReader(r, s.Limit()+1))
	if errors.Is(err, ErrStateTooLarge) || errors.Is(err, ErrStateCorrupt) {
		return n, err
	}
	if err != nil {
		return n, fmt.Errorf("%w: not valid gzip: %w", ErrStateCorrupt, err)
	}
	if n > s.Limit() {
		return n, fmt.Errorf("%w: over %d bytes uncompressed", ErrStateTooLarge, s.Limit())
	}
	return n, nil
}

func sha256Of(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}
