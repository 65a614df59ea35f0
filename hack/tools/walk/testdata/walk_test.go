package workspace_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/walktrace"
)

// TestWalk prints the walk of a machine's apply through CAPTF's files: the
// sync that starts its Job, and the sync that reads its result and records
// it (hack/walk.sh copies this file into an instrumented tree).
func TestWalk(t *testing.T) {
	k := kinds[1] // TerraformMachine: an owner, a Cluster, bootstrap data, provider IDs
	f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
	walk(t, "start", f.sync)
	if len(f.createdJobs()) != 1 {
		t.Fatalf("jobs %v, want the apply", jobNames(f.createdJobs()))
	}
	f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
	walk(t, "record", f.sync)
	k.applied(t, f.object())
}

func walk(t *testing.T, name string, sync func()) {
	walktrace.Start()
	sync()
	steps := walktrace.Stop()
	count(t, name, "all of pkg", steps)
	var own []string // steps outside the package stay in the room they came from
	for _, s := range steps {
		if strings.HasPrefix(s, "pkg/controller/workspace/") {
			own = append(own, s)
		}
	}
	count(t, name, "package workspace", own)
}

func count(t *testing.T, name, what string, steps []string) {
	var stays []string
	for _, s := range steps {
		if len(stays) == 0 || stays[len(stays)-1] != s {
			stays = append(stays, s)
		}
	}
	returns, seen := 0, map[string]bool{}
	for _, s := range stays {
		if seen[s] {
			returns++
		}
		seen[s] = true
	}
	if os.Getenv("WALK_PATH") != "" {
		t.Logf("%s, %s: %s", name, what, strings.Join(stays, " > "))
	}
	rooms := slices.Sorted(func(yield func(string) bool) {
		for r := range seen {
			if !yield(r) {
				return
			}
		}
	})
	t.Logf("walk %s, %s: stays %d, rooms %d, returns %d, steps %d", name, what, len(stays), len(rooms), returns, len(steps))
}
