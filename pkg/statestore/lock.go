package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/captf/captf/pkg/retry"
)

const (
	annotationHolderUID   = "captf.io/holder-uid"
	annotationForceUnlock = "captf.io/force-unlocks"
)

// Lock is the state lock of one object: a Lease whose holder is the runner's
// pod, renewed while the run lasts. Only the end of the holder's pod frees
// it (see stale). A holder that stopped renewing may only be cut off from
// the runner API (the manager restarting, its node partitioned) while its
// terraform still runs, so its lock is not taken from it. See
// docs/architecture.md, "The state lock, and runs that outlive the
// manager".
type Lock struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Holder is this runner's pod name and HolderUID its UID.
	Holder    string
	HolderUID types.UID
	Labels    map[string]string
	// Duration is the Lease's duration, renewed every third of it: what
	// readers of the Lease see of the holder's health. No one takes the
	// lock when it passes.
	Duration time.Duration
	// Poll is the wait between attempts while another run holds the lock.
	Poll time.Duration
	// Clock times the Lease, the waits and the renewals; nil is the real one.
	Clock clock.WithTicker
	// New says the Lease is not expected to exist yet (the object was never
	// applied): the first attempt creates it without reading it first.
	New bool

	// Waits counts the times Acquire found the lock held; ForceUnlocked says
	// whether it took the lock from a stale holder.
	Waits         int
	ForceUnlocked bool

	mu          sync.Mutex
	held        bool
	createTried bool
	// last is the Lease as this run last wrote it: a renewal or release
	// updates it without reading it first, fenced by its resourceVersion.
	last *coordinationv1.Lease
}

// Acquire takes the lock, waiting up to timeout while a live holder has it.
func (l *Lock) Acquire(ctx context.Context, timeout time.Duration) error {
	logger := klog.FromContext(ctx)
	deadline := l.clock().Now().Add(timeout)
	for {
		// try reads the Lease first, so one whose answer was lost finds
		// the lock held by this run.
		var holder string
		err := retry.Transiently(ctx, func() (err error) {
			holder, err = l.try(ctx)
			return err
		})
		if err == nil && holder == "" {
			l.mu.Lock()
			l.held = true
			l.mu.Unlock()
			return nil
		}
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("state lock %s: %w", l.Name, err)
		}
		if err == nil {
			l.Waits++
			logger.Info("State is locked by another run, waiting", "lease", klog.KRef(l.Namespace, l.Name), "holder", holder)
			if l.clock().Now().After(deadline) {
				return fmt.Errorf("state lock %s is held by %s: gave up after %s", l.Name, holder, timeout)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.clock().After(l.poll()):
		}
	}
}

// try takes the lock if it is free, ours or stale; otherwise it returns the
// live holder.
func (l *Lock) try(ctx context.Context) (string, error) {
	leases := l.Client.CoordinationV1().Leases(l.Namespace)
	create := func() (string, error) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, Labels: l.Labels}}
		l.take(lease)
		created, err := leases.Create(ctx, lease, metav1.CreateOptions{})
		l.remember(created, err)
		return "", err
	}
	// A new object's Lease is created at once: a read would find nothing.
	// Only the first attempt: a create whose answer was lost is found by
	// the read of the next, held by this run.
	if l.New && !l.createTried {
		l.createTried = true
		if _, err := create(); !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	lease, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return create()
	}
	if err != nil {
		return "", err
	}
	holder := ptrValue(lease.Spec.HolderIdentity)
	if holder != "" && !(holder == l.Holder && types.UID(lease.Annotations[annotationHolderUID]) == l.HolderUID) {
		stale, why, err := l.stale(ctx, lease)
		if err != nil {
			return "", err
		}
		if !stale {
			return holder, nil
		}
		klog.FromContext(ctx).Info("Force-unlocking the state lock of a gone run", "lease", klog.KObj(lease), "holder", holder, "reason", why)
		n, _ := strconv.Atoi(lease.Annotations[annotationForceUnlock])
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[annotationForceUnlock] = strconv.Itoa(n + 1)
		l.ForceUnlocked = true
	}
	l.take(lease)
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	l.remember(updated, err)
	return "", err
}

// remember keeps the Lease this run wrote, or forgets it when the write
// failed.
func (l *Lock) remember(lease *coordinationv1.Lease, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = nil
	if err == nil {
		l.last = lease.DeepCopy()
	}
}

// ours updates the Lease when this run still holds it: change edits a copy
// of the Lease as this run last wrote it and the update is fenced by its
// resourceVersion; only when another writer came between (a conflict), or
// nothing is remembered, is the Lease read and its holder checked. notOurs
// is the answer when another holder has it.
func (l *Lock) ours(ctx context.Context, change func(*coordinationv1.Lease), notOurs error) error {
	leases := l.Client.CoordinationV1().Leases(l.Namespace)
	l.mu.Lock()
	lease := l.last.DeepCopy()
	l.mu.Unlock()
	if lease != nil {
		change(lease)
		updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			l.remember(updated, err)
			return err
		}
	}
	lease, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if holder := ptrValue(lease.Spec.HolderIdentity); holder != l.Holder || types.UID(lease.Annotations[annotationHolderUID]) != l.HolderUID {
		return fmt.Errorf("%w to %q", notOurs, holder)
	}
	change(lease)
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	l.remember(updated, err)
	return err
}

// stale tells whether the holder of lease is gone: its pod has finished,
// or it no longer exists (or another pod has its name) and has not renewed
// for the Lease's duration. A pod that exists may still run terraform,
// however long it has not renewed. A pod just deleted by force may too, for
// as long as the runner API still knows its token: so its lock waits out
// the Lease's duration. A pod the runner API will not show is not known to
// be gone.
func (l *Lock) stale(ctx context.Context, lease *coordinationv1.Lease) (bool, string, error) {
	pod, err := l.Client.CoreV1().Pods(l.Namespace).Get(ctx, ptrValue(lease.Spec.HolderIdentity), metav1.GetOptions{})
	gone := ""
	switch {
	case apierrors.IsNotFound(err):
		gone = "its pod no longer exists"
	case apierrors.IsForbidden(err):
		return false, "", nil
	case err != nil:
		return false, "", err
	case string(pod.UID) != lease.Annotations[annotationHolderUID]:
		gone = "its pod no longer exists (a new pod has its name)"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return true, "its pod has finished", nil
	default:
		return false, "", nil
	}
	if renewed := lease.Spec.RenewTime; renewed != nil && lease.Spec.LeaseDurationSeconds != nil &&
		l.clock().Since(renewed.Time) < time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
		return false, "", nil
	}
	return true, gone, nil
}

func (l *Lock) take(lease *coordinationv1.Lease) {
	now := metav1.NewMicroTime(l.clock().Now())
	seconds := int32(l.duration().Seconds())
	lease.Spec.HolderIdentity = &l.Holder
	lease.Spec.LeaseDurationSeconds = &seconds
	lease.Spec.AcquireTime = &now
	lease.Spec.RenewTime = &now
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[annotationHolderUID] = string(l.HolderUID)
}

// KeepRenewed renews the lock until ctx ends. When an answer says the lock
// is no longer this run's (another holder has it, the Lease is gone, or
// the runner API no longer knows this run's pod) it calls lost once and
// stops: the run must stop too. A renewal that gets no answer is not a
// lost lock: the run goes on, and renews once the API answers again.
func (l *Lock) KeepRenewed(ctx context.Context, lost func(error)) {
	ticker := l.clock().NewTicker(l.duration() / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
		err := l.renew(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			continue
		case !LockTaken(err):
			klog.FromContext(ctx).Error(err, "Renewing the state lock; the run goes on", "lease", klog.KRef(l.Namespace, l.Name))
			continue
		}
		l.mu.Lock()
		l.held = false
		l.mu.Unlock()
		if !errors.Is(err, ErrLockLost) {
			err = fmt.Errorf("%w: %w", ErrLockLost, err)
		}
		lost(err)
		return
	}
}

// LockTaken tells a renewal's answer that the lock is no longer this run's
// from one that did not come (the runner API down, a connection cut) or
// says to try again.
func LockTaken(err error) bool {
	return errors.Is(err, ErrLockLost) || apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
}

var ErrLockLost = errors.New("lost the state lock")

func (l *Lock) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(l.clock().Now())
	return l.ours(ctx, func(lease *coordinationv1.Lease) { lease.Spec.RenewTime = &now }, ErrLockLost)
}

// Release frees the lock if this run holds it; the Lease stays.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	held := l.held
	l.held = false
	l.mu.Unlock()
	if !held {
		return nil
	}
	return retry.Transiently(ctx, func() error { return l.release(ctx) })
}

func (l *Lock) release(ctx context.Context) error {
	errNotOurs := errors.New("not ours")
	err := l.ours(ctx, func(lease *coordinationv1.Lease) {
		lease.Spec.HolderIdentity = nil
		lease.Spec.AcquireTime, lease.Spec.RenewTime = nil, nil
		delete(lease.Annotations, annotationHolderUID)
	}, errNotOurs)
	if errors.Is(err, errNotOurs) {
		return nil // another run has it: nothing to free
	}
	return err
}

func (l *Lock) clock() clock.WithTicker {
	if l.Clock != nil {
		return l.Clock
	}
	return clock.RealClock{}
}

func (l *Lock) duration() time.Duration {
	if l.Duration > 0 {
		return l.Duration
	}
	return 30 * time.Second
}

func (l *Lock) poll() time.Duration {
	if l.Poll > 0 {
		return l.Poll
	}
	return 2 * time.Second
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
