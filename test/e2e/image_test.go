package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// TestRunnerImage: with --runner-image naming the runner image `make
// images` built, a cluster is applied, drift-checked and destroyed by Jobs
// that run from that image (the image's captf and tofu, as its non-root
// user, reaching the manager's runner API), not the host's binaries.
func TestRunnerImage(t *testing.T) {
	runner, err := framework.RunnerImage()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.startManager("--runner-image=" + runner)
	tc := e.localCloud("imaged", e.newCluster("imaged", false), map[string]any{})
	tc.Spec.Module = infrav1.Module{Inline: `
resource "terraform_data" "instance" { input = "one" }
output "control_plane_endpoint" { value = { host = "imaged.local.test", port = 6443 } }
`}
	tc.Spec.Variables = nil
	tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 5 * time.Second}}
	keep := int32(3) // the clean drift check's Job stays to be looked at
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(tc)
	e.waitFor("imaged", 2*time.Minute, "Ready with a clean drift check", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDrifted)
		return isReady(tc) && c != nil && c.Status == metav1.ConditionFalse
	})
	jobs := e.jobs("")
	if len(jobs) < 2 {
		t.Fatalf("%d Jobs, want an apply and a drift check", len(jobs))
	}
	for _, j := range jobs {
		if img := j.Spec.Template.Spec.Containers[0].Image; img != runner {
			t.Errorf("Job %s runs %s, want %s", j.Name, img, runner)
		}
	}
	apply := e.jobs("apply")[0]
	pods, err := plane.Kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + apply.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %v %d", apply.Name, err, len(pods.Items))
	}
	logs, err := executor.Logs(e.ns, pods.Items[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	// The host has terraform, not tofu: OpenTofu's messages come from the image.
	if !strings.Contains(logs, "OpenTofu has been successfully initialized") {
		t.Errorf("the apply's log does not show OpenTofu ran:\n%s", tail(logs, 30))
	}
	// The destroy Job goes with the object (its owner): look while it runs.
	e.deleteTC("imaged", metav1.DeletePropagationBackground)
	destroys := map[string]string{}
	e.waitFor("imaged", 2*time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool {
		for _, j := range e.jobs("destroy") {
			destroys[j.Name] = j.Spec.Template.Spec.Containers[0].Image
		}
		return tc == nil
	})
	if len(destroys) != 1 {
		t.Errorf("destroy Jobs seen: %v, want 1", destroys)
	}
	for name, img := range destroys {
		if img != runner {
			t.Errorf("destroy Job %s runs %s", name, img)
		}
	}
	if findEvent(t, e.ns, "imaged", "Destroyed") == nil {
		t.Error("no Destroyed event")
	}
}
