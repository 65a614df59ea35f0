package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
)

// TestClusterLifecycle: create → Ready with endpoint and failure domains
// from outputs; a variable change → one new apply; delete → destroy, files,
// finalizer and Secrets gone. Going back to the first inputs applies them
// again.
func TestClusterLifecycle(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	cluster := e.newCluster("prod", false)
	e.create(e.localCloud("prod", cluster, map[string]any{"instances": 2}))

	tc := e.waitFor("prod", 2*time.Minute, "Ready", isReady)
	if got := tc.Spec.ControlPlaneEndpoint; got.Host != "prod.local.test" || got.Port != 6443 {
		t.Errorf("controlPlaneEndpoint = %+v, want prod.local.test:6443 from the output", got)
	}
	if len(tc.Status.FailureDomains) != 2 || tc.Status.FailureDomains[0].Name != "zone-a" || tc.Status.FailureDomains[0].ControlPlane == nil || !*tc.Status.FailureDomains[0].ControlPlane {
		t.Errorf("failureDomains = %+v, want zone-a and zone-b for the control plane", tc.Status.FailureDomains)
	}
	if !tc.Status.Ready || tc.Status.Initialization == nil || !*tc.Status.Initialization.Provisioned {
		t.Errorf("ready=%v initialization=%+v, want both true", tc.Status.Ready, tc.Status.Initialization)
	}
	if _, ok := tc.Status.Outputs["admin_password"]; ok {
		t.Errorf("a sensitive output is in status: %v", tc.Status.Outputs)
	}
	if files := e.instanceFiles(); !slices.Equal(files, []string{"prod-0", "prod-1"}) {
		t.Errorf("instance files = %v, want prod-0 and prod-1", files)
	}
	// Two instances and the module's bookkeeping of their generations.
	if tc.Status.LastPlan == nil || tc.Status.LastPlan.Summary.Add != 3 {
		t.Errorf("lastPlan = %+v, want 3 to add", tc.Status.LastPlan)
	}
	firstHash := tc.Status.AppliedInputsHash

	e.update("prod", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 3, "instance_dir": e.instances, "api_port": 7443})
	})
	tc = e.waitFor("prod", 2*time.Minute, "applied the change", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedInputsHash != firstHash
	})
	var instances []string
	if err := json.Unmarshal(tc.Status.Outputs["instances"].Raw, &instances); err != nil || len(instances) != 3 {
		t.Errorf("instances output = %s, want 3 paths", tc.Status.Outputs["instances"].Raw)
	}
	if tc.Spec.ControlPlaneEndpoint.Port != 6443 {
		t.Errorf("the endpoint changed after it was set: %+v", tc.Spec.ControlPlaneEndpoint)
	}
	if n := len(e.jobs("apply")); n != 2 {
		t.Errorf("%d apply Jobs, want exactly 2 (one per inputs hash)", n)
	}
	if len(e.instanceFiles()) != 3 {
		t.Errorf("instance files = %v, want 3", e.instanceFiles())
	}
	if c := findEvent(t, e.ns, "prod", "Applied"); c == nil {
		t.Error("no Applied event")
	}
	if body := e.scrape(m); !strings.Contains(body, `workqueue_adds_total{name="terraformcluster"}`) {
		t.Errorf("metrics lack the terraformcluster workqueue:\n%s", tail(body, 20))
	}

	// Back to the first inputs: their old apply Job is still in the
	// history, but the infrastructure is at the second inputs now: a new
	// plan, which destroys the third instance and so waits for approval.
	e.update("prod", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 2, "instance_dir": e.instances})
	})
	tc = e.waitFor("prod", 2*time.Minute, "the destroy of the third instance blocked", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDestructivePlanBlocked)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if tc.Status.AppliedInputsHash == firstHash {
		t.Error("the first inputs are recorded as applied before their plan was approved")
	}
	e.annotate("prod", infrav1.AnnotationApproveDestructivePlan, tc.Status.LastPlan.Hash)
	e.waitFor("prod", 2*time.Minute, "applied the first inputs again", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedInputsHash == firstHash
	})
	// Four apply Jobs ran: the first inputs, the second, the blocked plan
	// and the approved apply; the history keeps the newest three.
	var again []string
	for _, j := range e.jobs("apply") {
		if j.Labels[names.LabelInputsHash] == firstHash && j.Labels[names.LabelAttempt] != "0" {
			again = append(again, j.Name)
		}
	}
	if all := e.jobs("apply"); len(all) != 3 || len(again) != 2 {
		t.Errorf("%d apply Jobs, %d of them for the first inputs again (%v); want 3 and 2 (the blocked plan, the approved apply)", len(all), len(again), again)
	}
	if files := e.instanceFiles(); !slices.Equal(files, []string{"prod-0", "prod-1"}) {
		t.Errorf("instance files = %v after going back to the first inputs, want prod-0 and prod-1", files)
	}
	// What the four runs left: the result of the last one only; each
	// runner deleted its inputs (and credentials) when done.
	perRun := map[string][]string{}
	for _, s := range e.secrets() {
		if typ := s.Labels[names.LabelSecretType]; typ == names.SecretTypeRunInputs || typ == names.SecretTypeResult {
			perRun[typ] = append(perRun[typ], s.Name)
		}
	}
	if len(perRun[names.SecretTypeRunInputs]) != 0 || len(perRun[names.SecretTypeResult]) != 1 {
		t.Errorf("per-run Secrets left: %v; want one result and no inputs", perRun)
	}

	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), "prod", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("prod", 2*time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instance files left after destroy: %v", files)
	}
	waitNoSecrets(t, e)
}

func waitNoSecrets(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		left := e.secrets()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var n []string
			for _, s := range left {
				n = append(n, s.Name+"("+s.Labels[names.LabelSecretType]+")")
			}
			t.Fatalf("Secrets left after delete: %s", strings.Join(n, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func findEvent(t *testing.T, ns, name, reason string) *corev1.Event {
	t.Helper()
	list, err := plane.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	return &list.Items[0]
}
