package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/engine"
)

// TestMaxConcurrentJobs: with --max-concurrent-jobs=1, three clusters
// created at once are applied one Job at a time: never two runner Jobs
// unfinished together, the waiting ones say WaitingForJobSlot and are
// counted by captf_jobs_waiting, and all become Ready with one apply each.
func TestMaxConcurrentJobs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.startManager("--max-concurrent-jobs=1")
	token, err := plane.MetricsReaderToken(ctx, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"one", "two", "three"}
	for _, name := range names {
		e.create(e.localCloud(name, e.newCluster(name, false), map[string]any{"instances": 1, "sleep_seconds": 2}))
	}
	maxActive, sawWaiting, sawMetric := 0, false, false
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		active := 0
		for _, j := range e.jobs("") {
			if finished, _ := engine.JobFinished(&j); !finished {
				active++
			}
		}
		maxActive = max(maxActive, active)
		ready := 0
		for _, name := range names {
			tc := e.get(name)
			if c := condition(tc, infrav1.ConditionReady); c != nil && c.Reason == engine.ReasonWaitingForJobSlot {
				sawWaiting = true
			}
			if isReady(tc) {
				ready++
			}
		}
		if !sawMetric {
			if _, body, err := m.Scrape(token); err == nil && strings.Contains(body, `captf_jobs_waiting{kind="TerraformCluster",operation="apply"} `) &&
				!strings.Contains(body, `captf_jobs_waiting{kind="TerraformCluster",operation="apply"} 0`) {
				sawMetric = true
			}
		}
		return ready == len(names), nil
	})
	if err != nil {
		t.Fatalf("not every cluster became Ready: %v", err)
	}
	if maxActive != 1 {
		t.Errorf("at most %d runner Jobs ran at once, want 1", maxActive)
	}
	if !sawWaiting {
		t.Error("no cluster said WaitingForJobSlot")
	}
	if !sawMetric {
		t.Error("captf_jobs_waiting never counted a waiting apply")
	}
	if n := len(e.jobs("apply")); n != len(names) {
		t.Errorf("%d apply Jobs, want %d", n, len(names))
	}
}
