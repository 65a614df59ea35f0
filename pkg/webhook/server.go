// Package webhook is CAPTF's validating admission webhook: a plain net/http
// server over TLS whose certificate is reloaded from files when they change.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// How often the certificate files are read again at most: cert-manager
// renews in place, and a handshake is the moment to notice.
const certRecheck = time.Second

// Server serves the webhook paths (or, named otherwise, another handler:
// the runner API, metrics) over TLS on every manager replica.
type Server struct {
	Name     string
	Addr     string
	CertFile string
	KeyFile  string
	Handler  http.Handler
	// Clock times the certificate's re-reads; nil is the real one.
	Clock clock.PassiveClock

	certs   certificate
	serving atomic.Bool
}

// NewServer serves handler on addr (host:port, host optional) with the
// certificate and key in certDir.
func NewServer(addr, certDir, certName, keyName string, handler http.Handler) *Server {
	s := &Server{Name: "webhook", Addr: addr, CertFile: filepath.Join(certDir, certName), KeyFile: filepath.Join(certDir, keyName), Handler: handler}
	s.certs.certFile, s.certs.keyFile = s.CertFile, s.KeyFile
	return s
}

// Ready says whether the server serves with a certificate.
func (s *Server) Ready() error {
	if !s.serving.Load() {
		return fmt.Errorf("%s server not listening", s.Name)
	}
	if _, err := s.certs.get(s.now()); err != nil {
		return fmt.Errorf("%s certificate: %w", s.Name, err)
	}
	return nil
}

// Start listens and serves until ctx ends. A certificate that is not there
// yet (cert-manager has not issued it) is not an error: handshakes fail and
// Ready says why until it appears.
func (s *Server) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName(s.Name)
	if _, err := s.certs.get(s.now()); err != nil {
		logger.Info("Warning: no certificate yet; serving once it appears", "err", err)
	}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("%s server: %w", s.Name, err)
	}
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// TLS handshake errors (an old CA bundle during a rotation) go to
		// the manager's log, not to stderr.
		ErrorLog: klog.NewStandardLogger("WARNING"),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				c, err := s.certs.get(s.now())
				if err != nil {
					logger.Error(err, "No certificate to serve")
				}
				return c, err
			},
		},
	}
	go func() {
		<-ctx.Done()
		s.serving.Store(false)
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	s.serving.Store(true)
	logger.Info("Serving", "address", ln.Addr().String(), "cert", s.CertFile)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serving.Store(false)
			logger.Error(err, "Server stopped")
		}
	}()
	return nil
}

// certificate is the key pair from two files, read again when they change.
type certificate struct {
	certFile, keyFile string

	mu        sync.Mutex
	checked   time.Time
	certPEM   []byte
	keyPEM    []byte
	cert      *tls.Certificate
	lastError error
}

func (c *certificate) get(now time.Time) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.checked) < certRecheck && (c.cert != nil || c.lastError != nil) {
		if c.cert != nil {
			return c.cert, nil
		}
		return nil, c.lastError
	}
	c.checked = now
	certPEM, err := os.ReadFile(c.certFile)
	if err == nil {
		var keyPEM []byte
		if keyPEM, err = os.ReadFile(c.keyFile); err == nil {
			if bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) && c.cert != nil {
				return c.cert, nil
			}
			var pair tls.Certificate
			if pair, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
				c.cert, c.certPEM, c.keyPEM, c.lastError = &pair, certPEM, keyPEM, nil
				return c.cert, nil
			}
		}
	}
	// A pair caught mid-rotation (one file new, one old) does not match:
	// keep serving the previous one until both are in place.
	c.lastError = err
	if c.cert != nil {
		return c.cert, nil
	}
	return nil, err
}

// NotAfter is when the certificate the server serves expires (its files
// read again if they changed).
func (s *Server) NotAfter() (time.Time, error) {
	c, err := s.certs.get(s.now())
	if err != nil {
		return time.Time{}, err
	}
	if c.Leaf == nil {
		return time.Time{}, fmt.Errorf("%s certificate: no leaf", s.Name)
	}
	return c.Leaf.NotAfter, nil
}

func (s *Server) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}
