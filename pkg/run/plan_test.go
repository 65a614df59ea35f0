package run

import (
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
)

func change(addr string, after any, actions ...tfjson.Action) *tfjson.ResourceChange {
	return &tfjson.ResourceChange{Address: addr, Change: &tfjson.Change{Actions: actions, After: after}}
}

func TestSummarizePlan(t *testing.T) {
	create, del, update, noop := tfjson.ActionCreate, tfjson.ActionDelete, tfjson.ActionUpdate, tfjson.ActionNoop
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		change("a.x", map[string]any{"n": 1}, create),
		change("b.y", nil, del, create),
		change("c.z", map[string]any{"n": 2}, update),
		change("d.w", nil, del),
		change("e.v", nil, noop),
	}}
	p, err := SummarizePlan(plan, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Summary
	if s.Add != 1 || s.Replace != 1 || s.Change != 1 || s.Destroy != 1 || len(s.Resources) != 4 {
		t.Fatalf("summary = %+v, want 1 of each and 4 addresses", s)
	}
	if !p.Destructive() || !p.HasChanges() {
		t.Error("a plan with a delete and a replace is not destructive")
	}

	reordered := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{plan.ResourceChanges[4], plan.ResourceChanges[3], plan.ResourceChanges[2], plan.ResourceChanges[1], plan.ResourceChanges[0]}}
	if q, _ := SummarizePlan(reordered, nil, ""); q.Hash != p.Hash {
		t.Error("the order of resource changes changed the hash")
	}
	other := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("a.x", map[string]any{"n": 9}, create)}}
	if q, _ := SummarizePlan(other, nil, ""); q.Hash == p.Hash {
		t.Error("different planned values share a hash")
	}
	// Issue 30, item 4: "destroy X" of another X is another plan.
	deleteOf := func(id string) *tfjson.Plan {
		return &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{{Address: "d.w",
			Change: &tfjson.Change{Actions: tfjson.Actions{del}, Before: map[string]any{"id": id}}}}}
	}
	first, _ := SummarizePlan(deleteOf("i-1"), nil, "")
	second, _ := SummarizePlan(deleteOf("i-2"), nil, "")
	if first.Hash == second.Hash {
		t.Error("deletes of two different objects at one address share a hash")
	}
	empty, _ := SummarizePlan(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("e.v", nil, noop)}}, nil, "")
	if empty.HasChanges() || empty.Destructive() {
		t.Errorf("a no-op plan reports changes: %+v", empty.Summary)
	}
}

func TestSummarizePlanOutputChanges(t *testing.T) {
	p := &tfjson.Plan{OutputChanges: map[string]*tfjson.Change{
		"motd":     {Actions: tfjson.Actions{tfjson.ActionUpdate}},
		"endpoint": {Actions: tfjson.Actions{tfjson.ActionNoop}},
	}}
	got, err := SummarizePlan(p, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OutputChanges) != 1 || got.OutputChanges[0] != "motd" || got.HasChanges() {
		t.Errorf("outputs %v, changes %v: want motd only, and no resource changes", got.OutputChanges, got.HasChanges())
	}
	empty, _ := SummarizePlan(&tfjson.Plan{}, nil, "")
	if got.Hash == empty.Hash {
		t.Errorf("an output change left the plan hash of an empty plan: an approval of no change would apply it")
	}
}

// Two plans that change the same resources alike, made by different code
// (a provisioner's command, a data source), hash apart: an approval of one
// module's plan never applies another's.
func TestSummarizePlanCoversTheModule(t *testing.T) {
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("terraform_data.x", nil, tfjson.ActionCreate)}}
	a, _ := SummarizePlan(plan, nil, "sha256:aaaa")
	b, _ := SummarizePlan(plan, nil, "sha256:bbbb")
	again, _ := SummarizePlan(plan, nil, "sha256:aaaa")
	if a.Hash == b.Hash || a.Hash != again.Hash {
		t.Errorf("hashes %s (module a), %s (module b), %s (module a again): want the module in the hash", a.Hash, b.Hash, again.Hash)
	}
}

// A plan that only forgets or imports resources changes what CAPTF manages:
// it has changes, its hash differs from an empty plan's, a forget is
// destructive.
func TestSummarizePlanForgetsAndImports(t *testing.T) {
	empty, _ := SummarizePlan(&tfjson.Plan{}, nil, "")
	forgetting := change("terraform_data.instance", nil, tfjson.ActionForget)
	importing := change("terraform_data.found", map[string]any{"id": "x"}, tfjson.ActionNoop)
	importing.Change.Importing = &tfjson.Importing{ID: "x"}
	tests := map[string]struct {
		rc              *tfjson.ResourceChange
		forget, imports int32
		destructive     bool
	}{
		"removed, destroy = false": {rc: forgetting, forget: 1, destructive: true},
		"import block":             {rc: importing, imports: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := SummarizePlan(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{tc.rc}}, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if p.Summary.Forget != tc.forget || p.Summary.Import != tc.imports || len(p.Summary.Resources) != 1 {
				t.Errorf("summary = %+v", p.Summary)
			}
			if !p.HasChanges() || p.Destructive() != tc.destructive || p.Hash == empty.Hash {
				t.Errorf("changes %v, destructive %v (want %v), hash %s (empty plan's %s)", p.HasChanges(), p.Destructive(), tc.destructive, p.Hash, empty.Hash)
			}
		})
	}
}

// TestPlanHashIsStable: the hash of a plan does not change across CAPTF
// versions: an approval names it, and an upgrade between the approval and
// the apply must not void it. (The value is what earlier versions compute.)
func TestPlanHashIsStable(t *testing.T) {
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		{Address: "b.y", Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionDelete, tfjson.ActionCreate}, Before: map[string]any{"id": "i-1", "zone": "a"}, After: map[string]any{"zone": "b"}, AfterUnknown: map[string]any{"id": true}}},
		{Address: "a.x", Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionCreate}, After: map[string]any{"n": 1}}},
		{Address: "c.z", Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionNoop}, Importing: &tfjson.Importing{ID: "i-9"}}},
	}}
	p, err := SummarizePlan(plan, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash != "4fb212c8ea74ff7d" {
		t.Errorf("hash %s, want 4fb212c8ea74ff7d: approvals given before an upgrade would name another plan", p.Hash)
	}
}
