package run

import (
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
	p, err := SummarizePlan(plan, []string{"db.*"})
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
	if q, _ := SummarizePlan(plan, nil); q.Hash != p.Hash || q.Protected != nil {
		t.Errorf("without patterns: hash %s (with: %s), protected %v", q.Hash, p.Hash, q.Protected)
	}
}
