// Package fairshare shares a server's request slots among keys
// (namespaces, sources), so that no one key takes what the others need.
package fairshare

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// Slots are n slots shared by keys, at most perKey of them held by one
// key. A request takes a free slot at once while nobody waits; when
// requests wait, a freed slot goes to the longest waiter of the key that
// holds the fewest slots. So with perKey n a key alone may use every slot,
// and under contention each key gets its share, whoever came first; a
// smaller perKey keeps slots for other keys even when one key asks alone.
type Slots struct {
	n, perKey int
	// OnWait, when set, is told of each request that finds no slot it may
	// take and waits: within its share (its key held fewer than perKey, so
	// other keys held every slot), or beyond it. Set it before first use.
	OnWait func(key string, withinShare bool)

	mu      sync.Mutex
	held    map[string]int
	total   int
	waiters list.List // of *waiter, oldest first
}

type waiter struct {
	key   string
	ready chan struct{}
}

// NewSlots makes n slots, at most perKey of them for one key.
func NewSlots(n, perKey int) *Slots {
	return &Slots{n: n, perKey: min(perKey, n), held: map[string]int{}}
}

// Acquire takes a slot for key, waiting until one is granted or ctx ends.
// It returns the func that frees the slot, or ctx's error.
func (s *Slots) Acquire(ctx context.Context, key string) (func(), error) {
	s.mu.Lock()
	// No waiter could take a free slot (give grants them at once): a
	// request under its share that finds one takes it.
	if s.total < s.n && s.held[key] < s.perKey {
		s.take(key)
		s.mu.Unlock()
		return s.releaser(key), nil
	}
	w := &waiter{key: key, ready: make(chan struct{})}
	e := s.waiters.PushBack(w)
	within := s.held[key] < s.perKey
	s.mu.Unlock()
	if s.OnWait != nil {
		s.OnWait(key, within)
	}
	select {
	case <-w.ready:
		return s.releaser(key), nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			s.give(key)
		default:
			s.waiters.Remove(e)
		}
		return nil, ctx.Err()
	}
}

// Held is how many slots key holds.
func (s *Slots) Held(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[key]
}

func (s *Slots) releaser(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.give(key)
		})
	}
}

func (s *Slots) take(key string) {
	s.held[key]++
	s.total++
}

// give frees key's slot and grants free slots to waiters: each to the
// oldest waiter of the key that holds the fewest, under its share.
func (s *Slots) give(key string) {
	if s.held[key]--; s.held[key] <= 0 {
		delete(s.held, key)
	}
	s.total--
	for s.total < s.n {
		var next *list.Element
		for e := s.waiters.Front(); e != nil; e = e.Next() {
			held := s.held[e.Value.(*waiter).key]
			if held < s.perKey && (next == nil || held < s.held[next.Value.(*waiter).key]) {
				next = e
			}
		}
		if next == nil {
			return
		}
		w := s.waiters.Remove(next).(*waiter)
		s.take(w.key)
		close(w.ready)
	}
}

// RateLimits are token buckets by key (a source address), beside one for
// all keys: a key over its own rate is refused without spending the
// others' budget. Keys idle for a minute are forgotten.
type RateLimits struct {
	qps   float32
	burst int
	all   flowcontrol.RateLimiter
	now   func() time.Time

	mu    sync.Mutex
	keys  map[string]*keyLimit
	swept time.Time
}

type keyLimit struct {
	limiter flowcontrol.RateLimiter
	used    time.Time
}

// NewRateLimits allows each key qps (burst), and all keys together allQPS
// (allBurst; 0, no limit of all keys).
func NewRateLimits(qps float32, burst int, allQPS float32, allBurst int) *RateLimits {
	r := &RateLimits{qps: qps, burst: burst, now: time.Now, keys: map[string]*keyLimit{}}
	if allQPS > 0 {
		r.all = flowcontrol.NewTokenBucketRateLimiter(allQPS, allBurst)
	}
	return r
}

// Refusal says why TryAccept refused a request, or that it did not.
type Refusal int

const (
	Accepted Refusal = iota
	// OverKeyRate: the key spent its own budget.
	OverKeyRate
	// OverSharedRate: the key had budget left, the keys together had not.
	OverSharedRate
)

// TryAccept takes a token of key's bucket and of the shared one, and says
// which was empty (a token of key's bucket is spent even then: a key
// refused for the shared budget is still counted).
func (r *RateLimits) TryAccept(key string) Refusal {
	now := r.now()
	r.mu.Lock()
	if now.Sub(r.swept) > time.Minute {
		for k, l := range r.keys {
			if now.Sub(l.used) > time.Minute {
				delete(r.keys, k)
			}
		}
		r.swept = now
	}
	l := r.keys[key]
	if l == nil {
		l = &keyLimit{limiter: flowcontrol.NewTokenBucketRateLimiter(r.qps, r.burst)}
		r.keys[key] = l
	}
	l.used = now
	r.mu.Unlock()
	switch {
	case !l.limiter.TryAccept():
		return OverKeyRate
	case r.all != nil && !r.all.TryAccept():
		return OverSharedRate
	}
	return Accepted
}

// Source is the address a request came from: a pod's, the API server's.
func Source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
