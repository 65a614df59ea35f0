package engine

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// TestDriftJitter: an object's drift checks are spread over a tenth of the
// interval, the same for it every time, and different objects spread out.
func TestDriftJitter(t *testing.T) {
	interval := 30 * time.Minute
	seen := map[time.Duration]bool{}
	var lowest, highest time.Duration = interval, 0
	for i := range 1000 {
		obj := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{UID: types.UID(fmt.Sprintf("uid-%d", i))}}
		j := jitter(obj, interval)
		if j < 0 || j >= interval/10 {
			t.Fatalf("jitter %s outside [0, %s)", j, interval/10)
		}
		if again := jitter(obj, interval); again != j {
			t.Fatalf("jitter of one object changed: %s, then %s", j, again)
		}
		seen[j] = true
		lowest, highest = min(lowest, j), max(highest, j)
	}
	if len(seen) < 900 || highest-lowest < interval/10*9/10 {
		t.Errorf("1000 objects got %d distinct jitters over %s to %s: not spread over %s", len(seen), lowest, highest, interval/10)
	}
}
