package runner

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/statestore"
)

// Backend serves Terraform's http backend on loopback, so every state write
// Terraform makes (also the one it makes when interrupted) lands in the
// state Secrets at once. The run holds the state lock for its whole length,
// so Terraform's own locking is not configured.
type Backend struct {
	Store *statestore.StateStore

	addr, password string
	server         *http.Server
	// mu serves one request at a time, as terraform makes them: module
	// code that has the backend's address and password (local-exec
	// inherits terraform's environment) gets no concurrent reads and
	// writes of the store.
	mu sync.Mutex
	// Writes counts state writes; WriteErrors the ones that failed.
	Writes, WriteErrors int
	// LastStateBytes is the size of the last state written or read.
	LastStateBytes int
}

// Start listens on a free loopback port.
func (b *Backend) Start(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	b.addr, b.password = "http://"+l.Addr().String()+"/state", hex.EncodeToString(secret)
	b.server = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	go func() {
		if err := b.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "State backend stopped")
		}
	}()
	return nil
}

// Env configures terraform to use this backend.
func (b *Backend) Env() []string {
	return []string{
		"TF_HTTP_ADDRESS=" + b.addr,
		"TF_HTTP_USERNAME=captf",
		"TF_HTTP_PASSWORD=" + b.password,
		"TF_HTTP_RETRY_MAX=5",
	}
}

// Stop closes the listener once terraform is done.
func (b *Backend) Stop() {
	if b.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = b.server.Shutdown(ctx)
	}
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx := r.Context()
	user, pass, ok := r.BasicAuth()
	if !ok || user != "captf" || subtle.ConstantTimeCompare([]byte(pass), []byte(b.password)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.URL.Path != "/state" {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
		b.read(ctx, w)
	case http.MethodPost:
		b.write(ctx, w, r)
	case http.MethodDelete:
		// Terraform deletes the state only for workspace deletion, which
		// the http backend does not support; refuse rather than lose it.
		http.Error(w, "CAPTF does not delete state through the backend", http.StatusMethodNotAllowed)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// read answers terraform's read of the state.
func (b *Backend) read(ctx context.Context, w http.ResponseWriter) {
	state, err := b.Store.Read(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading state")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if state == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	b.LastStateBytes = len(state)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(state)
}

// write stores the state terraform sends, and tells it whether a failure is
// final.
func (b *Backend) write(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(ctx)
	// A state over the limit could never be read back: refuse it, and
	// terraform keeps it in errored.tfstate, which the runner rescues.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, b.Store.Limit()))
	if err != nil {
		b.WriteErrors++
		logger.Error(err, "Refusing a state over the limit", "limit", b.Store.Limit())
		http.Error(w, fmt.Sprintf("state over the limit of %d bytes (--max-state-bytes)", b.Store.Limit()), http.StatusRequestEntityTooLarge)
		return
	}
	if want := r.Header.Get("Content-MD5"); want != "" {
		sum := md5.Sum(body)
		if base64.StdEncoding.EncodeToString(sum[:]) != want {
			http.Error(w, "Content-MD5 mismatch", http.StatusBadRequest)
			return
		}
	}
	b.Writes++
	if err := b.Store.Write(ctx, body); err != nil {
		b.WriteErrors++
		logger.Error(err, "Writing state")
		status := http.StatusInternalServerError // terraform retries
		if errors.Is(err, statestore.ErrFenced) || statestore.LockTaken(err) {
			// Final: another run has the lock, or the runner API no
			// longer knows this run's pod; no retry can succeed.
			status = http.StatusConflict
		}
		http.Error(w, fmt.Sprintf("writing state: %v", err), status)
		return
	}
	b.LastStateBytes = len(body)
	w.WriteHeader(http.StatusOK)
}
