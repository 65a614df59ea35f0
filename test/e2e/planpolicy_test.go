package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// planPolicy creates a TerraformPlanPolicy that selects the test's
// namespace alone (policies are cluster-scoped, and other tests run
// beside this one), deleted at the test's end.
func (e *env) planPolicy(name string, rules ...infrav1.PlanRule) *infrav1.TerraformPlanPolicy {
	e.t.Helper()
	p := &infrav1.TerraformPlanPolicy{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-" + name},
		Spec: infrav1.TerraformPlanPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: e.ns}},
			Rules:             rules,
		}}
	policies := plane.Captf.InfrastructureV1alpha1().TerraformPlanPolicies()
	p, err := policies.Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = policies.Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	return p
}

func (e *env) instancesOf(cluster string) int {
	n := 0
	for _, f := range e.instanceFiles() {
		if strings.HasPrefix(f, cluster+"-") {
			n++
		}
	}
	return n
}

// TestPlanPolicy: the platform team's TerraformPlanPolicy judges each
// plan before it applies. A plan that destroys a database instance is
// denied, and an approval of it applies nothing, until the policy
// changes; a plan that only adds applies under approvalPolicy Manual
// without a person; a plan that adds many waits for a person under the
// default policy, which alone would let it apply. The verdict is on the
// object (condition, event) and in the run record; the webhook refuses a
// rule that does not compile.
func TestPlanPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()

	bad := &infrav1.TerraformPlanPolicy{ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-bad"}, Spec: infrav1.TerraformPlanPolicySpec{
		Rules: []infrav1.PlanRule{{Name: "typo", Expression: "summary.destroy >", Action: infrav1.PlanActionDeny, Message: "m"}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformPlanPolicies().Create(ctx, bad, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.rules[0].expression") {
		t.Errorf("a rule that does not compile: %v, want it refused at spec.rules[0].expression", err)
	}

	const databases = `plan.resource_changes.exists(r, r.type == "terraform_data" && r.name == "instance" && "delete" in r.change.actions) && object.labels.?tier.orValue("") == "db"`
	denyRule := infrav1.PlanRule{Name: "no-db-destroy", Expression: databases, Action: infrav1.PlanActionDeny, Message: "no destroy of a database"}
	rules := []infrav1.PlanRule{denyRule,
		{Name: "adds-only", Expression: `summary.destroy == 0 && summary.replace == 0 && summary.forget == 0 && summary.add <= 2`, Action: infrav1.PlanActionAllow, Message: "additions apply without a person"},
		{Name: "many-adds", Expression: `summary.add > 3`, Action: infrav1.PlanActionRequireApproval, Message: "more than three new resources need a person"}}
	policy := e.planPolicy("fleet", rules...)

	// Three clusters, each Ready under the policy: their first plans
	// add at most three resources (the module's generations and the
	// instances).
	db := e.localCloud("db", e.newCluster("db", false), map[string]any{"instances": 2})
	db.Labels["tier"] = "db"
	e.create(db)
	web := e.localCloud("web", e.newCluster("web", false), map[string]any{"instances": 1})
	web.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	e.create(web)
	e.create(e.localCloud("big", e.newCluster("big", false), map[string]any{"instances": 1}))
	for _, name := range []string{"db", "web", "big"} {
		e.waitFor(name, 2*time.Minute, "Ready", isReady)
	}

	// 1. The database loses an instance: denied, approved or not.
	e.update("db", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 1, "instance_dir": e.instances})
	})
	tc := waitCondition(e, "db", infrav1.ConditionPlanDenied, "PlanDenied", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	denied := tc.Status.LastPlan.Hash
	msg := condition(tc, infrav1.ConditionPlanDenied).Message
	for _, want := range []string{"Plan " + denied, "destroy terraform_data.instance[1]", "denied by rule no-db-destroy of TerraformPlanPolicy " + policy.Name + ": no destroy of a database", "No approval applies it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("PlanDenied message %q does not contain %q", msg, want)
		}
	}
	if !isReady(tc) {
		t.Errorf("a provisioned cluster whose change is denied is not Ready: %+v", condition(tc, infrav1.ConditionReady))
	}
	e.annotate("db", infrav1.AnnotationApproveDestructivePlan, denied)
	e.never(15*time.Second, func() error {
		if n := e.instancesOf("db"); n != 2 {
			return fmt.Errorf("the denied plan applied after an approval: %d instances of db, want 2", n)
		}
		return nil
	})
	events, err := plane.Kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "PlanDenied").String()})
	if err != nil || len(events.Items) == 0 {
		t.Errorf("no PlanDenied event (%v)", err)
	}
	// recordOf fails the test when no record holds the verdict.
	e.recordOf(tc, func(rec *run.Record) bool {
		return rec.Plan != nil && rec.Plan.Hash == denied && rec.Plan.Denied() && rec.Plan.Verdict.Rule == "no-db-destroy" && rec.Reason == run.ReasonPlanDenied
	})

	// 2. Manual, and a plan that only adds: the policy lets it apply.
	e.update("web", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 2, "instance_dir": e.instances})
	})
	e.waitFor("web", 2*time.Minute, "two instances, no approval", func(tc *infrav1.TerraformCluster) bool {
		return e.instancesOf("web") == 2 && isReady(tc) && tc.Status.AppliedPlanHash == tc.Status.LastPlan.Hash
	})

	// 3. Many adds under the default policy: a person must approve.
	e.update("big", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 5, "instance_dir": e.instances})
	})
	tc = waitCondition(e, "big", infrav1.ConditionPlanAwaitingApproval, "PlanAwaitingApproval", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	if msg := condition(tc, infrav1.ConditionPlanAwaitingApproval).Message; !strings.Contains(msg, "rule many-adds of TerraformPlanPolicy "+policy.Name) {
		t.Errorf("PlanAwaitingApproval message %q does not name the rule", msg)
	}
	if n := e.instancesOf("big"); n != 1 {
		t.Errorf("%d instances of big while its plan waits, want 1", n)
	}
	e.annotate("big", infrav1.AnnotationApprovePlan, tc.Status.LastPlan.Hash)
	e.waitFor("big", 2*time.Minute, "five instances, approved", func(*infrav1.TerraformCluster) bool { return e.instancesOf("big") == 5 })

	// 4. The policy changes: the denied plan is judged again, and now
	// waits for an approval of its own (the one given was of the denied
	// plan, which is the same plan: it applies).
	policies := plane.Captf.InfrastructureV1alpha1().TerraformPlanPolicies()
	p, err := policies.Get(ctx, policy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Rules = p.Spec.Rules[1:]
	if _, err := policies.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("db", 2*time.Minute, "the destroy, applied once the rule is gone", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionPlanDenied)
		return e.instancesOf("db") == 1 && c != nil && c.Status == metav1.ConditionFalse
	})
}
