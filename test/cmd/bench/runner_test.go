package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/test/framework"
)

func TestDriftFigures(t *testing.T) {
	from := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	check := func(obj string, at time.Duration) framework.AuditEvent {
		ev := framework.AuditEvent{Verb: "create", RequestReceivedTimestamp: metav1.NewMicroTime(from.Add(at))}
		ev.User.Username = "captf"
		ev.ObjectRef.Resource = "jobs"
		ev.ObjectRef.Name = "tfc-" + obj + "-drift-0123456789abcdef-0"
		return ev
	}
	for name, tc := range map[string]struct {
		checks []framework.AuditEvent
		want   string
	}{
		"checked just before the window and not in it: an interval apart": {
			checks: []framework.AuditEvent{check("a", -5*time.Second)},
			want:   "longest an object went without a check over the window 10m5s; objects without one for over 11m30s: 0 of 1"},
		"never checked": {
			want: "objects without one for over 11m30s: 1 of 1"},
		"a check late in the window, the one before long before it": {
			checks: []framework.AuditEvent{check("a", -5*time.Minute), check("a", 8*time.Minute)},
			want:   "longest an object went without a check over the window 13m0s; objects without one for over 11m30s: 1 of 1"},
		"checks in the window, evenly": {
			checks: []framework.AuditEvent{check("a", -8*time.Minute), check("a", 2*time.Minute)},
			want:   "drift Jobs created over 10m0s: 1 (0.0/s)"},
	} {
		t.Run(name, func(t *testing.T) {
			got := driftFigures(tc.checks, "captf", from, 10*time.Minute, 11*time.Minute+30*time.Second, []string{"a"})
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want it to say %q", got, tc.want)
			}
		})
	}
}
