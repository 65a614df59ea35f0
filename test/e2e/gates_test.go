package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/test/framework"
)

// gated creates a TerraformCluster that keeps its Jobs for counting.
func (e *env) gated(name string, policy infrav1.ApprovalPolicy, vars map[string]any) {
	tc := e.localCloud(name, e.newCluster(name, false), vars)
	tc.Spec.ApprovalPolicy = policy
	keep := int32(20)
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(tc)
}

func waitCondition(e *env, name, condType, what string, ok func(*metav1.Condition, *infrav1.TerraformCluster) bool) *infrav1.TerraformCluster {
	e.t.Helper()
	return e.waitFor(name, 2*time.Minute, what, func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, condType)
		return c != nil && ok(c, tc)
	})
}

// annotate sets an annotation (an approval, a restore, an abandon).
func (e *env) annotate(name, key, value string) {
	e.t.Helper()
	e.update(name, func(tc *infrav1.TerraformCluster) {
		if tc.Annotations == nil {
			tc.Annotations = map[string]string{}
		}
		tc.Annotations[key] = value
	})
}

func approvedJobs(jobs []batchv1.Job, hash string) int {
	n := 0
	for _, j := range jobs {
		if j.Labels[names.LabelApprovedPlan] == hash {
			n++
		}
	}
	return n
}

// blockedDestroy makes a gated cluster of two instances, Ready, and then
// lowers it to one: the plan that destroys the other waits for approval.
// It returns the cluster then.
func (e *env) blockedDestroy(name string) *infrav1.TerraformCluster {
	e.t.Helper()
	e.gated(name, "", map[string]any{"instances": 2})
	e.waitFor(name, 2*time.Minute, "Ready", isReady)
	e.update(name, func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances})
	})
	tc := waitCondition(e, name, infrav1.ConditionDestructivePlanBlocked, "DestructivePlanBlocked", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	return tc
}

// TestDestructivePlanGate: under the default policy a plan that destroys or
// replaces waits for approve-destructive-plan naming its hash; an approval
// of a stale hash applies nothing; the approved plan applies exactly once.
func TestDestructivePlanGate(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.gated("gated", "", map[string]any{"instances": 2})
	e.waitFor("gated", 2*time.Minute, "Ready", isReady)

	// Removing an instance destroys it: the plan stops.
	e.update("gated", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances})
	})
	tc := waitCondition(e, "gated", infrav1.ConditionDestructivePlanBlocked, "DestructivePlanBlocked", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	h1 := tc.Status.LastPlan.Hash
	msg := condition(tc, infrav1.ConditionDestructivePlanBlocked).Message
	for _, want := range []string{"Plan " + h1 + " deletes or replaces resources: 0 to add, 0 to change, 1 to destroy, 0 to replace (destroy terraform_data.instance[1])",
		"kubectl annotate terraformcluster -n " + e.ns + " gated captf.io/approve-destructive-plan=" + h1 + " --overwrite"} {
		if !strings.Contains(msg, want) {
			t.Errorf("DestructivePlanBlocked message %q does not contain %q", msg, want)
		}
	}
	if !isReady(tc) {
		t.Errorf("a provisioned cluster with a blocked change is not Ready: %+v", condition(tc, infrav1.ConditionReady))
	}
	if files := e.instanceFiles(); len(files) != 2 {
		t.Fatalf("instances %v while the destroy waits for approval, want both kept", files)
	}

	// Another change (a new zone replaces the instance): a new plan waits.
	e.update("gated", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances, "zones": []string{"zone-x"}})
	})
	tc = waitCondition(e, "gated", infrav1.ConditionDestructivePlanBlocked, "a new plan", func(c *metav1.Condition, tc *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue && tc.Status.LastPlan.Hash != h1
	})
	h2 := tc.Status.LastPlan.Hash
	if s := tc.Status.LastPlan.Summary; s.Destroy != 1 || s.Replace != 1 {
		t.Errorf("plan %s summary %+v, want 1 destroy and 1 replace", h2, s)
	}

	// Approving the stale plan applies nothing; the gate names the new one.
	applies := len(e.jobs("apply"))
	e.annotate("gated", infrav1.AnnotationApproveDestructivePlan, h1)
	tc = waitCondition(e, "gated", infrav1.ConditionDestructivePlanBlocked, "the stale approval refused", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Reason == workspace.ReasonApprovalForAnotherPlan
	})
	if msg := condition(tc, infrav1.ConditionDestructivePlanBlocked).Message; !strings.Contains(msg, "names "+h1+", which is not the plan waiting") || !strings.Contains(msg, "approve-destructive-plan="+h2) {
		t.Errorf("after a stale approval the condition says %q", msg)
	}
	e.never(3*time.Second, func() error {
		if n := len(e.jobs("apply")); n != applies {
			return fmt.Errorf("a stale approval started %d apply Jobs", n-applies)
		}
		if files := e.instanceFiles(); len(files) != 2 {
			return fmt.Errorf("instances %v after a stale approval, want both kept", files)
		}
		return nil
	})

	// Approving the waiting plan applies it, once.
	e.annotate("gated", infrav1.AnnotationApproveDestructivePlan, h2)
	tc = e.waitFor("gated", 2*time.Minute, "the approved plan applied", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedPlanHash == h2 && isReady(tc)
	})
	if c := condition(tc, infrav1.ConditionDestructivePlanBlocked); c.Status != metav1.ConditionFalse {
		t.Errorf("DestructivePlanBlocked after the apply: %+v", c)
	}
	files := e.instanceFiles()
	content, _ := os.ReadFile(filepath.Join(e.instances, "gated-0"))
	if len(files) != 1 || strings.TrimSpace(string(content)) != "zone=zone-x" {
		t.Errorf("instances %v (gated-0: %q), want gated-0 alone, in zone-x", files, content)
	}
	e.never(3*time.Second, func() error {
		if n := approvedJobs(e.jobs("apply"), h2); n != 1 {
			return fmt.Errorf("%d apply Jobs ran with the approval of %s, want 1", n, h2)
		}
		if n := len(e.jobs("apply")); n != applies+1 {
			return fmt.Errorf("%d apply Jobs after the approval, want %d", n, applies+1)
		}
		return nil
	})
	if ev := findEvent(t, e.ns, "gated", "PlanApproved"); ev == nil {
		t.Errorf("no PlanApproved event")
	}
}

// TestApprovedPlanChanged: an approval names the plan that was waiting, but
// by the time the run plans again the infrastructure changed: nothing
// applies, and the gate re-arms with the new hash and says why.
func TestApprovedPlanChanged(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.gated("moving", "", map[string]any{"instances": 2})
	e.waitFor("moving", 2*time.Minute, "Ready", isReady)
	e.update("moving", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances})
	})
	tc := waitCondition(e, "moving", infrav1.ConditionDestructivePlanBlocked, "DestructivePlanBlocked", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	h1 := tc.Status.LastPlan.Hash
	// Out of band, an instance goes away: the plan now also replaces it.
	if err := os.Remove(filepath.Join(e.instances, "moving-0")); err != nil {
		t.Fatal(err)
	}
	e.annotate("moving", infrav1.AnnotationApproveDestructivePlan, h1)
	tc = waitCondition(e, "moving", infrav1.ConditionDestructivePlanBlocked, "re-armed", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Reason == workspace.ReasonPlanChanged
	})
	h2 := tc.Status.LastPlan.Hash
	msg := condition(tc, infrav1.ConditionDestructivePlanBlocked).Message
	if h2 == h1 || !strings.Contains(msg, "The approved plan "+h1+" is no longer what terraform plans") || !strings.Contains(msg, "approve-destructive-plan="+h2) {
		t.Errorf("re-armed with %s: %q", h2, msg)
	}
	if files := e.instanceFiles(); len(files) != 1 || files[0] != "moving-1" {
		t.Errorf("instances %v: the changed plan must not apply", files)
	}
}

// TestManualPolicy: every plan with changes, harmless ones included, waits
// for approve-plan.
func TestManualPolicy(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.gated("manual", infrav1.ApprovalPolicyManual, map[string]any{"instances": 1})
	tc := waitCondition(e, "manual", infrav1.ConditionPlanAwaitingApproval, "PlanAwaitingApproval", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	if c := condition(tc, infrav1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != infrav1.ConditionPlanAwaitingApproval {
		t.Errorf("Ready of an unprovisioned cluster waiting for approval: %+v", c)
	}
	if files := e.instanceFiles(); len(files) != 0 {
		t.Fatalf("instances %v before the approval", files)
	}
	e.annotate("manual", infrav1.AnnotationApprovePlan, tc.Status.LastPlan.Hash)
	e.waitFor("manual", 2*time.Minute, "Ready", isReady)

	// A harmless change (one more instance) waits too.
	e.update("manual", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 2, "instance_dir": e.instances})
	})
	tc = waitCondition(e, "manual", infrav1.ConditionPlanAwaitingApproval, "the change waiting", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	if msg := condition(tc, infrav1.ConditionPlanAwaitingApproval).Message; !strings.Contains(msg, "1 to add") || !strings.Contains(msg, "captf.io/approve-plan="+tc.Status.LastPlan.Hash) {
		t.Errorf("PlanAwaitingApproval message %q", msg)
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Fatalf("instances %v before the second approval", files)
	}
	e.annotate("manual", infrav1.AnnotationApprovePlan, tc.Status.LastPlan.Hash)
	e.waitFor("manual", 2*time.Minute, "the change applied", func(tc *infrav1.TerraformCluster) bool {
		return len(e.instanceFiles()) == 2 && isReady(tc)
	})
}

// TestApprovalIsUsedOnce (issue 30, item 4): an approval stayed on the
// object after its plan applied, ignored only while it named the last
// applied plan; and a delete's plan hash covered address and actions, not
// what is deleted. So the approval of "destroy instance[1]", after an
// apply that made instance[1] anew, approved destroying the new one too.
// A used approval goes, and the hash covers what is deleted.
func TestApprovalIsUsedOnce(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.gated("once", "", map[string]any{"instances": 2})
	// The manager's caches keep only CAPTF's and Cluster API's annotations,
	// and its writes (the finalizer, clusterctl's block-move, the used
	// approval) leave the others as they are.
	const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	e.annotate("once", lastApplied, `{"kept":true}`)
	e.waitFor("once", 2*time.Minute, "Ready", isReady)
	instances := func(n int) {
		e.update("once", func(tc *infrav1.TerraformCluster) {
			setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": n, "instance_dir": e.instances})
		})
	}
	blocked := func(what string, not string) string {
		tc := waitCondition(e, "once", infrav1.ConditionDestructivePlanBlocked, what, func(c *metav1.Condition, tc *infrav1.TerraformCluster) bool {
			return c.Status == metav1.ConditionTrue && tc.Status.LastPlan.Hash != not
		})
		return tc.Status.LastPlan.Hash
	}
	instances(1)
	h1 := blocked("the first destroy blocked", "")
	e.annotate("once", infrav1.AnnotationApproveDestructivePlan, h1)
	tc := e.waitFor("once", 2*time.Minute, "the approved destroy applied", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedPlanHash == h1 && isReady(tc)
	})
	if v, ok := tc.Annotations[infrav1.AnnotationApproveDestructivePlan]; ok {
		t.Errorf("the used approval %s is still on the object", v)
	}
	if v := tc.Annotations[lastApplied]; v != `{"kept":true}` {
		t.Errorf("the manager's writes left %s %q, want it kept", lastApplied, v)
	}
	// instance[1] again: an add, which the Destructive policy lets through.
	instances(2)
	e.waitFor("once", 2*time.Minute, "instance[1] made anew", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedPlanHash != h1 && isReady(tc) && len(e.instanceFiles()) == 2
	})
	added := e.get("once").Status.AppliedPlanHash
	// Destroying the new instance[1] is another plan: it waits.
	instances(1)
	h3 := blocked("the second destroy blocked", added)
	if h3 == h1 {
		t.Errorf("destroying the new instance[1] hashes as destroying the old one (%s)", h1)
	}
	// Blocked is what the gate says; over a window, nothing applies either.
	if err := framework.Consistently(5*time.Second, func() error {
		if files := e.instanceFiles(); len(files) != 2 {
			return fmt.Errorf("instances %v: the second destroy applied without an approval of its own", files)
		}
		if now := e.get("once").Status.AppliedPlanHash; now != added {
			return fmt.Errorf("plan %s applied without an approval of its own", now)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestProtectedResources (issue 34, item 3): spec.protect refuses a plan
// that replaces a covered address even with the destructive approval
// naming exactly that plan, and a delete that would destroy one; removing
// the pattern lets each go on, with no other step.
func TestProtectedResources(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("kept", e.newCluster("kept", false), map[string]any{"instances": 1})
	tc.Spec.Protect = []string{"terraform_data.instance"}
	keep := int32(20)
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(tc)
	e.waitFor("kept", 2*time.Minute, "Ready", isReady)

	// A new zone replaces the instance: refused, whatever the approvals.
	e.update("kept", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances, "zones": []string{"zone-x"}})
	})
	tc = waitCondition(e, "kept", infrav1.ConditionDestructivePlanBlocked, "ProtectedResourceChange", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue && c.Reason == run.ReasonProtectedResourceChange
	})
	h := tc.Status.LastPlan.Hash
	msg := condition(tc, infrav1.ConditionDestructivePlanBlocked).Message
	for _, want := range []string{"Plan " + h + " destroys, replaces or forgets terraform_data.instance[0], which spec.protect covers: no approval applies it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("DestructivePlanBlocked message %q does not contain %q", msg, want)
		}
	}
	if c := condition(tc, infrav1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != run.ReasonProtectedResourceChange {
		t.Errorf("Ready of a cluster whose change is refused: %+v", c)
	}
	if ev := findEvent(t, e.ns, "kept", run.ReasonProtectedResourceChange); ev == nil || ev.Type != corev1.EventTypeWarning {
		t.Errorf("no Warning event %s: %+v", run.ReasonProtectedResourceChange, ev)
	}
	zoneOf := func() string {
		b, _ := os.ReadFile(filepath.Join(e.instances, "kept-0"))
		return strings.TrimSpace(string(b))
	}
	applies := len(e.jobs("apply"))
	e.annotate("kept", infrav1.AnnotationApproveDestructivePlan, h)
	e.never(5*time.Second, func() error {
		if n := len(e.jobs("apply")); n != applies {
			return fmt.Errorf("the approval of a protected plan started %d apply Jobs", n-applies)
		}
		if z := zoneOf(); z != "zone=zone-a" {
			return fmt.Errorf("instance kept-0 is %q after the approval of a protected plan, want it untouched (zone=zone-a)", z)
		}
		return nil
	})

	// The pattern removed, the approved plan applies, exactly it.
	e.update("kept", func(tc *infrav1.TerraformCluster) { tc.Spec.Protect = nil })
	e.waitFor("kept", 2*time.Minute, "the approved plan applied", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedPlanHash == h && isReady(tc)
	})
	if z := zoneOf(); z != "zone=zone-x" {
		t.Errorf("instance kept-0 is %q after the approved apply, want zone=zone-x", z)
	}

	// A delete would destroy a protected instance: it waits, and keeps it.
	e.update("kept", func(tc *infrav1.TerraformCluster) { tc.Spec.Protect = []string{"terraform_data.*"} })
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc = e.waitFor("kept", 2*time.Minute, "the destroy refused", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == run.ReasonProtectedResourceChange
	})
	if msg := condition(tc, infrav1.ConditionReady).Message; !strings.Contains(msg, "Destroying (plan ") || !strings.Contains(msg, "terraform_data.instance[0]") || !strings.Contains(msg, infrav1.AnnotationAbandonInfrastructure) {
		t.Errorf("Ready's message of a refused destroy: %q", msg)
	}
	destroys := len(e.jobs("destroy"))
	e.never(5*time.Second, func() error {
		if e.get("kept") == nil {
			return errors.New("the cluster is gone while its destroy is refused")
		}
		if files := e.instanceFiles(); len(files) != 1 {
			return fmt.Errorf("instances %v while the destroy is refused", files)
		}
		if n := len(e.jobs("destroy")); n != destroys {
			return fmt.Errorf("%d more destroy Jobs while the pattern stays: a refused destroy is not retried", n-destroys)
		}
		return nil
	})
	e.update("kept", func(tc *infrav1.TerraformCluster) { tc.Spec.Protect = nil })
	e.waitFor("kept", 2*time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instance files left after the destroy: %v", files)
	}
}

// TestRunRecordsOutliveTheirJobs (issue 34, item 2): the plan waiting for
// approval, as terraform renders it and as JSON, and the log of a failed
// run stay readable once their Jobs and pods are gone.
func TestRunRecordsOutliveTheirJobs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	tc := e.blockedDestroy("kept")
	hash := tc.Status.LastPlan.Hash
	// Every Job and pod of the object goes (by hand, a TTL, the history).
	deleteJobsAndPods := func() {
		t.Helper()
		background := metav1.DeletePropagationBackground
		if err := plane.Kube.BatchV1().Jobs(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := waitAPI(func() error {
			pods, err := plane.Kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(pods.Items) > 0 {
				err = fmt.Errorf("%d pods left", len(pods.Items))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The manager is stopped first: it would plan again for a Job gone.
	m.Stop()
	deleteJobsAndPods()
	records := runRecords(t, e.ns)
	text, planJSON, about := records["record apply Blocked "+run.KeyPlanText], records["record apply Blocked "+run.KeyPlanJSON], records["record apply Blocked "+run.KeyRun]
	if !strings.Contains(text, "terraform_data.instance[1] will be destroyed") {
		t.Errorf("the kept plan's text does not show the destroy:\n%s", text)
	}
	var plan struct {
		ResourceChanges []struct {
			Address string
			Change  struct{ Actions []string }
		} `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(planJSON), &plan); err != nil {
		t.Fatalf("the kept plan's JSON: %v", err)
	}
	destroys := 0
	for _, rc := range plan.ResourceChanges {
		if rc.Address == "terraform_data.instance[1]" && slices.Equal(rc.Change.Actions, []string{"delete"}) {
			destroys++
		}
	}
	var rec run.Record
	if err := json.Unmarshal([]byte(about), &rec); err != nil || destroys != 1 || rec.Plan == nil || rec.Plan.Hash != hash {
		t.Errorf("the kept plan: %d destroys of terraform_data.instance[1] in its JSON, record %+v (%v), want 1 and plan %s", destroys, rec, err, hash)
	}

	// A failed run: its log's tail stays with its record.
	m = e.startManager()
	e.update("kept", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": -1, "instance_dir": e.instances})
	})
	e.waitFor("kept", 2*time.Minute, "ApplyFailed", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == workspace.ReasonApplyFailed
	})
	m.Stop()
	deleteJobsAndPods()
	if log := runRecords(t, e.ns)["record apply Failed "+run.KeyLog]; !strings.Contains(log, "Error: ") || !strings.Contains(log, "count") {
		t.Errorf("the failed run's kept log does not say what failed:\n%s", log)
	}
}
