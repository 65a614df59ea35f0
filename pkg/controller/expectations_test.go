package controller

import (
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
)

// TestExpectations: a created Job blocks new decisions for its object until
// the informer shows it, or until the wait times out; other objects are
// never blocked.
func TestExpectations(t *testing.T) {
	a := cache.ObjectName{Namespace: "ns", Name: "a"}
	b := cache.ObjectName{Namespace: "ns", Name: "b"}
	tests := map[string]struct {
		steps func(e *Expectations, clk *testingclock.FakePassiveClock)
		want  bool
	}{
		"nothing expected": {steps: func(*Expectations, *testingclock.FakePassiveClock) {}, want: true},
		"a Job created, not seen": {
			steps: func(e *Expectations, _ *testingclock.FakePassiveClock) { e.ExpectJob(a, "j1") },
			want:  false,
		},
		"a Job created and seen": {
			steps: func(e *Expectations, _ *testingclock.FakePassiveClock) { e.ExpectJob(a, "j1"); e.JobObserved(a, "j1") },
			want:  true,
		},
		"two created, one seen": {
			steps: func(e *Expectations, _ *testingclock.FakePassiveClock) {
				e.ExpectJob(a, "j1")
				e.ExpectJob(a, "j2")
				e.JobObserved(a, "j1")
			},
			want: false,
		},
		"another object's Job seen": {
			steps: func(e *Expectations, _ *testingclock.FakePassiveClock) { e.ExpectJob(a, "j1"); e.JobObserved(b, "j1") },
			want:  false,
		},
		"not seen within the timeout": {
			steps: func(e *Expectations, clk *testingclock.FakePassiveClock) {
				e.ExpectJob(a, "j1")
				clk.SetTime(clk.Now().Add(ExpectationsTimeout))
			},
			want: false,
		},
		"not seen past the timeout": {
			steps: func(e *Expectations, clk *testingclock.FakePassiveClock) {
				e.ExpectJob(a, "j1")
				clk.SetTime(clk.Now().Add(ExpectationsTimeout + time.Second))
			},
			want: true,
		},
		"the object deleted": {
			steps: func(e *Expectations, _ *testingclock.FakePassiveClock) { e.ExpectJob(a, "j1"); e.Delete(a) },
			want:  true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakePassiveClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
			e := NewExpectations(clk)
			tc.steps(e, clk)
			if got := e.Satisfied(a); got != tc.want {
				t.Errorf("Satisfied = %v, want %v", got, tc.want)
			}
			if !e.Satisfied(b) {
				t.Error("an object nothing was created for is not satisfied")
			}
		})
	}
}
