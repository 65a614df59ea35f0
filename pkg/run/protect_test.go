package run

import (
	"slices"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
)

func TestProtects(t *testing.T) {
	cases := []struct {
		pattern, address string
		want             bool
	}{
		{"aws_db_instance.main", "aws_db_instance.main", true},
		{"aws_db_instance.main", "aws_db_instance.main[0]", true},
		{"aws_db_instance.main", `aws_db_instance.main["a"]`, true},
		{"aws_db_instance.main", "aws_db_instance.main2", false},
		{"aws_db_instance.main", "module.x.aws_db_instance.main", false},
		{"module.db", "module.db.aws_db_instance.main", true},
		{"module.db", `module.db["eu"].aws_db_instance.main`, true},
		{"module.db", "module.dbx.aws_db_instance.main", false},
		{"aws_db_instance.*", "aws_db_instance.main[2]", true},
		{"aws_db_instance.*", "aws_instance.main", false},
		{"*.main", "aws_db_instance.main", true},
		{"*x", "x.y", true},
		{"*.main", "aws_db_instance.mains", false},
		{"*", "anything.at_all", true},
		{`terraform_data.instance[1]`, `terraform_data.instance[1]`, true},
		{`terraform_data.instance[1]`, `terraform_data.instance[0]`, false},
		{"a*b*c", "a.x.b.y.c", true},
		{"a*b*c", "a.x.c.y.b", false},
	}
	for _, tc := range cases {
		if got := Protects(tc.pattern, tc.address); got != tc.want {
			t.Errorf("Protects(%q, %q) = %v, want %v", tc.pattern, tc.address, got, tc.want)
		}
	}
}

func TestSummarizePlanProtected(t *testing.T) {
	create, del, update, forget := tfjson.ActionCreate, tfjson.ActionDelete, tfjson.ActionUpdate, tfjson.ActionForget
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		change("db.main", nil, del, create),        // replaced
		change("db.replica", nil, update),          // changed in place: allowed
		change("db.old", nil, del),                 // destroyed
		change("db.kept", nil, forget),             // forgotten
		change("net.main", nil, del),               // not covered
		change("db.new", map[string]any{}, create), // created: allowed
	}}
	p, err := SummarizePlan(plan, []string{"db.*"}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"db.main", "db.old", "db.kept"}
	if len(p.Protected) != len(want) {
		t.Fatalf("protected %v, want %v", p.Protected, want)
	}
	for i := range want {
		if p.Protected[i] != want[i] {
			t.Fatalf("protected %v, want %v", p.Protected, want)
		}
	}
	if q, _ := SummarizePlan(plan, nil, ""); q.Hash != p.Hash || q.Protected != nil {
		t.Errorf("without patterns: hash %s (with: %s), protected %v", q.Hash, p.Hash, q.Protected)
	}
}

// TestProtectedMovesAndForgets: a moved block takes nothing out of a
// pattern, and a replace that forgets the old object is a protected change.
func TestProtectedMovesAndForgets(t *testing.T) {
	create, del, forget, noop := tfjson.ActionCreate, tfjson.ActionDelete, tfjson.ActionForget, tfjson.ActionNoop
	moved := func(from, to string, actions ...tfjson.Action) *tfjson.ResourceChange {
		rc := change(to, nil, actions...)
		rc.PreviousAddress = from
		return rc
	}
	tests := map[string]struct {
		rc   *tfjson.ResourceChange
		want []string
	}{
		"moved out of its pattern":           {rc: moved("db.main", "db2.main", noop), want: []string{"db.main"}},
		"moved out and replaced":             {rc: moved("db.main", "db2.main", del, create), want: []string{"db.main"}},
		"moved within its pattern":           {rc: moved("db.main", "db.primary", noop)},
		"moved within and replaced":          {rc: moved("db.main", "db.primary", del, create), want: []string{"db.primary"}},
		"moved into a pattern":               {rc: moved("x.main", "db.main", noop)},
		"replaced, the old object forgotten": {rc: change("db.main", nil, create, forget), want: []string{"db.main"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := SummarizePlan(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{tc.rc}}, []string{"db.*"}, "")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Protected, tc.want) {
				t.Errorf("protected %v, want %v", p.Protected, tc.want)
			}
		})
	}
	// The forget of a replace is gated like any forget.
	p, _ := SummarizePlan(&tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{change("x.y", nil, create, forget)}}, nil, "")
	if p.Summary.Forget != 1 || !p.Destructive() {
		t.Errorf("a create-then-forget: summary %+v, destructive %v; want a forget", p.Summary, p.Destructive())
	}
}
