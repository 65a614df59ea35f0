package statestore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/retry"
)

// Chunks: a state or backup is gzipped and split over Secrets of at most
// ChunkSize, read back as a stream and decompressed up to MaxBytes.

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

func (s *StateStore) chunkSize() int {
	if s.ChunkSize > 0 {
		return s.ChunkSize
	}
	return DefaultChunkSize
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
