package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 named cn.
func selfSigned(t *testing.T, dir, cn string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	for name, data := range map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, ".tmp"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, ".tmp"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func servedName(addr string) string {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return "error: " + err.Error()
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestServerCertificateReload: no certificate yet means not ready (and no
// crash); a certificate that appears or is replaced is served without a
// restart; TLS below 1.2 is refused.
func TestServerCertificateReload(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := NewServer(fmt.Sprintf(":%d", port), dir, "tls.crt", "tls.key", http.NewServeMux())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "webhook certificate") {
		t.Errorf("Ready without a certificate = %v", err)
	}
	if _, err := s.NotAfter(); err == nil {
		t.Error("NotAfter without a certificate: no error")
	}
	selfSigned(t, dir, "first")
	waitServed(t, addr, "first")
	if err := s.Ready(); err != nil {
		t.Errorf("Ready with a certificate: %v", err)
	}
	// captf_certificate_expiry_timestamp_seconds: the served certificate's
	// end, an hour from now.
	if end, err := s.NotAfter(); err != nil || time.Until(end) < 58*time.Minute || time.Until(end) > time.Hour {
		t.Errorf("NotAfter = %v, %v; want an hour from now", end, err)
	}
	selfSigned(t, dir, "second")
	waitServed(t, addr, "second")
	// A key that does not match (caught mid-rotation) keeps the last pair.
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(certRecheck + 100*time.Millisecond)
	if got := servedName(addr); got != "second" {
		t.Errorf("after a broken key the server serves %q, want the last good pair", got)
	}
	// The client offers TLS 1.0 and 1.1 only (Go's client refuses them
	// unless told): the server must refuse both.
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		if _, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: v, MaxVersion: v}); err == nil {
			t.Errorf("a %s handshake succeeded", tls.VersionName(v))
		} else if !strings.Contains(err.Error(), "protocol version") {
			t.Errorf("a %s handshake failed, but not for its version: %v", tls.VersionName(v), err)
		}
	}
}

func waitServed(t *testing.T, addr, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := servedName(addr)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("serves %q, want %q", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
