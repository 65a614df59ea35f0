// Package retry tells the failures of a request that may be sent again
// (no answer, or one that says try again) from refusals, and retries them
// for as long as it takes: a runner waits for the runner API while its pod
// lives.
package retry

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Transiently runs call, a request that may run twice (a create-or-update,
// or a read-then-write that finds its own earlier write), again while its
// connection to the runner API fails (the manager down or replaced, a
// connection lost mid-request) or the API answers 5xx or 429. A run that
// failed on such an error would be run again by a new Job: for an apply whose
// report was lost, a second apply. It waits as long as the run may last: the
// Job's deadline ends the pod, or ctx ends.
func Transiently(ctx context.Context, call func() error) error {
	var wait Backoff
	for {
		err := call()
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return err
		}
		delay := max(wait.Next(), RetryAfter(err))
		klog.FromContext(ctx).Info("A request to the runner API failed; retrying", "err", err, "in", delay)
		if !wait.SleepAtLeast(ctx, delay) {
			return err
		}
	}
}

// Transient: no answer from the API (the request failed in transport, or
// its connection was cut), or one that says try again. A refusal, or an
// error of the runner's own checks, is not.
func Transient(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsServerTimeout(err) ||
			apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// A certificate this run does not trust does not change while it
	// waits: fail, and the next attempt gets the CA of its time.
	var unknownCA x509.UnknownAuthorityError
	var badName x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &unknownCA) || errors.As(err, &badName) || errors.As(err, &invalid) || errors.As(err, &verify) {
		return false
	}
	var uerr *url.Error
	return errors.As(err, &uerr) || ConnectionCut(err) || utilnet.IsConnectionRefused(err)
}

// ConnectionCut: the connection to the runner API broke while a request was
// on it (the manager's pod killed, say): whether the request took effect is
// not known.
func ConnectionCut(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err)
}

// Backoff waits between retries: from 250 ms, doubling up to 5 s. Retries
// have no deadline of their own: a runner waits for the runner API as long
// as its pod lives (the Job's deadline), for a run that stopped because the
// manager was away would leave half an apply behind.
type Backoff struct {
	// Clock times the waits; nil is the real one.
	Clock clock.Clock
	delay time.Duration
}

// Next is the delay sleep waits next.
func (b *Backoff) Next() time.Duration {
	return cmp.Or(b.delay, 250*time.Millisecond)
}

// RetryAfter is how long an answer told the client to wait before it asks
// again (a 429's or 503's Retry-After), or 0.
func RetryAfter(err error) time.Duration {
	if seconds, ok := apierrors.SuggestsClientDelay(err); ok && seconds > 0 {
		return time.Duration(seconds) * time.Second
	}
	return 0
}

// Sleep waits the next delay; false when ctx ends first.
func (b *Backoff) Sleep(ctx context.Context) bool { return b.SleepAtLeast(ctx, 0) }

// SleepAtLeast waits the next delay, or floor if that is longer; false when
// ctx ends first.
func (b *Backoff) SleepAtLeast(ctx context.Context, floor time.Duration) bool {
	select {
	case <-b.clock().After(max(b.Next(), floor)):
	case <-ctx.Done():
		return false
	}
	b.delay = min(2*b.Next(), 5*time.Second)
	return true
}

func (b *Backoff) clock() clock.Clock {
	if b.Clock == nil {
		return clock.RealClock{}
	}
	return b.Clock
}
