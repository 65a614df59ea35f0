package fairshare

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestSlotsShare: a key alone uses every slot; when it holds them all and
// keeps asking, a freed slot goes to another key that waits, even one that
// came last; a waiter whose context ends gives up its place.
func TestSlotsShare(t *testing.T) {
	s := NewSlots(4, 4)
	var hostile []func()
	for range 4 {
		release, err := s.Acquire(context.Background(), "hostile")
		if err != nil {
			t.Fatal(err)
		}
		hostile = append(hostile, release)
	}
	granted := make(chan string, 8)
	wait := func(key string) {
		go func() {
			release, err := s.Acquire(context.Background(), key)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- key
			_ = release // held until the test ends
		}()
	}
	for range 3 {
		wait("hostile")
	}
	waitQueued(s, 3) // the hostile waiters queue first
	wait("victim")
	gone, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := s.Acquire(gone, "quitter")
		cancelled <- err
	}()
	waitQueued(s, 5)
	cancel()
	if err := <-cancelled; err == nil {
		t.Fatal("a cancelled wait got a slot")
	}

	hostile[0]()
	if got := <-granted; got != "victim" {
		t.Fatalf("the freed slot went to %s, want the victim (holding none)", got)
	}
	hostile[1]()
	if got := <-granted; got != "hostile" {
		t.Fatalf("the next slot went to %s", got)
	}
	if s.Held("victim") != 1 || s.Held("hostile") != 3 || s.Held("quitter") != 0 {
		t.Errorf("held: victim %d, hostile %d, quitter %d", s.Held("victim"), s.Held("hostile"), s.Held("quitter"))
	}
}

// waitQueued waits until n requests wait for a slot.
func waitQueued(s *Slots, n int) {
	for {
		s.mu.Lock()
		queued := s.waiters.Len()
		s.mu.Unlock()
		if queued == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlotsPerKey: a key never holds more than its share, even alone; the
// rest waits for other keys.
func TestSlotsPerKey(t *testing.T) {
	s := NewSlots(4, 2)
	for range 2 {
		if _, err := s.Acquire(context.Background(), "attacker"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, "attacker"); err == nil {
		t.Fatal("a key got a third of 4 slots, its share being 2")
	}
	release, err := s.Acquire(context.Background(), "apiserver")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if s.Held("attacker") != 2 || s.Held("apiserver") != 0 {
		t.Errorf("held: attacker %d, apiserver %d", s.Held("attacker"), s.Held("apiserver"))
	}
}

// TestRateLimitsBySource: a source over its rate is refused for its own
// budget, not the shared one; another source still has its own budget;
// sources that each keep within theirs are refused for the shared one once
// together they spend it.
func TestRateLimitsBySource(t *testing.T) {
	r := NewRateLimits(1, 5, 10, 10)
	refused := map[Refusal]int{}
	for range 50 {
		refused[r.TryAccept("attacker")]++
	}
	if want := map[Refusal]int{Accepted: 5, OverKeyRate: 45}; !maps.Equal(refused, want) {
		t.Errorf("the attacker's 50: %v, want %v", refused, want)
	}
	if got := r.TryAccept("runner"); got != Accepted {
		t.Errorf("another source: %v, want accepted", got)
	}
	for i := range 4 {
		r.TryAccept(fmt.Sprintf("pod-%d", i))
	}
	if got := r.TryAccept("last"); got != OverSharedRate {
		t.Errorf("the 11th source within its own budget: %v, want refused for the shared one", got)
	}
}

// TestSlotsOnWait: a wait is told within its key's share while other keys
// hold every slot, beyond it once the key holds its share.
func TestSlotsOnWait(t *testing.T) {
	s := NewSlots(3, 2)
	var waits []string
	var mu sync.Mutex
	s.OnWait = func(key string, within bool) {
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, fmt.Sprintf("%s within=%v", key, within))
	}
	for _, key := range []string{"a", "a", "b"} {
		if _, err := s.Acquire(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		if _, err := s.Acquire(ctx, key); err == nil {
			t.Fatalf("%s got a fourth of three slots", key)
		}
		cancel()
	}
	if want := []string{"a within=false", "b within=true"}; !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
}
