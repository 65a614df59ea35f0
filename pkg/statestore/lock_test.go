package statestore

import (
	"context"
	"errors"
	"io"
	"net/url"
	goruntime "runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// heldLease is the lock as another run holds it, renewed at renewed.
func heldLease(renewed time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "tfc-a-lock", Namespace: "ns", Annotations: map[string]string{annotationHolderUID: "other-uid"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("other"), LeaseDurationSeconds: ptrTo(int32(30)),
			AcquireTime: &t, RenewTime: &t},
	}
}

func holderPod(uid string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", UID: "other-uid"}, Status: corev1.PodStatus{Phase: phase}}
}

func ptrTo[T any](v T) *T { return &v }

// t0 is the fake clocks' start.
var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// stepWhileWaiting runs f, moving clk on by step each time something waits
// on it, until f returns: the lock's real durations and waits take no
// real time.
func stepWhileWaiting(clk *testingclock.FakeClock, step time.Duration, f func(), afterStep ...func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	for {
		select {
		case <-done:
			return
		default:
		}
		if clk.HasWaiters() {
			clk.Step(step)
			for _, after := range afterStep {
				after()
			}
		}
		goruntime.Gosched()
	}
}

// TestLockAcquire: who may take the lock, and when the wait gives up.
func TestLockAcquire(t *testing.T) {
	now := t0
	tests := map[string]struct {
		objects         []runtime.Object
		wantErr         string
		wantWaits       bool
		wantForceUnlock bool
		// wantWaited is how long the lock is waited for at least.
		wantWaited time.Duration
	}{
		"free":                         {},
		"held by a live run: gives up": {objects: []runtime.Object{heldLease(now), holderPod("other-uid", corev1.PodRunning)}, wantErr: "is held by other: gave up after", wantWaits: true},
		// Its pod runs: it may only be cut off from the runner API while its
		// terraform goes on.
		"held by a live run that stopped renewing": {objects: []runtime.Object{heldLease(now.Add(-time.Hour)), holderPod("other-uid", corev1.PodRunning)}, wantErr: "is held by other: gave up after", wantWaits: true},
		"held by a deleted pod still terminating": {objects: []runtime.Object{heldLease(now.Add(-time.Hour)), func() *corev1.Pod {
			p := holderPod("other-uid", corev1.PodRunning)
			p.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Hour)}
			return p
		}()}, wantErr: "is held by other: gave up after", wantWaits: true},
		"held by a pod that is gone": {objects: []runtime.Object{heldLease(now.Add(-time.Minute))}, wantForceUnlock: true},
		// Its label removed: not known to be gone.
		"held by a pod the runner API will not show": {objects: []runtime.Object{heldLease(now.Add(-time.Hour))}, wantErr: "is held by other: gave up after", wantWaits: true},
		// Force-deleted a moment ago: its runner may still be running, so
		// the Lease's 30 s are waited out.
		"held by a pod just gone, renewed since": {objects: []runtime.Object{heldLease(now)}, wantWaits: true, wantForceUnlock: true, wantWaited: 30 * time.Second},
		"held by a pod that finished":            {objects: []runtime.Object{heldLease(now), holderPod("other-uid", corev1.PodFailed)}, wantForceUnlock: true},
		"held by a pod whose name was reused":    {objects: []runtime.Object{heldLease(now.Add(-time.Minute)), func() *corev1.Pod { p := holderPod("", corev1.PodRunning); p.UID = "new-uid"; return p }()}, wantForceUnlock: true},
	}
	// A runner that thinks its object new creates the Lease first: it
	// must find the holder all the same.
	for name, tc := range tests {
		for _, newObject := range []bool{false, true} {
			if newObject {
				name += ", the run thinking its object new"
			}
			t.Run(name, func(t *testing.T) {
				client := fake.NewClientset(tc.objects...)
				if strings.HasPrefix(name, "held by a pod the runner API will not show") {
					client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "other", errors.New("not a pod of CAPTF's"))
					})
				}
				clk := testingclock.NewFakeClock(now)
				l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Clock: clk, New: newObject}
				var err error
				stepWhileWaiting(clk, 2*time.Second, func() { err = l.Acquire(context.Background(), time.Minute) })
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if waited := clk.Since(now); waited < tc.wantWaited {
					t.Errorf("took the lock after %s, want %s at least", waited, tc.wantWaited)
				}
				if (l.Waits > 0) != tc.wantWaits || l.ForceUnlocked != tc.wantForceUnlock {
					t.Errorf("waits %d, force-unlocked %v; want waits %v, force-unlocked %v", l.Waits, l.ForceUnlocked, tc.wantWaits, tc.wantForceUnlock)
				}
				lease, _ := client.CoordinationV1().Leases("ns").Get(context.Background(), "tfc-a-lock", metav1.GetOptions{})
				holder := ptrValue(lease.Spec.HolderIdentity)
				if tc.wantErr == "" && holder != "me" || tc.wantErr != "" && holder != "other" {
					t.Errorf("holder %q", holder)
				}
				if tc.wantForceUnlock && lease.Annotations[annotationForceUnlock] != "1" {
					t.Errorf("force unlocks recorded: %q, want 1", lease.Annotations[annotationForceUnlock])
				}
			})
		}
	}
}

// TestLockWaitsForRelease: a run waits while another holds the lock, and
// takes it once released, with its waits counted.
func TestLockWaitsForRelease(t *testing.T) {
	client := fake.NewClientset(heldLease(t0), holderPod("other-uid", corev1.PodRunning))
	other := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "other", HolderUID: "other-uid", held: true}
	clk := testingclock.NewFakeClock(t0)
	l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Clock: clk}
	var err error
	stepWhileWaiting(clk, 2*time.Second, func() {
		err = l.Acquire(context.Background(), time.Minute)
	}, func() {
		if clk.Since(t0) > 10*time.Second {
			_ = other.Release(context.Background())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Waits == 0 || l.ForceUnlocked {
		t.Errorf("waits %d, force-unlocked %v: want waits and no force unlock", l.Waits, l.ForceUnlocked)
	}
}

// TestLockLost: a run whose lock another run took is told, and stops
// renewing.
func TestLockLost(t *testing.T) {
	client := fake.NewClientset()
	enforceResourceVersions(client, "leases") // the lost run's renewal is a conflict, as on an API server
	clk := testingclock.NewFakeClock(t0)
	l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Clock: clk}
	if err := l.Acquire(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoordinationV1().Leases("ns").Update(context.Background(), heldLease(t0), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lost := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stepWhileWaiting(clk, 10*time.Second, func() { l.KeepRenewed(ctx, func(err error) { lost <- err }) })
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), `"other"`) {
			t.Errorf("lost with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("never told the lock was lost")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	lease, _ := client.CoordinationV1().Leases("ns").Get(context.Background(), "tfc-a-lock", metav1.GetOptions{})
	if ptrValue(lease.Spec.HolderIdentity) != "other" {
		t.Errorf("a lost lock's release freed another run's lock: holder %q", ptrValue(lease.Spec.HolderIdentity))
	}
}

// TestLockAnswerLost: a write to the Lease that reached the API but whose
// answer was lost (the manager's pod killed mid-request) is not a failed run:
// the lock is found held by this run and taken, then released.
func TestLockAnswerLost(t *testing.T) {
	for _, verb := range []string{"create", "create-first", "update"} {
		t.Run(verb, func(t *testing.T) {
			newObject := verb == "create-first"
			verb := strings.TrimSuffix(verb, "-first")
			var objects []runtime.Object
			if verb == "update" {
				objects = append(objects, heldLease(time.Now().Add(-time.Minute))) // stale: taken by an update
			}
			client := fake.NewClientset(objects...)
			lost := 0
			client.PrependReactor(verb, "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if lost > 0 {
					return false, nil, nil
				}
				lost++
				a := action.(interface{ GetObject() runtime.Object })
				var err error
				if verb == "create" {
					err = client.Tracker().Create(action.GetResource(), a.GetObject(), action.GetNamespace())
				} else {
					err = client.Tracker().Update(action.GetResource(), a.GetObject(), action.GetNamespace())
				}
				if err != nil {
					t.Fatal(err)
				}
				return true, nil, io.ErrUnexpectedEOF
			})
			l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Poll: 10 * time.Millisecond, New: newObject}
			if err := l.Acquire(context.Background(), time.Second); err != nil {
				t.Fatalf("acquire: %v", err)
			}
			if lost != 1 || l.Waits != 0 {
				t.Errorf("answers lost %d, waits %d: want 1 and 0", lost, l.Waits)
			}
			lease, _ := client.CoordinationV1().Leases("ns").Get(context.Background(), "tfc-a-lock", metav1.GetOptions{})
			if ptrValue(lease.Spec.HolderIdentity) != "me" {
				t.Errorf("holder %q, want me", ptrValue(lease.Spec.HolderIdentity))
			}
		})
	}
}

// TestLockOutlivesAnUnreachableAPI: renewals that get no answer (the manager
// down, a connection cut) for many times the Lease's duration do not lose
// the lock: the run goes on and renews once the API answers again. An
// answer that the lock is no longer the run's loses it at once.
func TestLockOutlivesAnUnreachableAPI(t *testing.T) {
	unreachable := &url.Error{Op: "Get", URL: "https://runner-api", Err: errors.New("connect: connection refused")}
	tests := map[string]struct {
		failure  error
		wantLost string
	}{
		"no answer":                {failure: unreachable},
		"service unavailable":      {failure: apierrors.NewServiceUnavailable("no endpoints")},
		"too many requests":        {failure: apierrors.NewTooManyRequests("slow down", 1)},
		"the Lease deleted":        {failure: apierrors.NewNotFound(coordinationv1.Resource("leases"), "tfc-a-lock"), wantLost: "not found"},
		"the run's pod is gone":    {failure: apierrors.NewUnauthorized("the token's pod is gone"), wantLost: "pod is gone"},
		"the run's Job is refused": {failure: apierrors.NewForbidden(corev1.Resource("pods"), "me", errors.New("the pod's Job is gone")), wantLost: "Job is gone"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			clk := testingclock.NewFakeClock(t0)
			l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Clock: clk}
			if err := l.Acquire(context.Background(), time.Second); err != nil {
				t.Fatal(err)
			}
			var failing atomic.Bool
			failing.Store(true)
			failed := atomic.Int32{}
			client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if failing.Load() {
					failed.Add(1)
					return true, nil, tc.failure
				}
				return false, nil, nil
			})
			lost := make(chan error, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go l.KeepRenewed(ctx, func(err error) { lost <- err })
			// tick moves the clock to the next renewal and waits until it
			// is tried (or the lock is lost).
			tick := func(tried func() bool) error {
				if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					return clk.HasWaiters(), nil
				}); err != nil {
					t.Fatal("KeepRenewed waits for no tick")
				}
				clk.Step(10 * time.Second)
				var gone error
				_ = wait.PollUntilContextTimeout(ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					select {
					case gone = <-lost:
						return true, nil
					default:
						return tried(), nil
					}
				})
				return gone
			}
			// Ten Lease durations (30 s, renewed every 10 s) without an answer.
			for i := range 30 {
				err := tick(func() bool { return failed.Load() > int32(i) })
				if err == nil {
					continue
				}
				if tc.wantLost == "" {
					t.Fatalf("lost the lock to an API that did not answer: %v", err)
				}
				if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), tc.wantLost) {
					t.Errorf("lost with %v, want ErrLockLost and %q", err, tc.wantLost)
				}
				return
			}
			if tc.wantLost != "" {
				t.Fatalf("never told the lock was lost (%s)", tc.failure)
			}
			failing.Store(false)
			renewed := func() bool {
				lease, err := client.CoordinationV1().Leases("ns").Get(ctx, "tfc-a-lock", metav1.GetOptions{})
				return err == nil && lease.Spec.RenewTime.Equal(&metav1.MicroTime{Time: clk.Now()})
			}
			if err := tick(renewed); err != nil {
				t.Fatalf("lost the lock once the API answered: %v", err)
			}
			if !renewed() {
				t.Error("not renewed once the API answered again")
			}
			select {
			case err := <-lost:
				t.Errorf("lost the lock: %v", err)
			default:
			}
		})
	}
}

// TestLockRequests: a new object's lock costs a create to take (no read),
// an object's applied before a read and an update; each renewal and the
// release an update (no read).
func TestLockRequests(t *testing.T) {
	released := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "tfc-a-lock", Namespace: "ns", ResourceVersion: "1"}}
	tests := map[string]struct {
		new   bool
		lease *coordinationv1.Lease
		want  []string
	}{
		"a new object: created at once":                   {new: true, want: []string{"create", "update", "update"}},
		"an object applied before: read, then taken":      {lease: released, want: []string{"get", "update", "update", "update"}},
		"new, but a first apply that failed left a Lease": {new: true, lease: released, want: []string{"create", "get", "update", "update", "update"}},
		"applied before, but its Lease is gone":           {want: []string{"get", "create", "update", "update"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.lease != nil {
				client = fake.NewClientset(tc.lease.DeepCopy())
			}
			enforceResourceVersions(client, "leases")
			clk := testingclock.NewFakeClock(t0)
			l := &Lock{Client: client, Namespace: "ns", Name: "tfc-a-lock", Holder: "me", HolderUID: "me-uid", Clock: clk, New: tc.new}
			ctx := context.Background()
			if err := l.Acquire(ctx, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := l.renew(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range client.Actions() {
				verbs = append(verbs, a.GetVerb())
			}
			if !slices.Equal(verbs, tc.want) {
				t.Errorf("requests %v, want %v", verbs, tc.want)
			}
			lease, _ := client.CoordinationV1().Leases("ns").Get(ctx, "tfc-a-lock", metav1.GetOptions{})
			if lease.Spec.HolderIdentity != nil {
				t.Errorf("released lock held by %q", *lease.Spec.HolderIdentity)
			}
		})
	}
}
