package runnerjob

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// runnerOwner is a runner Job's controller reference.
var runnerOwner = []metav1.OwnerReference{{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformCluster", Name: "o", UID: "o", Controller: ptr(true)}}

// TestJobSlots: the caps count Jobs created and not yet seen, free a slot
// when a Job finishes or goes, and hold drift checks and refreshes back
// while an apply or destroy waits; a labelled Job no Terraform* object
// controls (a tenant's) takes no slot.
func TestJobSlots(t *testing.T) {
	now := time.Now()
	obj := func(name string) cache.ObjectName { return cache.ObjectName{Namespace: "a", Name: name} }
	job := func(ns, name string) cache.ObjectName { return cache.ObjectName{Namespace: ns, Name: name} }
	type step struct {
		take   cache.ObjectName // the Job
		object cache.ObjectName
		op     infrav1.Operation
		want   bool
	}
	for _, tc := range []struct {
		name        string
		max, perNS  int
		before      func(*Slots)
		steps       []step
		wantWaiting int
	}{
		{name: "global cap, Jobs created at once", max: 2, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
			{job("b", "j2"), obj("o2"), infrav1.OperationApply, true},
			{job("a", "j3"), obj("o3"), infrav1.OperationApply, false},
		}, wantWaiting: 1},
		{name: "per namespace", perNS: 1, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
			{job("a", "j2"), obj("o2"), infrav1.OperationDestroy, false},
			{job("b", "j3"), obj("o3"), infrav1.OperationApply, true},
		}, wantWaiting: 1},
		{name: "a finished Job frees its slot", max: 1, before: func(s *Slots) {
			running := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "old", OwnerReferences: runnerOwner}}
			s.observe(Trim(running))
			done := running.DeepCopy()
			done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
			s.observe(Trim(done))
		}, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
		}},
		{name: "a running Job seen takes a slot", max: 1, before: func(s *Slots) {
			s.observe(Trim(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "old", OwnerReferences: runnerOwner}}))
		}, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, false},
		}, wantWaiting: 1},
		{name: "a labelled Job no Terraform* object controls takes none", max: 1, before: func(s *Slots) {
			s.observe(Trim(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "forged"}}))
			s.observe(Trim(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "other-owner", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "x", UID: "x", Controller: ptr(true)}}}}))
		}, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
		}},
		{name: "a namespace counts toward the global cap with at most its own cap", max: 3, perNS: 1, before: func(s *Slots) {
			// A tenant's own Jobs, controlled by its own object, never ending.
			for _, name := range []string{"t1", "t2", "t3", "t4"} {
				s.observe(Trim(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, OwnerReferences: runnerOwner}}))
			}
		}, steps: []step{
			{job("tenant", "j0"), obj("o0"), infrav1.OperationApply, false},
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
			{job("b", "j2"), obj("o2"), infrav1.OperationApply, true},
			{job("c", "j3"), obj("o3"), infrav1.OperationApply, false},
		}, wantWaiting: 2},
		{name: "a Job that holds a slot keeps it", max: 1, steps: []step{
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true},
			{job("a", "j2"), obj("o2"), infrav1.OperationApply, false},
			{job("a", "j1"), obj("o1"), infrav1.OperationApply, true}, // made, not seen yet: the same slot
		}, wantWaiting: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSlots(tc.max, tc.perNS, clock.RealClock{})
			if tc.before != nil {
				tc.before(s)
			}
			for i, st := range tc.steps {
				if got, why := s.Take(st.object, st.take, "TerraformCluster", st.op, now); got != st.want {
					t.Errorf("step %d: take %v = %v (%s), want %v", i, st.take, got, why, st.want)
				}
			}
			n := 0
			for _, c := range s.waiters(now) {
				n += c
			}
			if n != tc.wantWaiting {
				t.Errorf("%d waiting, want %d", n, tc.wantWaiting)
			}
		})
	}

	// Drift checks wait while an apply does, and go once it has its slot.
	s := NewSlots(1, 0, clock.RealClock{})
	s.Take(obj("o1"), job("a", "j1"), "TerraformCluster", infrav1.OperationApply, now)
	if ok, _ := s.Take(obj("o2"), job("a", "j2"), "TerraformCluster", infrav1.OperationApply, now); ok {
		t.Fatal("a second apply got the only slot")
	}
	s.Release(job("a", "j1"))
	if ok, why := s.Take(obj("o3"), job("a", "j3"), "TerraformCluster", infrav1.OperationDrift, now); ok {
		t.Errorf("a drift check went before the waiting apply")
	} else if why == "" {
		t.Error("no reason given")
	}
	if ok, _ := s.Take(obj("o2"), job("a", "j2"), "TerraformCluster", infrav1.OperationApply, now); !ok {
		t.Fatal("the waiting apply did not get the free slot")
	}
	s.Release(job("a", "j2"))
	if ok, _ := s.Take(obj("o3"), job("a", "j3"), "TerraformCluster", infrav1.OperationDrift, now); !ok {
		t.Error("the drift check still waits with no apply waiting")
	}
	// A waiting apply that stops asking holds nothing back for long.
	s2 := NewSlots(1, 0, clock.RealClock{})
	s2.Take(obj("o1"), job("a", "j1"), "TerraformCluster", infrav1.OperationApply, now)
	s2.Take(obj("o2"), job("a", "j2"), "TerraformCluster", infrav1.OperationApply, now)
	s2.Release(job("a", "j1"))
	if ok, _ := s2.Take(obj("o3"), job("a", "j3"), "TerraformCluster", infrav1.OperationDrift, now.Add(waiterTTL+time.Second)); !ok {
		t.Error("an apply that stopped waiting still holds drift checks back")
	}
	if NewSlots(0, 0, clock.RealClock{}) != nil {
		t.Error("no caps should mean no Slots")
	}
}

// TestFreedSlotGoesToTheLongestWaiter: with one slot, drift checks whose
// own events come when a Job ends do not take the slot from an object
// that has waited longer (it only polls): the slot is held for it, it is
// woken at once, and an apply still goes before a drift check.
func TestFreedSlotGoesToTheLongestWaiter(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	obj := func(name string) cache.ObjectName { return cache.ObjectName{Namespace: "a", Name: name} }
	job := func(name string) cache.ObjectName { return cache.ObjectName{Namespace: "a", Name: name + "-job"} }
	drift := infrav1.OperationDrift
	clk := testingclock.NewFakePassiveClock(t0)
	s := NewSlots(1, 0, clk)
	now := t0
	var woken []string
	s.OnFree("TerraformCluster", func(o cache.ObjectName) { woken = append(woken, o.Name) })
	take := func(name string, op infrav1.Operation) bool {
		ok, _ := s.Take(obj(name), job(name), "TerraformCluster", op, now)
		return ok
	}
	if !take("b", drift) {
		t.Fatal("the first drift check got no slot")
	}
	now = now.Add(time.Second)
	if take("a", drift) {
		t.Fatal("a second Job got the one slot")
	}
	now = now.Add(time.Second)
	clk.SetTime(now)
	s.Release(job("b"))
	if len(woken) != 1 || woken[0] != "a" {
		t.Fatalf("woken %v when the slot freed, want a", woken)
	}
	// c's drift check falls due at that moment: the slot is a's.
	if take("c", drift) {
		t.Error("a newcomer took the slot a waited for")
	}
	if !take("a", drift) {
		t.Error("the longest waiter got no slot")
	}
	// An apply that comes while drift checks wait goes first.
	now = now.Add(time.Second)
	if take("d", infrav1.OperationApply) {
		t.Fatal("an apply got a slot that is taken")
	}
	s.Release(job("a"))
	if !take("d", infrav1.OperationApply) {
		t.Error("the waiting apply did not go before the older drift check")
	}
	// A waiter that stopped asking holds nothing.
	s.Release(job("d"))
	now = now.Add(2 * SlotRetry)
	if !take("e", drift) {
		t.Error("a slot stayed held for waiters that stopped asking")
	}
}
