package runnerjob

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// ReasonWaitingForJobSlot: an apply or destroy waits while
// --max-concurrent-jobs (or its per-namespace cap) Jobs run.
const ReasonWaitingForJobSlot = "WaitingForJobSlot"

// SlotRetry is how often an object waiting for a Job slot tries again;
// waiterTTL how long a waiting apply or destroy holds drift checks and
// refreshes back without trying again (its object gone, say).
const (
	SlotRetry = 5 * time.Second
	waiterTTL = 6 * SlotRetry
)

// IsRunner tells whether job is a Terraform* object's (its controller):
// the label that selects the cache is anyone's to write, and a tenant's
// labelled Jobs that never end would take everyone's slots. A controller
// reference to an object that does not exist is no way around it: the
// garbage collector deletes such a Job.
func IsRunner(job *Cached) bool {
	owner := job.Controller
	return owner.APIVersion == infrav1.SchemeGroupVersion.String() && strings.HasPrefix(owner.Kind, "Terraform")
}

// Slots caps the runner Jobs that run at once, in all and per
// namespace (0: no cap). It counts the Jobs the Job informer shows
// unfinished and those created since, so that workers creating Jobs at
// the same moment cannot overshoot. Drift checks and refreshes yield: none
// starts while an apply or destroy waits for a slot. With both caps, a
// namespace counts toward the global one with at most its own cap: Jobs a
// tenant makes itself, controlled by its own objects, cannot take the
// other namespaces' slots.
type Slots struct {
	Max, MaxPerNamespace int

	mu          sync.Mutex
	active      map[cache.ObjectName]bool // unfinished Jobs, seen or created
	inNamespace map[string]int
	counted     int                         // the Jobs the global cap counts
	waiting     map[cache.ObjectName]waiter // objects refused a slot
	urgent      int                         // the applies and destroys among them
	pruned      time.Time
	// wake, by kind, syncs a waiting object at once when a slot frees.
	wake  map[string]func(cache.ObjectName)
	clock clock.PassiveClock
}

type waiter struct {
	kind   string
	op     infrav1.Operation
	urgent bool // an apply or destroy
	// global: refused for the global cap (or to let applies go first),
	// not its namespace's: a slot that frees is held for it.
	global bool
	since  time.Time
	last   time.Time
}

// OnFree has wake sync the waiting objects of kind when a slot frees:
// objects that wait poll only every SlotRetry, and those whose own events
// come when a Job ends (the one that ended, a drift check falling due)
// would take every slot first.
func (s *Slots) OnFree(kind string, wake func(cache.ObjectName)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wake == nil {
		s.wake = map[string]func(cache.ObjectName){}
	}
	s.wake[kind] = wake
}

// NewSlots makes the caps; nil when there are none.
func NewSlots(max, maxPerNamespace int, clk clock.PassiveClock) *Slots {
	if max <= 0 && maxPerNamespace <= 0 {
		return nil
	}
	return &Slots{Max: max, MaxPerNamespace: maxPerNamespace, active: map[cache.ObjectName]bool{},
		inNamespace: map[string]int{}, waiting: map[cache.ObjectName]waiter{}, clock: clk}
}

// Watch keeps the count of unfinished Jobs from the Job informer.
func (s *Slots) Watch(jobs cache.SharedIndexInformer) error {
	_, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.observe,
		UpdateFunc: func(_, cur any) { s.observe(cur) },
		DeleteFunc: func(obj any) {
			if job, ok := obj.(*Cached); ok {
				s.Release(job.Key())
			} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				if name, err := cache.ParseObjectName(tomb.Key); err == nil {
					s.Release(name)
				}
			}
		},
	})
	return err
}

func (s *Slots) observe(obj any) {
	job, ok := obj.(*Cached)
	if !ok || !IsRunner(job) {
		return
	}
	key := job.Key()
	if finished, _ := Finished(job); finished {
		s.Release(key)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(key)
}

func (s *Slots) add(key cache.ObjectName) {
	if !s.active[key] {
		s.active[key] = true
		if s.MaxPerNamespace <= 0 || s.inNamespace[key.Namespace] < s.MaxPerNamespace {
			s.counted++
		}
		s.inNamespace[key.Namespace]++
	}
}

// Release frees the slot of a Job that finished, went, or was never made,
// and wakes the object it goes to.
func (s *Slots) Release(key cache.ObjectName) {
	s.mu.Lock()
	var wake func()
	defer func() {
		s.mu.Unlock()
		if wake != nil {
			wake()
		}
	}()
	if s.active[key] {
		defer func() {
			next, ok := s.next(s.clock.Now())
			if f := s.wake[s.waiting[next].kind]; ok && f != nil && s.counted < s.Max {
				wake = func() { f(next) }
			}
		}()
		delete(s.active, key)
		if s.MaxPerNamespace <= 0 || s.inNamespace[key.Namespace] <= s.MaxPerNamespace {
			s.counted--
		}
		if s.inNamespace[key.Namespace]--; s.inNamespace[key.Namespace] <= 0 {
			delete(s.inNamespace, key.Namespace)
		}
	}
}

// Take gives object's Job a slot, or says why it must wait.
func (s *Slots) Take(object, job cache.ObjectName, kind string, op infrav1.Operation, now time.Time) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now)
	if s.active[job] { // made before (the informer has not shown it yet)
		s.unwait(object)
		return true, ""
	}
	urgent := op == infrav1.OperationApply || op == infrav1.OperationDestroy
	why, global := "", true
	switch {
	case s.Max > 0 && s.counted >= s.Max:
		why = fmt.Sprintf("%d runner Jobs run, the cap of --max-concurrent-jobs", s.counted)
	case s.MaxPerNamespace > 0 && s.inNamespace[job.Namespace] >= s.MaxPerNamespace:
		why, global = fmt.Sprintf("%d runner Jobs run in namespace %s, the cap of --max-concurrent-jobs-per-namespace", s.inNamespace[job.Namespace], job.Namespace), false
	case !urgent && s.urgent > 0:
		why = "applies and destroys wait for a slot, and go first"
	}
	if why == "" && s.Max > 0 {
		// First come, first served: the slot is held for an object that
		// has waited longer, unless this one goes before it (an apply
		// before a drift check).
		since := now
		if w, ok := s.waiting[object]; ok && w.op == op {
			since = w.since
		}
		if next, ok := s.next(now); ok && next != object && (s.waiting[next].urgent || !urgent) && s.waiting[next].since.Before(since) {
			why = fmt.Sprintf("the slot that freed is %s's, which has waited since %s", next.Name, s.waiting[next].since.Format(time.TimeOnly))
		}
	}
	if why != "" {
		w, ok := s.waiting[object]
		if !ok || w.op != op {
			s.unwait(object)
			w = waiter{kind: kind, op: op, urgent: urgent, since: now}
			if urgent {
				s.urgent++
			}
		}
		w.last, w.global = now, global
		s.waiting[object] = w
		return false, why
	}
	s.unwait(object)
	s.add(job)
	return true, ""
}

// next is the waiter a slot that frees goes to: an apply or destroy
// before a drift check or refresh, then the one waiting longest; among
// those refused for the global cap that still ask.
func (s *Slots) next(now time.Time) (cache.ObjectName, bool) {
	var best cache.ObjectName
	found := false
	for key, w := range s.waiting {
		if !w.global || now.Sub(w.last) > SlotRetry+time.Second {
			continue
		}
		if b := s.waiting[best]; !found || w.urgent && !b.urgent || w.urgent == b.urgent && w.since.Before(b.since) {
			best, found = key, true
		}
	}
	return best, found
}

func (s *Slots) unwait(object cache.ObjectName) {
	if w, ok := s.waiting[object]; ok {
		delete(s.waiting, object)
		if w.urgent {
			s.urgent--
		}
	}
}

// prune drops the waiters that stopped asking, at most once a second:
// take runs for every waiting object every SlotRetry.
func (s *Slots) prune(now time.Time) {
	if now.Sub(s.pruned) < time.Second {
		return
	}
	s.pruned = now
	for key, w := range s.waiting {
		if now.Sub(w.last) > waiterTTL {
			s.unwait(key)
		}
	}
}

// Waiting counts the objects waiting for a slot, by kind and operation.
func (s *Slots) Waiting() map[[2]string]int { return s.waiters(s.clock.Now()) }

// waiters counts the objects waiting now, by kind and operation.
func (s *Slots) waiters(now time.Time) map[[2]string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune(now)
	out := map[[2]string]int{}
	for _, w := range s.waiting {
		out[[2]string{w.kind, string(w.op)}]++
	}
	return out
}
