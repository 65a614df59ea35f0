package runner

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRedactPlanJSON: what a record keeps of a plan's JSON holds no value
// terraform marks sensitive and no sensitive input, wherever it stood, and
// still what tools read (addresses, actions, other values).
func TestRedactPlanJSON(t *testing.T) {
	red, err := NewRedactor([]byte(`{"token":"input-secret-1"}`), []byte(`["token"]`))
	if err != nil {
		t.Fatal(err)
	}
	raw := `{
	  "format_version": "1.2", "terraform_version": "1.9.0",
	  "variables": {"token": {"value": "input-secret-1"}},
	  "prior_state": {"values": {"root_module": {"resources": [{"values": {"password": "marked-secret-0"}}]}}},
	  "configuration": {"root_module": {"variables": {"token": {"default": "input-secret-1"}}}},
	  "resource_changes": [{"address": "db.main", "change": {"actions": ["delete", "create"],
	    "before": {"password": "marked-secret-0", "name": "db"}, "before_sensitive": {"password": true},
	    "after": {"password": "marked-secret-2", "name": "db", "tags": ["a", "marked-secret-3"], "note": "has input-secret-1 in it"},
	    "after_sensitive": {"password": true, "tags": [false, true]}, "generated_config": "password = \"marked-secret-4\""}}],
	  "output_changes": {"admin": {"actions": ["update"], "before": "marked-secret-5", "after": "marked-secret-6", "before_sensitive": true, "after_sensitive": true}},
	  "planned_values": {"outputs": {"admin": {"sensitive": true, "value": "marked-secret-6"}},
	    "root_module": {"child_modules": [{"resources": [{"address": "module.m.db.x", "values": {"password": "marked-secret-7", "size": 10}, "sensitive_values": {"password": true}}]}]}}
	}`
	out, err := (&Runner{redact: red}).redactPlanJSON([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"input-secret-1", "marked-secret-0", "marked-secret-2", "marked-secret-3", "marked-secret-4", "marked-secret-5", "marked-secret-6", "marked-secret-7"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("the kept plan shows %s: %s", secret, out)
		}
	}
	var kept struct {
		ResourceChanges []struct {
			Address string
			Change  struct {
				Actions []string
				After   map[string]any
			}
		} `json:"resource_changes"`
		PlannedValues map[string]any `json:"planned_values"`
		PriorState    any            `json:"prior_state"`
	}
	if err := json.Unmarshal(out, &kept); err != nil {
		t.Fatalf("the kept plan is no JSON: %v", err)
	}
	if len(kept.ResourceChanges) != 1 || kept.ResourceChanges[0].Address != "db.main" || len(kept.ResourceChanges[0].Change.Actions) != 2 ||
		kept.ResourceChanges[0].Change.After["name"] != "db" || kept.ResourceChanges[0].Change.After["password"] != Redacted ||
		kept.ResourceChanges[0].Change.After["note"] != "has "+Redacted+" in it" {
		t.Errorf("the kept resource changes: %+v", kept.ResourceChanges)
	}
	if kept.PlannedValues == nil || kept.PriorState != nil || strings.Contains(string(out), `"size":10`) == false {
		t.Errorf("planned values %v kept, prior state %v dropped: %s", kept.PlannedValues, kept.PriorState, out)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, w := range []string{"abc", "defgh", "ijk"} {
		_, _ = b.Write([]byte(w))
	}
	if got, cut := b.tail(); string(got) != "defghijk" || !cut {
		t.Errorf("tail %q (cut %v), want defghijk, cut", got, cut)
	}
}
