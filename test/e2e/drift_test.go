package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
)

// TestDrift: a drift check runs every spec.drift.interval against the
// inputs of the last apply; an instance changed out of band shows as
// Drifted=True with the plan's summary within an interval, and the
// cluster (remediation None) is left as it is. Checks never overlap
// another Job of the object.
func TestDrift(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	tc := e.localCloud("drifty", e.newCluster("drifty", false), map[string]any{"instances": 1})
	tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}}
	keep := int32(50)
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(tc)
	e.waitFor("drifty", 2*time.Minute, "a clean drift check", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDrifted)
		return isReady(tc) && c != nil && c.Reason == workspace.ReasonNoDrift && tc.Status.LastDriftCheckTime != nil
	})
	changed := time.Now()
	if err := os.WriteFile(filepath.Join(e.instances, "drifty-0"), []byte("zone=elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tc = e.waitFor("drifty", 30*time.Second, "Drifted within an interval", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDrifted)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if took := time.Since(changed); took > 10*time.Second+time.Second+15*time.Second {
		t.Errorf("drift seen after %s, want within one interval plus a check", took)
	}
	if msg := condition(tc, infrav1.ConditionDrifted).Message; !strings.Contains(msg, "1 to replace (replace terraform_data.instance[0])") {
		t.Errorf("Drifted message %q", msg)
	}
	if !isReady(tc) {
		t.Errorf("drift made the cluster not Ready: %+v", condition(tc, infrav1.ConditionReady))
	}
	// No remediation for the cluster: through the next drift check (the
	// third in all), the instance stays as it was changed.
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if b, _ := os.ReadFile(filepath.Join(e.instances, "drifty-0")); string(b) != "zone=elsewhere\n" {
			return false, fmt.Errorf("the instance was changed back (%q) with remediation None", b)
		}
		if n := len(e.jobs("apply")); n != 1 {
			return false, fmt.Errorf("%d apply Jobs, want only the first: drift checks change nothing", n)
		}
		return finished(e.jobs("drift")) >= 3, nil
	})
	if err != nil {
		t.Error(err)
	}
	metrics := e.scrape(m)
	if !strings.Contains(metrics, `captf_drifted{kind="TerraformCluster",name="drifty",namespace="`+e.ns+`"} 1`) {
		t.Errorf("captf_drifted does not show the drift:\n%s", grepLines(metrics, "captf_drift"))
	}
	checks := e.jobs("drift")
	if len(checks) < 3 {
		t.Errorf("%d drift checks in about 30s with a 10s interval", len(checks))
	}
	noOverlap(t, e.jobs(""))
}

// noOverlap fails when two Jobs of an object ran at the same time.
func noOverlap(t *testing.T, jobs []batchv1.Job) {
	t.Helper()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].CreationTimestamp.Before(&jobs[j].CreationTimestamp) })
	for i := 1; i < len(jobs); i++ {
		prev, next := jobs[i-1], jobs[i]
		end := prev.Status.CompletionTime
		for _, c := range prev.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == "True" {
				end = &c.LastTransitionTime
			}
		}
		if end == nil || next.CreationTimestamp.Before(end) {
			t.Errorf("Job %s was created at %s while %s ran (finished %v)", next.Name, next.CreationTimestamp, prev.Name, end)
		}
	}
}

// TestRefreshKeepsOutputsCurrent: when a drift check finds only outputs
// moved, a refresh-only apply records them, with no apply and no drift.
func TestRefreshKeepsOutputsCurrent(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("fresh", e.newCluster("fresh", false), map[string]any{"instances": 1})
	tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}}
	e.create(tc)
	tc = e.waitFor("fresh", 2*time.Minute, "Ready", isReady)
	if got := string(tc.Status.Outputs["motd"].Raw); got != `""` {
		t.Fatalf("motd output %s, want empty", got)
	}
	if err := os.WriteFile(filepath.Join(e.instances, ".motd"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tc = e.waitFor("fresh", time.Minute, "the new output", func(tc *infrav1.TerraformCluster) bool {
		return string(tc.Status.Outputs["motd"].Raw) == `"hello"`
	})
	if tc.Status.LastRefreshTime == nil {
		t.Errorf("status.lastRefreshTime not set")
	}
	if c := condition(tc, infrav1.ConditionDrifted); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Drifted = %+v, want False: only an output moved", c)
	}
	if n := len(e.jobs("apply")); n != 1 {
		t.Errorf("%d apply Jobs, want 1: a refresh is no apply", n)
	}
	if n := len(e.jobs("refresh")); n != 1 {
		t.Errorf("%d refresh Jobs, want 1", n)
	}
}

// finished counts the Jobs that have ended.
func finished(jobs []batchv1.Job) int {
	n := 0
	for _, j := range jobs {
		if j.Status.CompletionTime != nil || j.Status.Failed > 0 {
			n++
		}
	}
	return n
}
