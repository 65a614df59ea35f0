// Package controller holds what CAPTF's controllers share: the work loop,
// expectations against duplicate creates and read-your-writes versions.
package controller

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ExpectationsTimeout bounds how long a lost watch event can block an object.
const ExpectationsTimeout = 5 * time.Minute

// Expectations records Jobs a controller created and has not yet seen in its
// informer, so a sync on a lagging cache creates nothing twice (the pattern
// of kube-controller-manager's ControllerExpectations).
type Expectations struct {
	mu      sync.Mutex
	pending map[cache.ObjectName]expectation
	clock   clock.PassiveClock
}

type expectation struct {
	jobs map[string]bool
	at   time.Time
}

// NewExpectations makes an empty store whose waits time out by clk.
func NewExpectations(clk clock.PassiveClock) *Expectations {
	return &Expectations{pending: map[cache.ObjectName]expectation{}, clock: clk}
}

// ExpectJob records that job is about to be created for key.
func (e *Expectations) ExpectJob(key cache.ObjectName, job string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.pending[key]
	if !ok {
		exp = expectation{jobs: map[string]bool{}}
	}
	exp.jobs[job] = true
	exp.at = e.clock.Now()
	e.pending[key] = exp
}

// JobObserved is called when the informer shows job, or its create failed.
func (e *Expectations) JobObserved(key cache.ObjectName, job string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if exp, ok := e.pending[key]; ok {
		delete(exp.jobs, job)
		if len(exp.jobs) == 0 {
			delete(e.pending, key)
		}
	}
}

// Satisfied reports whether every Job created for key has been seen (or the
// wait timed out): only then may the controller decide on new Jobs.
func (e *Expectations) Satisfied(key cache.ObjectName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.pending[key]
	return !ok || e.clock.Since(exp.at) > ExpectationsTimeout
}

// Delete forgets key, when its object is gone.
func (e *Expectations) Delete(key cache.ObjectName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.pending, key)
}
