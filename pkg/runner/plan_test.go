package runner

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
	p, err := SummarizePlan(plan)
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
	if q, _ := SummarizePlan(reordered); q.Hash != p.Hash {
		t.Error("the order of resource changes changed the hash")
	}
	other := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("a.x", map[string]any{"n": 9}, create)}}
	if q, _ := SummarizePlan(other); q.Hash == p.Hash {
		t.Error("different planned values share a hash")
	}
	empty, _ := SummarizePlan(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("e.v", nil, noop)}})
	if empty.HasChanges() || empty.Destructive() {
		t.Errorf("a no-op plan reports changes: %+v", empty.Summary)
	}
}
