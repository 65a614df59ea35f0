package retry

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestTransient: no answer, 5xx and 429 are tried again; a refusal, or a
// certificate this run does not trust, is not (it would not change while
// the run waits).
func TestTransient(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"connection refused":  {err: &url.Error{Op: "Get", URL: "https://api", Err: errors.New("connect: connection refused")}, want: true},
		"service unavailable": {err: apierrors.NewServiceUnavailable("no endpoints"), want: true},
		"forbidden":           {err: apierrors.NewForbidden(corev1.Resource("secrets"), "x", errors.New("no"))},
		"unknown authority":   {err: &url.Error{Op: "Get", URL: "https://api", Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", name, got, tc.want)
		}
	}
}
