package runner

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captf/captf/pkg/run"
)

type flakyTransport struct {
	failures []error
	bodies   []string
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	f.bodies = append(f.bodies, string(b))
	if len(f.failures) > 0 {
		err := f.failures[0]
		f.failures = f.failures[1:]
		return nil, err
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("ok"))}, nil
}

// TestRedial: a request that could not connect (the manager restarting) is
// sent again, whole; a write that reached the manager is never repeated, a
// read whose answer was lost is. Retries end only with the request's
// context: a runner waits for the manager as long as its pod lives.
func TestRedial(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	badCert := errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority")
	tests := map[string]struct {
		method   string
		failures []error
		timeout  time.Duration
		wantErr  error
		sends    int
	}{
		"refused twice, then up":        {failures: []error{refused, refused}, sends: 3},
		"reset after sending: no retry": {failures: []error{reset}, wantErr: reset, sends: 1},
		"refused until the run ends":    {failures: []error{refused, refused, refused, refused}, timeout: 300 * time.Millisecond, wantErr: context.DeadlineExceeded, sends: 2},
		"read reset: sent again":        {method: http.MethodGet, failures: []error{reset, io.ErrUnexpectedEOF}, sends: 3},
		"read refused by TLS: no retry": {method: http.MethodGet, failures: []error{badCert}, wantErr: badCert, sends: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ft := &flakyTransport{failures: tc.failures}
			method := http.MethodPut
			if tc.method != "" {
				method = tc.method
			}
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			req, _ := http.NewRequestWithContext(ctx, method, "https://runner-api.test/x", strings.NewReader("state"))
			_, err := (&redial{next: ft}).RoundTrip(req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if len(ft.bodies) != tc.sends {
				t.Fatalf("sent %d times, want %d", len(ft.bodies), tc.sends)
			}
			for _, b := range ft.bodies {
				if b != "state" {
					t.Errorf("a send carried %q, want the whole body", b)
				}
			}
		})
	}
}

// TestTakeWriteKey: the write key leaves the environment before terraform
// or the module's code can inherit it, and the runner becomes undumpable:
// a process of the same user reads neither its memory nor its environ.
func TestTakeWriteKey(t *testing.T) {
	t.Setenv(run.EnvWriteKey, "the-key")
	key, err := takeWriteKey()
	if err != nil || key != "the-key" {
		t.Fatalf("takeWriteKey = %q, %v; want the key", key, err)
	}
	if v, ok := os.LookupEnv(run.EnvWriteKey); ok {
		t.Errorf("%s=%q still in the environment a child inherits", run.EnvWriteKey, v)
	}
	out, err := exec.Command("/bin/sh", "-c", "echo -n $"+run.EnvWriteKey).Output()
	if err != nil || len(out) != 0 {
		t.Errorf("a child reads %s=%q (%v)", run.EnvWriteKey, out, err)
	}
	dumpable, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0)
	if errno != 0 || dumpable != 0 {
		t.Errorf("PR_GET_DUMPABLE = %d (%v), want 0", dumpable, errno)
	}
}
