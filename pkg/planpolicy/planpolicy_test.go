package planpolicy

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// planOf is a plan as `terraform show -json` prints it, with one resource
// change per address: "type.name=action[,action]".
func planOf(changes ...string) []byte {
	var rcs []string
	for _, c := range changes {
		addr, actions, _ := strings.Cut(c, "=")
		typ, name, _ := strings.Cut(addr, ".")
		rcs = append(rcs, `{"address":"`+addr+`","type":"`+typ+`","name":"`+name+`","change":{"actions":["`+strings.ReplaceAll(actions, ",", `","`)+`"]}}`)
	}
	return []byte(`{"format_version":"1.2","resource_changes":[` + strings.Join(rcs, ",") + `]}`)
}

func rule(policy, name string, action infrav1.PlanAction, expr string) Rule {
	return Rule{Policy: policy, PlanRule: infrav1.PlanRule{Name: name, Action: action, Expression: expr, Message: name + " says so"}}
}

const destroysDatabase = `plan.resource_changes.exists(r, r.type == "local_file" && r.name.startsWith("db") && "delete" in r.change.actions)`

func TestJudge(t *testing.T) {
	prod := Object{Kind: "TerraformCluster", Namespace: "team", Name: "c1", Labels: map[string]string{"env": "prod"}, CatalogEntry: "net", CatalogVersion: "v2"}
	tests := map[string]struct {
		rules   []Rule
		plan    []byte
		summary Summary
		obj     Object
		want    infrav1.PlanAction
		rule    string // the rule that decided
		failed  bool   // its message says it failed
	}{
		"no rules: no verdict": {plan: planOf("local_file.db=delete")},
		"a destroy of a database: denied": {
			rules: []Rule{rule("p", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  planOf("local_file.db=delete", "local_file.web=create"), want: infrav1.PlanActionDeny, rule: "no-db-destroy",
		},
		"a replace of a database is a delete too": {
			rules: []Rule{rule("p", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  planOf("local_file.db=delete,create"), want: infrav1.PlanActionDeny, rule: "no-db-destroy",
		},
		"other changes: the rule does not match": {
			rules: []Rule{rule("p", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  planOf("local_file.web=delete", "local_file.db=update"),
		},
		"deny beats allow, whatever the order": {
			rules: []Rule{rule("a", "harmless", infrav1.PlanActionAllow, `summary.destroy <= 1`), rule("b", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  planOf("local_file.db=delete"), summary: Summary{PlanSummary: infrav1.PlanSummary{Destroy: 1}},
			want: infrav1.PlanActionDeny, rule: "no-db-destroy",
		},
		"approval beats allow": {
			rules: []Rule{rule("a", "adds", infrav1.PlanActionAllow, `summary.add > 0`), rule("a", "two-replaces", infrav1.PlanActionRequireApproval, `summary.replace > 2`)},
			plan:  planOf(), summary: Summary{PlanSummary: infrav1.PlanSummary{Add: 1, Replace: 3}},
			want: infrav1.PlanActionRequireApproval, rule: "two-replaces",
		},
		"an allow alone": {
			rules: []Rule{rule("a", "no-destroy", infrav1.PlanActionAllow, `summary.destroy == 0 && summary.replace == 0 && summary.forget == 0`)},
			plan:  planOf("local_file.web=create"), summary: Summary{PlanSummary: infrav1.PlanSummary{Add: 1}},
			want: infrav1.PlanActionAllow, rule: "no-destroy",
		},
		"the object's labels: a production cluster's network": {
			rules: []Rule{rule("p", "prod-network", infrav1.PlanActionDeny,
				`object.labels.?env.orValue("") == "prod" && plan.resource_changes.exists(r, r.type == "local_file" && r.name == "network" && r.change.actions != ["no-op"])`)},
			plan: planOf("local_file.network=update"), obj: prod, want: infrav1.PlanActionDeny, rule: "prod-network",
		},
		"the same change elsewhere": {
			rules: []Rule{rule("p", "prod-network", infrav1.PlanActionDeny,
				`object.labels.?env.orValue("") == "prod" && plan.resource_changes.exists(r, r.type == "local_file" && r.name == "network")`)},
			plan: planOf("local_file.network=update"), obj: Object{Name: "dev"},
		},
		"protected addresses and the catalog version": {
			rules: []Rule{rule("p", "protected", infrav1.PlanActionDeny, `size(summary.protected) > 0 && object.catalogVersion == "v2"`)},
			plan:  planOf(), summary: Summary{Protected: []string{"local_file.db"}}, obj: prod, want: infrav1.PlanActionDeny, rule: "protected",
		},
		"a deny that fails to evaluate denies": {
			rules: []Rule{rule("p", "missing-key", infrav1.PlanActionDeny, `object.labels["env"] == "prod"`)},
			plan:  planOf(), want: infrav1.PlanActionDeny, rule: "missing-key", failed: true,
		},
		"a deny whose error would quote a plan's value: the value stays out of the verdict": {
			rules: []Rule{rule("p", "bad-time", infrav1.PlanActionDeny, `plan.resource_changes.exists(r, timestamp(r.change.after.password) > timestamp("2020-01-01T00:00:00Z"))`)},
			plan:  []byte(`{"resource_changes":[{"change":{"actions":["create"],"after":{"password":"secret-value"}}}]}`),
			want:  infrav1.PlanActionDeny, rule: "bad-time", failed: true,
		},
		"a plan without changes: its lists are empty, not missing": {
			rules: []Rule{rule("p", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  []byte(`{"format_version":"1.2"}`),
		},
		"an allow that fails to evaluate does not allow": {
			rules: []Rule{rule("p", "missing-key", infrav1.PlanActionAllow, `object.labels["env"] == "dev"`)},
			plan:  planOf(),
		},
		"a plan that is no JSON: denied": {
			rules: []Rule{rule("p", "no-db-destroy", infrav1.PlanActionDeny, destroysDatabase)},
			plan:  []byte("{"), want: infrav1.PlanActionDeny, failed: true, rule: "no-db-destroy",
		},
		"an expression that runs too long: stopped, denied": {
			rules: []Rule{rule("p", "costly", infrav1.PlanActionDeny,
				`[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))`)},
			plan: planOf(), want: infrav1.PlanActionDeny, failed: true, rule: "costly",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var errs []error
			v := Judge(context.Background(), tc.rules, tc.plan, tc.summary, tc.obj, func(_ Rule, err error) { errs = append(errs, err) })
			if v.Action != tc.want || v.Rule != tc.rule {
				t.Fatalf("verdict %+v, want %q by rule %q", v, tc.want, tc.rule)
			}
			if failed := strings.Contains(v.Message, "could not be evaluated"); failed != tc.failed || (len(errs) > 0) != tc.failed && v.Rule != "" {
				t.Errorf("message %q, errors %v: failed %v, want %v", v.Message, errs, failed, tc.failed)
			}
			if strings.Contains(v.Message, "secret-value") {
				t.Errorf("the verdict %q quotes a value of the plan", v.Message)
			}
			if v.Rules != Digest(tc.rules) {
				t.Errorf("the verdict's rules %q, want their digest %q", v.Rules, Digest(tc.rules))
			}
		})
	}
}

func TestCompile(t *testing.T) {
	for expr, ok := range map[string]bool{
		destroysDatabase:                   true,
		`summary.destroy > 0`:              true,
		`summary.destroy + 1`:              false, // an int
		`summary.destroy +`:                false,
		`unknown.thing == 1`:               false,
		`plan.resource_changes.size() > 2`: true,
	} {
		if _, err := Compile(expr); (err == nil) != ok {
			t.Errorf("Compile(%s): %v, want ok %v", expr, err, ok)
		}
	}
}

func TestSelect(t *testing.T) {
	policy := func(name string, sel *metav1.LabelSelector, entries ...string) *infrav1.TerraformPlanPolicy {
		return &infrav1.TerraformPlanPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: infrav1.TerraformPlanPolicySpec{NamespaceSelector: sel, CatalogEntries: entries,
				Rules: []infrav1.PlanRule{{Name: "r", Expression: "true", Action: infrav1.PlanActionDeny, Message: "m"}}}}
	}
	prodOnly := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	deleting := policy("deleting", nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	policies := []*infrav1.TerraformPlanPolicy{policy("z-all", nil), policy("b-prod", prodOnly), policy("a-net", &metav1.LabelSelector{}, "net"), deleting}
	tests := map[string]struct {
		ns    map[string]string
		entry string
		want  []string
	}{
		"a prod namespace, the net entry": {ns: map[string]string{"env": "prod"}, entry: "net", want: []string{"a-net", "b-prod", "z-all"}},
		"a dev namespace, no entry":       {ns: map[string]string{"env": "dev"}, want: []string{"z-all"}},
		"a prod namespace, another entry": {ns: map[string]string{"env": "prod"}, entry: "vpc", want: []string{"b-prod", "z-all"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reads := 0
			rules, err := Select(policies, func() (map[string]string, error) { reads++; return tc.ns, nil }, tc.entry)
			if reads > 1 {
				t.Errorf("the namespace's labels read %d times, want once at most", reads)
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rules {
				got = append(got, r.Policy)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("policies %v, want %v", got, tc.want)
			}
		})
	}
	if MayAllow(nil) || !MayAllow([]Rule{rule("p", "r", infrav1.PlanActionAllow, "true")}) {
		t.Error("MayAllow")
	}
}
