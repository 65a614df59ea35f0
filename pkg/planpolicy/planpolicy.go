// Package planpolicy judges plans by the platform team's
// TerraformPlanPolicies: which rules apply to an object (Select, in the
// manager, which passes them to the Job), and what they say of a plan
// (Judge, in the runner, between the plan and the apply). Rules are CEL
// expressions, the language of Kubernetes' ValidatingAdmissionPolicy. It
// does no I/O.
package planpolicy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Rule is one rule as a Job carries it: the policy it is of, and the rule.
type Rule struct {
	Policy string `json:"policy"`
	infrav1.PlanRule
}

// Verdict is what the rules said of a plan: the action of the strongest
// rule that matched (Deny, then RequireApproval, then Allow), "" when
// none did, and what decided it.
type Verdict struct {
	Action  infrav1.PlanAction `json:"action,omitempty"`
	Policy  string             `json:"policy,omitempty"`
	Rule    string             `json:"rule,omitempty"`
	Message string             `json:"message,omitempty"`
	// Rules is the Digest of the rules that judged the plan: a plan
	// denied is judged again once the rules differ.
	Rules string `json:"rules,omitempty"`
}

// String is the verdict as people read it.
func (v *Verdict) String() string {
	if v == nil || v.Action == "" {
		return "no plan policy rule matched"
	}
	return fmt.Sprintf("%s by rule %s of TerraformPlanPolicy %s: %s", v.Action, v.Rule, v.Policy, v.Message)
}

// Input is what an apply Job judges its plan by: the rules that select
// its object, and what they read of it.
type Input struct {
	Rules  []Rule `json:"rules"`
	Object Object `json:"object"`
}

// Digest is the Digest of in's rules, "" for nil.
func (in *Input) Digest() string {
	if in == nil {
		return ""
	}
	return Digest(in.Rules)
}

// Object is what rules read of the object whose plan they judge.
type Object struct {
	Kind           string            `json:"kind"`
	Namespace      string            `json:"namespace"`
	Name           string            `json:"name"`
	Labels         map[string]string `json:"labels"`
	CatalogEntry   string            `json:"catalogEntry"`
	CatalogVersion string            `json:"catalogVersion"`
}

// Summary is what rules read as summary: the plan's counts and the
// protected addresses it changes.
type Summary struct {
	infrav1.PlanSummary
	Protected []string
}

// Limits: an expression runs on a plan the module shapes, so it is
// bounded in cost (as ValidatingAdmissionPolicy bounds a call) and time.
const (
	costLimit   = 1_000_000
	evalTimeout = 10 * time.Second
)

// env is built once, on first use: a manager that never judges a plan
// never builds it.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("plan", cel.DynType),
		cel.Variable("summary", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("object", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Lists(),
		ext.Sets(),
	)
})

// Compile checks expr as a rule: it compiles and is a bool.
func Compile(expr string) (cel.Program, error) {
	e, err := env()
	if err != nil {
		return nil, err
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("the expression is a %s, not a bool", t)
	}
	return e.Program(ast, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(100))
}

// Select is the rules of policies that select an object of a namespace
// whose labels nsLabels reads (once, and only when a selector needs them)
// naming catalog entry ("" for none), in policy and rule order: what its
// apply Jobs judge their plans by. A selector that does not parse is an
// error, not a policy skipped: a Deny must not fail open.
func Select(policies []*infrav1.TerraformPlanPolicy, nsLabels func() (map[string]string, error), entry string) ([]Rule, error) {
	policies = slices.Clone(policies)
	slices.SortFunc(policies, func(a, b *infrav1.TerraformPlanPolicy) int { return cmp.Compare(a.Name, b.Name) })
	nsLabels = sync.OnceValues(nsLabels)
	var out []Rule
	for _, p := range policies {
		if p.DeletionTimestamp != nil || len(p.Spec.CatalogEntries) > 0 && !slices.Contains(p.Spec.CatalogEntries, entry) {
			continue
		}
		s := labels.Everything() // unset selects every namespace
		if sel := p.Spec.NamespaceSelector; sel != nil {
			var err error
			if s, err = metav1.LabelSelectorAsSelector(sel); err != nil {
				return nil, fmt.Errorf("TerraformPlanPolicy %s: spec.namespaceSelector: %w", p.Name, err)
			}
		}
		if !s.Empty() {
			l, err := nsLabels()
			if err != nil {
				return nil, err
			}
			if !s.Matches(labels.Set(l)) {
				continue
			}
		}
		for _, r := range p.Spec.Rules {
			out = append(out, Rule{Policy: p.Name, PlanRule: r})
		}
	}
	return out, nil
}

// Digest names rules: a Job's rules, and the rules a verdict was made by.
func Digest(rules []Rule) string {
	if len(rules) == 0 {
		return ""
	}
	b, _ := json.Marshal(rules) // plain strings: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// MayAllow tells whether a rule may let a plan apply without a person: a
// Job under such rules needs the rights to apply.
func MayAllow(rules []Rule) bool {
	return slices.ContainsFunc(rules, func(r Rule) bool { return r.Action == infrav1.PlanActionAllow })
}

var rank = map[infrav1.PlanAction]int{infrav1.PlanActionAllow: 1, infrav1.PlanActionRequireApproval: 2, infrav1.PlanActionDeny: 3}

// Judge evaluates rules on a plan (planJSON: `terraform show -json`). A
// rule that cannot be evaluated matches when it denies or requires
// approval (a policy that fails closes the gate, not opens it), and does
// not when it allows; its message says it failed, and failed gets the
// error, which may quote the plan's values (for the runner's redacted
// log, never the verdict).
func Judge(ctx context.Context, rules []Rule, planJSON []byte, summary Summary, obj Object, failed func(Rule, error)) *Verdict {
	v := &Verdict{Rules: Digest(rules)}
	if len(rules) == 0 {
		return v
	}
	var plan map[string]any
	perr := json.Unmarshal(planJSON, &plan)
	// Terraform leaves out what a plan has nothing in: a rule over it
	// reads an empty list (or map), not a missing key.
	for key, empty := range map[string]any{"resource_changes": []any{}, "resource_drift": []any{}, "output_changes": map[string]any{}} {
		if _, ok := plan[key]; perr == nil && !ok {
			plan[key] = empty
		}
	}
	vars := map[string]any{"plan": plan, "summary": summaryVars(summary), "object": objectVars(obj)}
	for _, r := range rules {
		matched, err := perr == nil, perr
		if err == nil {
			matched, err = eval(ctx, r.Expression, vars)
		}
		msg := r.Message
		if err != nil {
			matched = r.Action != infrav1.PlanActionAllow
			msg = r.Message + " (the rule could not be evaluated; the runner's log says why)"
			if failed != nil {
				failed(r, err)
			}
		}
		if matched && rank[r.Action] > rank[v.Action] {
			v.Action, v.Policy, v.Rule, v.Message = r.Action, r.Policy, r.Name, msg
		}
	}
	return v
}

func eval(ctx context.Context, expr string, vars map[string]any) (bool, error) {
	prg, err := Compile(expr)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, evalTimeout)
	defer cancel()
	out, _, err := prg.ContextEval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, errors.New("the expression is not a bool")
	}
	return b, nil
}

func summaryVars(s Summary) map[string]any {
	return map[string]any{
		"add": int64(s.Add), "change": int64(s.Change), "destroy": int64(s.Destroy), "replace": int64(s.Replace),
		"forget": int64(s.Forget), "import": int64(s.Import), "protected": orEmpty(s.Protected),
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func objectVars(o Object) map[string]any {
	if o.Labels == nil {
		o.Labels = map[string]string{}
	}
	return map[string]any{
		"kind": o.Kind, "namespace": o.Namespace, "name": o.Name, "labels": o.Labels,
		"catalogEntry": o.CatalogEntry, "catalogVersion": o.CatalogVersion,
	}
}
