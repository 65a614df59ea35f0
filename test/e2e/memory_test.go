package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// TestLargeObjectsCannotExhaustTheManager (issue 50, item 4): variable
// values had no bound and the manager caches every object, so about 200
// TerraformMachines with 1.2 MiB values took it past its 256Mi limit, for
// every tenant, again after each restart. Now what an object holds inline
// is bounded (larger values come from a Secret or ConfigMap), and 200
// objects of the largest size the API then admits leave the manager well
// inside its limit. On a manager that admits more, the test makes its 200
// objects that large, to show what the bound prevents.
func TestLargeObjectsCannotExhaustTheManager(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManagerWithWebhook()
	tms := e.newTenant().captf.InfrastructureV1alpha1().TerraformMachines(e.ns)
	machine := func(name string, valueBytes int) *infrav1.TerraformMachine {
		// No Cluster of that name: the manager caches and reports the
		// machine, and runs nothing for it.
		// Annotations the API server admits up to 256 KiB; the manager
		// caches only the ones it reads. This one is in CAPTF's own prefix,
		// which a cache that kept captf.io/* held whole (any other key is
		// left out alike: TestCacheTransform).
		tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{capi.ClusterNameLabel: "nowhere"},
			Annotations: map[string]string{"captf.io/notes": strings.Repeat("n", 250<<10)}}}
		tm.Spec.Module.Inline = "#" + strings.Repeat("m", 65535) // the CRD's bound
		tm.Spec.Variables = []infrav1.Variable{{Name: "blob", Value: &runtime.RawExtension{Raw: []byte(strconv.Quote(strings.Repeat("v", valueBytes-2)))}}}
		return tm
	}
	size := 1200 << 10
	if _, err := tms.Create(ctx, machine("huge", size), metav1.CreateOptions{}); err == nil {
		t.Errorf("a machine with %d KiB of values inline was admitted: want it refused, with the way out", size>>10)
	} else if !strings.Contains(err.Error(), "keep large values in a Secret or ConfigMap") {
		t.Fatalf("a machine with %d KiB of values inline: %v, want the bound's refusal", size>>10, err)
	} else {
		size = 64 << 10 // webhook.MaxInlineBytes
	}

	const objects = 200
	before := procStatus(t, m.Pid())
	for i := range objects {
		if _, err := tms.Create(ctx, machine(fmt.Sprintf("big-%03d", i), size), metav1.CreateOptions{}); err != nil {
			t.Fatalf("machine %d of %d KiB: %v", i, size>>10, err)
		}
	}
	// Every object reported: the manager has cached and synced each.
	err := waitUntil(3*time.Minute, func() error {
		if m.Exited() {
			return fmt.Errorf("the manager exited (code %d)", m.ExitCode())
		}
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		reported := 0
		for i := range list.Items {
			if machineCondition(&list.Items[i], infrav1.ConditionReady) != nil {
				reported++
			}
		}
		if reported < objects {
			return fmt.Errorf("%d of %d machines reported", reported, objects)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := procStatus(t, m.Pid())
	// The shipped limit is 256Mi: half of it is the headroom kept for
	// everything else the manager does (runs, reviews, restores). Measured
	// 2026-12-07: 81 and 83 MiB; 150 when the caches kept every annotation.
	const limit, headroom = 256 << 10, 128 << 10
	t.Logf("manager RSS %d MiB before, peak %d MiB after %d machines of %d KiB inline and 250 KiB of annotations (limit %d MiB)",
		before["VmRSS"]>>10, after["VmHWM"]>>10, objects, (size+65536)>>10, limit>>10)
	if after["VmHWM"] > limit-headroom {
		t.Errorf("the manager's peak RSS is %d MiB with %d machines of %d KiB: over its %d MiB limit less %d MiB of headroom",
			after["VmHWM"]>>10, objects, (size+65536)>>10, limit>>10, headroom>>10)
	}
	if m.Exited() {
		t.Errorf("the manager exited (code %d)", m.ExitCode())
	}
}

// machineCondition is tm's condition of type t, nil when it has none.
func machineCondition(tm *infrav1.TerraformMachine, t string) *metav1.Condition {
	for i, c := range tm.Status.Conditions {
		if c.Type == t {
			return &tm.Status.Conditions[i]
		}
	}
	return nil
}
