package workspace

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
)

// TestDriftSchedule: each object checks at its own phase of the interval,
// at least half an interval after an apply and exactly an interval after its
// last check was due, even when one in ten checks starts late (up to nine
// tenths of an interval: a backlog, a cap); a fleet applied in one burst
// checks evenly over the interval from then on (no burst at each
// interval's boundary), and no object goes longer than one and a half
// intervals without a check.
func TestDriftSchedule(t *testing.T) {
	const n = 10000
	interval := 30 * time.Minute
	run := 20 * time.Second // how long a drift Job takes
	applied := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	perMinute := map[int64]int{}
	for i := range n {
		obj := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		// The whole fleet is applied within one minute.
		base := applied.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		due := nextDriftCheck(obj, base, interval)
		if gap := due.Sub(base); gap < interval/2 || gap >= interval*3/2 {
			t.Fatalf("first check %s after the apply, want within [%s, %s)", gap, interval/2, interval*3/2)
		}
		for range 4 {
			perMinute[due.Unix()/60]++
			created := due
			if rng.IntN(10) == 0 {
				created = created.Add(time.Duration(rng.Int64N(int64(interval * 9 / 10))))
			}
			job := &runnerjob.Cached{CreationTimestamp: metav1.NewTime(created), InputsHash: driftCheckHash("h", due)}
			if i%2 == 0 {
				job = nil // a clean check's Job goes once its result is recorded
			}
			finished := metav1.NewTime(created.Add(run))
			obj.Status.LastAppliedTime, obj.Status.LastDriftCheckTime = &metav1.Time{Time: base}, &finished
			next, _ := driftDue(obj, job, "h", interval)
			if gap := next.Sub(due); gap != interval {
				t.Fatalf("checks %s apart, want %s", gap, interval)
			}
			due = next
		}
	}
	// Minutes in which every object has had its first check and none has
	// had its last: each should see about n/30 checks.
	from := applied.Add(interval*3/2+time.Minute).Unix() / 60
	to := from + int64(2*interval/time.Minute)
	mean, peak := float64(n)/float64(interval/time.Minute), 0
	for m := from; m < to; m++ {
		peak = max(peak, perMinute[m])
	}
	t.Logf("busiest minute: %d drift checks, %.0f on average", peak, mean)
	if float64(peak) > 1.5*mean {
		t.Errorf("a minute with %d drift checks, %.0f on average: bunched", peak, mean)
	}
}

// TestDriftDue: the next check is the slot after the one the last check
// was for, however late that check ran or finished, its Job kept or gone;
// after an apply, half an interval after at least.
func TestDriftDue(t *testing.T) {
	const interval = 10 * time.Minute
	obj := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{UID: "29b33912-8e3a-4907-b3a1-000000000042"}}
	slot := driftSlot(obj, time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC), interval)
	check := func(created, finished time.Duration) *runnerjob.Cached {
		return &runnerjob.Cached{CreationTimestamp: metav1.NewTime(slot.Add(created)),
			Operation: infrav1.OperationDrift, InputsHash: driftCheckHash("applied", slot)}
	}
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(slot.Add(d)); return &t }
	for name, tc := range map[string]struct {
		applied, checked *metav1.Time
		latest           *runnerjob.Cached
		want             time.Duration // after slot
	}{
		"a check on time":                        {applied: at(-time.Hour), checked: at(20 * time.Second), latest: check(time.Second, 20*time.Second), want: interval},
		"a check that finished late (a backlog)": {applied: at(-time.Hour), checked: at(6 * time.Minute), latest: check(5*time.Minute, 6*time.Minute), want: interval},
		"a check finished after its next slot":   {applied: at(-time.Hour), checked: at(11 * time.Minute), latest: check(9*time.Minute, 11*time.Minute), want: interval},
		"a Job made a second before its slot":    {applied: at(-time.Hour), checked: at(20 * time.Second), latest: check(-time.Second, 20*time.Second), want: interval},
		"the last check's Job is gone":           {applied: at(-time.Hour), checked: at(6 * time.Minute), want: interval},
		// The API server's clock, which timed the check's end, behind.
		"gone, its end timed before its slot": {applied: at(-time.Hour), checked: at(-20 * time.Second), want: interval},
		"gone, finished after its next slot":  {applied: at(-time.Hour), checked: at(11 * time.Minute), want: 2 * interval},
		"an apply since the last check":       {applied: at(6 * time.Minute), checked: at(20 * time.Second), latest: check(time.Second, 20*time.Second), want: 2 * interval},
		"the newest Job checked other inputs": {applied: at(-time.Hour), checked: at(6 * time.Minute), latest: &runnerjob.Cached{CreationTimestamp: metav1.NewTime(slot), InputsHash: driftCheckHash("before", slot)}, want: interval},
		"applied, never checked":              {applied: at(-4 * time.Minute), want: interval},
	} {
		t.Run(name, func(t *testing.T) {
			o := obj.DeepCopy()
			o.Status.LastAppliedTime, o.Status.LastDriftCheckTime = tc.applied, tc.checked
			due, ok := driftDue(o, tc.latest, "applied", interval)
			if !ok || due.Sub(slot) != tc.want {
				t.Errorf("due %s after the slot (%v), want %s", due.Sub(slot), ok, tc.want)
			}
		})
	}
	if _, ok := driftDue(obj, nil, "applied", interval); ok {
		t.Error("a check is due for an object never applied")
	}
}
