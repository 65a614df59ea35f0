package runner

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/names"
)

// Annotations of state and backup Secrets.
const (
	annotationEncoding   = "captf.io/encoding"
	annotationChunks     = "captf.io/chunks"
	annotationGeneration = "captf.io/generation"
	annotationSHA256     = "captf.io/sha256"
	annotationBackups    = "captf.io/backups"
	annotationSize       = "captf.io/uncompressed-bytes"
	annotationBackupOf   = "captf.io/backup-of"
	dataKey              = "tfstate"
)

// DefaultChunkSize keeps every Secret well under the 1 MiB object limit and
// etcd's 1.5 MiB request limit.
const DefaultChunkSize = 768 << 10

// StateStore keeps one object's Terraform state in Secrets: gzip-compressed,
// inline in the state Secret when small, else in chunk Secrets of a new
// generation that the state Secret switches to in one update (a reader never
// sees half a state). The first write of a run makes the previous state a
// backup; the newest Backups backups are kept.
type StateStore struct {
	Client    kubernetes.Interface
	Namespace string
	Object    names.Object
	// Labels go on every Secret (object identity, managed-by).
	Labels map[string]string
	// Owner is the Terraform* object; its deletion collects the Secrets.
	Owner     metav1.OwnerReference
	Backups   int
	ChunkSize int
	// Now is the clock of backup names.
	Now func() time.Time

	backedUp bool
	// BackupsMade counts backups this store made; LastBackup names the
	// newest.
	BackupsMade int
	LastBackup  string
}

// Read returns the current state, or nil when there is none.
func (s *StateStore) Read(ctx context.Context) ([]byte, error) {
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state secret: %w", err)
	}
	gz, err := s.readBlob(ctx, head)
	if err != nil {
		return nil, err
	}
	return gunzip(gz)
}

// Write stores state as the current state.
func (s *StateStore) Write(ctx context.Context, state []byte) error {
	gz, err := gzipBytes(state)
	if err != nil {
		return err
	}
	head, err := s.secrets().Get(ctx, s.Object.State(), metav1.GetOptions{})
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading state secret: %w", err)
	}
	if !exists {
		head = s.newSecret(s.Object.State(), names.SecretTypeState)
	}
	backups, err := backupsOf(head)
	if err != nil {
		return err
	}
	var dropped []string
	if exists && !s.backedUp && s.Backups > 0 {
		name, err := s.backup(ctx, head)
		if err != nil {
			return fmt.Errorf("backing up the previous state: %w", err)
		}
		s.LastBackup = name
		backups = append([]string{name}, backups...)
		if len(backups) > s.Backups {
			backups, dropped = backups[:s.Backups], backups[s.Backups:]
		}
	}
	oldGen, oldChunks := chunkInfo(head)
	gen := time.Now().UnixNano()
	if err := s.writeBlob(ctx, head, gz, func(i int) string { return s.Object.StateChunk(gen, i) }, names.SecretTypeStateChunk); err != nil {
		return err
	}
	head.Annotations[annotationGeneration] = strconv.FormatInt(gen, 10)
	head.Annotations[annotationSize] = strconv.Itoa(len(state))
	if b, _ := json.Marshal(backups); len(backups) > 0 {
		head.Annotations[annotationBackups] = string(b)
	}
	if exists {
		_, err = s.secrets().Update(ctx, head, metav1.UpdateOptions{})
	} else {
		_, err = s.secrets().Create(ctx, head, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("writing state secret: %w", err)
	}
	s.backedUp = true
	// The state Secret no longer points at these; failing to delete them
	// leaves garbage, never a broken state.
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
	return nil
}

// backup copies the state head points at into a new backup Secret.
func (s *StateStore) backup(ctx context.Context, head *corev1.Secret) (string, error) {
	gz, err := s.readBlob(ctx, head)
	if err != nil {
		return "", err
	}
	stamp := s.now().UTC().Format("20060102-150405")
	for i := 0; ; i++ {
		name := s.Object.Backup(stamp)
		if i > 0 {
			name = fmt.Sprintf("%s-%d", name, i)
		}
		sec := s.newSecret(name, names.SecretTypeBackup)
		sec.Annotations[annotationBackupOf] = s.Object.State()
		sec.Annotations[annotationSize] = head.Annotations[annotationSize]
		if err := s.writeBlob(ctx, sec, gz, func(c int) string { return s.Object.BackupChunk(name, c) }, names.SecretTypeBackupChunk); err != nil {
			return "", err
		}
		_, err := s.secrets().Create(ctx, sec, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		s.BackupsMade++
		return name, nil
	}
}

// ErrNotABackup is ReadBackup's error for a Secret that is not a backup of
// this state.
var ErrNotABackup = errors.New("not a state backup")

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
func backupsOf(head *corev1.Secret) ([]string, error) {
	var backups []string
	if v := head.Annotations[annotationBackups]; v != "" {
		if err := json.Unmarshal([]byte(v), &backups); err != nil {
			return nil, fmt.Errorf("state secret annotation %s: %w", annotationBackups, err)
		}
	}
	return backups, nil
}

// ReadBackup returns the state saved in a backup.
func (s *StateStore) ReadBackup(ctx context.Context, name string) ([]byte, error) {
	sec, err := s.secrets().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if sec.Labels[names.LabelSecretType] != names.SecretTypeBackup || sec.Annotations[annotationBackupOf] != s.Object.State() {
		return nil, fmt.Errorf("%w: secret %s is not a state backup of %s", ErrNotABackup, name, s.Object.State())
	}
	gz, err := s.readBlob(ctx, sec)
	if err != nil {
		return nil, err
	}
	return gunzip(gz)
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
	size := s.ChunkSize
	if size <= 0 {
		size = DefaultChunkSize
	}
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
		chunk := s.newSecret(chunkName(n), chunkType)
		chunk.Data = map[string][]byte{dataKey: gz[off:min(off+size, len(gz))]}
		if _, err := s.secrets().Create(ctx, chunk, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("writing chunk %s: %w", chunk.Name, err)
		}
		n++
	}
	sec.Data = nil
	sec.Annotations[annotationChunks] = strconv.Itoa(n)
	return nil
}

// readBlob returns the gzip bytes sec holds or points at, checked.
func (s *StateStore) readBlob(ctx context.Context, sec *corev1.Secret) ([]byte, error) {
	gen, chunks := chunkInfo(sec)
	var gz []byte
	if chunks == 0 {
		gz = sec.Data[dataKey]
	}
	for i := range chunks {
		name := s.Object.StateChunk(gen, i)
		if sec.Labels[names.LabelSecretType] == names.SecretTypeBackup {
			name = s.Object.BackupChunk(sec.Name, i)
		}
		c, err := s.secrets().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading chunk %s of %s: %w", name, sec.Name, err)
		}
		gz = append(gz, c.Data[dataKey]...)
	}
	sum := sha256.Sum256(gz)
	if want := sec.Annotations[annotationSHA256]; want != "" && want != hex.EncodeToString(sum[:]) {
		return nil, fmt.Errorf("state in %s is corrupt: sha256 %s, want %s", sec.Name, hex.EncodeToString(sum[:]), want)
	}
	return gz, nil
}

func chunkInfo(sec *corev1.Secret) (gen int64, chunks int) {
	gen, _ = strconv.ParseInt(sec.Annotations[annotationGeneration], 10, 64)
	chunks, _ = strconv.Atoi(sec.Annotations[annotationChunks])
	return gen, chunks
}

func (s *StateStore) newSecret(name, secretType string) *corev1.Secret {
	labels := map[string]string{names.LabelSecretType: secretType}
	for k, v := range s.Labels {
		labels[k] = v
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: labels, Annotations: map[string]string{}},
		Type:       corev1.SecretTypeOpaque,
	}
	if s.Owner.UID != "" {
		sec.OwnerReferences = []metav1.OwnerReference{s.Owner}
	}
	return sec
}

func (s *StateStore) deleteSecret(ctx context.Context, name string) error {
	err := s.secrets().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (s *StateStore) secrets() typedcorev1.SecretInterface {
	return s.Client.CoreV1().Secrets(s.Namespace)
}

func (s *StateStore) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
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

func gunzip(gz []byte) ([]byte, error) {
	if len(gz) == 0 {
		return nil, errors.New("state secret holds no data")
	}
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("state is not gzip: %w", err)
	}
	return io.ReadAll(r)
}
