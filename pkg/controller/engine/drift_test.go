package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// TestDriftSchedule: each object checks at its own phase of the interval,
// at least half an interval after an apply and exactly an interval after its
// last check; a fleet applied in one burst checks evenly over the interval
// from then on (no burst at each interval's boundary), and no object goes
// longer than one and a half intervals without a check.
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
			next := nextDriftCheck(obj, due.Add(run), interval)
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
