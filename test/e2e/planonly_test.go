package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// forgedAnnotation is what the module's code below adds to the object's
// state Secret at plan time when the runner API lets it write.
const forgedAnnotation = "e2e.captf.io/forged-at-plan-time"

// planTimeWriter is a module whose code, at plan time, does what any
// module's code can: read the runner's token from the pod and, with it,
// rewrite the object's state Secret through the runner API (here, one
// annotation more; a real attack moves a protected address out of the
// pattern). Its output says what the runner API answered.
const planTimeWriter = `
terraform {
  required_providers {
    localcloud = { source = "captf.io/captf/localcloud", version = "0.1.0" }
  }
}

provider "localcloud" {
  endpoint = "http://127.0.0.1:1"
  account  = "none"
}

variable "captf_cluster_name" {
  type = string
}

variable "captf_name" {
  type = string
}

variable "generation" {
  type = number
}

variable "state_url" {
  type = string
}

locals {
  headers = {
    Authorization  = "Bearer ${trimspace(file("` + run.TokenFile + `"))}"
    "Content-Type" = "application/json"
  }
}

resource "terraform_data" "generation" {
  input = var.generation
}

data "localcloud_http" "state" {
  url             = var.state_url
  request_headers = local.headers
  insecure        = true
}

locals {
  found = data.localcloud_http.state.status_code == 200 ? jsondecode(data.localcloud_http.state.response_body) : null
}

data "localcloud_http" "forge" {
  count           = local.found == null ? 0 : 1
  url             = var.state_url
  method          = "PUT"
  request_headers = local.headers
  insecure        = true
  request_body = jsonencode(merge(local.found, { metadata = merge(local.found.metadata, {
    annotations = merge(lookup(local.found.metadata, "annotations", {}), { "` + forgedAnnotation + `" = "yes" })
  }) }))
}

output "control_plane_endpoint" {
  value = { host = "${var.captf_cluster_name}.local.test", port = 6443 }
}

output "forged_write" {
  value = length(data.localcloud_http.forge) == 0 ? 0 : data.localcloud_http.forge[0].status_code
}
`

// TestPlanOnlyRunsCannotWrite (issue 50, item 2): every process of a
// runner pod holds the pod's token, the module's code too, and the runner
// API let the code of an apply Job rewrite the state at plan time, before
// the plan waited for an approver (and, from the manager's cache, the code
// of a drift check as well). Now only the runner, which holds its Job's
// write key, writes; an apply claims the state only once its plan may
// apply; the module's code reads.
func TestPlanOnlyRunsCannotWrite(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	lock := e.startManagerWithProviders()
	if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writer"},
		Data: map[string]string{"main.tf": planTimeWriter, ".terraform.lock.hcl": lock}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	state := names.ObjectOf("TerraformCluster", "writer").State()
	stateURL := fmt.Sprintf("https://%s/api/v1/namespaces/%s/secrets/%s", e.front.Addr, e.ns, state)
	tc := e.localCloud("writer", e.newCluster("writer", false), map[string]any{})
	tc.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "writer"}}
	tc.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"generation": 1, "state_url": stateURL})
	e.create(tc)

	forged := func(when string) {
		t.Helper()
		head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, state, metav1.GetOptions{})
		if err == nil && head.Annotations[forgedAnnotation] != "" {
			t.Fatalf("%s: the module's code rewrote the state Secret at plan time (annotation %s)", when, forgedAnnotation)
		}
	}
	// The first plan waits for an approver; it made the state Secret no
	// more than it wrote it.
	first := waitCondition(e, "writer", infrav1.ConditionPlanAwaitingApproval, "the first plan waiting", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	forged("the first plan waiting")
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, state, metav1.GetOptions{}); err == nil {
		t.Error("a plan that waits for an approver created the state Secret")
	}
	e.annotate("writer", infrav1.AnnotationApprovePlan, first.Status.LastPlan.Hash)
	e.waitFor("writer", 3*time.Minute, "Ready", isReady)

	// A change: its plan, which reads a state now, waits for an approver.
	applied := e.get("writer")
	e.update("writer", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"generation": 2, "state_url": stateURL})
	})
	waiting := e.waitFor("writer", 3*time.Minute, "the change waiting", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionPlanAwaitingApproval)
		return c != nil && c.Status == metav1.ConditionTrue && tc.Status.LastPlan != nil && tc.Status.LastPlan.Hash != first.Status.LastPlan.Hash
	})
	forged("the change waiting for an approver")
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, state, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !statestore.HasState(head) {
		t.Fatal("the state Secret holds no state: the test does not show what it claims")
	}

	// Approved, the change applies; what the code was told is an output.
	e.annotate("writer", infrav1.AnnotationApprovePlan, waiting.Status.LastPlan.Hash)
	done := e.waitFor("writer", 3*time.Minute, "the change applied", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedInputsHash != applied.Status.AppliedInputsHash
	})
	forged("the change applied")
	if got := strings.TrimSpace(string(done.Status.Outputs["forged_write"].Raw)); got != "403" {
		t.Errorf("outputs.forged_write = %s: the runner API answered the module's write %s, want 403 (the code ran, and was refused)", got, got)
	}

	// A drift check runs the same code; it writes nothing either.
	e.update("writer", func(tc *infrav1.TerraformCluster) {
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}}
	})
	e.waitFor("writer", 2*time.Minute, "a drift check", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.LastDriftCheckTime != nil && tc.Status.LastDriftCheckTime.After(done.Status.LastAppliedTime.Time)
	})
	forged("a drift check")
}
