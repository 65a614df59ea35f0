package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

const moduleTF = `
variable "region" {
  type        = string
  description = "The cloud region of the network."
}
variable "cidrs" {
  type    = list(string)
  default = ["10.0.0.0/16"]
}
variable "sizes" {
  type = map(object({ cpu = number, disk = optional(number, 10) }))
  default = {}
}
variable "captf_name" { type = string }
variable "anything" {
  default = null
}
variable "password" {
  type      = string
  default   = "hunter22"
  sensitive = true
}
output "vpc_id" {
  value       = "x"
  description = "The network's ID."
}
output "password" {
  value     = "y"
  sensitive = true
}
`

const overrideTF = `
variable "cidrs" {
  type    = list(string)
  default = ["10.1.0.0/16"]
}
`

func inspect(t *testing.T) ([]infrav1.ModuleVariable, []infrav1.ModuleOutput) {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"main.tf": moduleTF, "cidr_override.tf": overrideTF, "README.md": "variable \"no\" {}"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vars, outs, err := Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	return vars, outs
}

func TestInspect(t *testing.T) {
	vars, outs := inspect(t)
	got := map[string]infrav1.ModuleVariable{}
	for _, v := range vars {
		got[v.Name] = v
	}
	if len(vars) != 6 {
		t.Fatalf("variables %+v, want 6", vars)
	}
	if p := got["password"]; p.Required || !p.Sensitive || p.Default != nil {
		t.Errorf("password: %+v: a sensitive default is not recorded", p)
	}
	if r := got["region"]; !r.Required || r.Type != "string" || r.Description != "The cloud region of the network." {
		t.Errorf("region: %+v", r)
	}
	if c := got["cidrs"]; c.Required || c.Type != "list(string)" || string(c.Default.Raw) != `["10.1.0.0/16"]` {
		t.Errorf("cidrs (the override wins): %+v %s", c, c.Default.Raw)
	}
	if s := got["sizes"]; s.Type != "map(object({ cpu = number, disk = optional(number, 10) }))" {
		t.Errorf("sizes type %q", s.Type)
	}
	if a := got["anything"]; a.Required || a.Type != "" || string(a.Default.Raw) != "null" {
		t.Errorf("anything: %+v", a)
	}
	if len(outs) != 2 || outs[0].Name != "password" || !outs[0].Sensitive || outs[1].Description != "The network's ID." {
		t.Errorf("outputs %+v", outs)
	}
}

func TestInspectRefusesExpressions(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(`variable "a" { default = var.b }`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Inspect(dir); err == nil || !strings.Contains(err.Error(), `variable "a"`) {
		t.Fatalf("Inspect: %v, want an error naming the variable", err)
	}
}

func TestCheckVariables(t *testing.T) {
	vars, _ := inspect(t)
	val := func(name, raw string) infrav1.Variable {
		return infrav1.Variable{Name: name, Value: &runtime.RawExtension{Raw: []byte(raw)}}
	}
	from := infrav1.Variable{Name: "region", ValueFrom: &infrav1.VariableSource{}}
	cases := []struct {
		name string
		set  []infrav1.Variable
		want []string // each in the errors; none: no error
	}{
		{"all good", []infrav1.Variable{val("region", `"eu-1"`), val("cidrs", `["10.2.0.0/16"]`)}, nil},
		{"a value from a Secret is not read", []infrav1.Variable{from}, nil},
		{"a number where a string is asked converts, as terraform does", []infrav1.Variable{val("region", `5`)}, nil},
		{"optional attributes may be left out", []infrav1.Variable{val("region", `"a"`), val("sizes", `{"a":{"cpu":2}}`)}, nil},
		{"missing required", nil, []string{`spec.variables: Required value: vpc v1 requires variable region (string): The cloud region of the network.`}},
		{"captf inputs are CAPTF's", []infrav1.Variable{val("region", `"a"`)}, nil},
		{"unknown name", []infrav1.Variable{val("region", `"a"`), val("regoin", `"a"`)},
			[]string{`spec.variables[1].name: Not found: "regoin: vpc v1 declares no such variable (it declares anything, cidrs, password, region, sizes)"`}},
		{"wrong type", []infrav1.Variable{val("region", `["a"]`)},
			[]string{`spec.variables[0].value: Invalid value: "[\"a\"]": region is not a string`, `The cloud region of the network.`}},
		{"wrong type deep inside", []infrav1.Variable{val("region", `"a"`), val("sizes", `{"a":{"cpu":"many"}}`)},
			[]string{`sizes is not a map(object({ cpu = number, disk = optional(number, 10) })): at ["a"].cpu: a number is required`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := CheckVariables(vars, tc.set, "vpc v1", field.NewPath("spec", "variables"))
			msg := errs.ToAggregate()
			if len(tc.want) == 0 {
				if msg != nil {
					t.Fatalf("errors: %v", msg)
				}
				return
			}
			if msg == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg.Error(), w) {
					t.Errorf("errors:\n%v\nwant %q", msg, w)
				}
			}
		})
	}
}

// TestInspectKeepsTerminalsSafe: a module's descriptions and types reach
// people's terminals (the webhook's refusals, kubectl captf modules); what
// a terminal acts on is not recorded.
func TestInspectKeepsTerminalsSafe(t *testing.T) {
	for name, tc := range map[string]struct {
		module          string
		wantDescription string
		wantType        string
		wantDefault     string
	}{
		"a default's bidirectional override": {
			module:      `variable "a" { default = "x` + "\u202e" + `y" }`,
			wantDefault: "\"x\uFFFDy\"",
		},
		"an escape sequence written as \\u": {
			module:          `variable "a" { description = "see \u001b]8;;https://evil.example\u0007here\u001b]8;;\u0007" }`,
			wantDescription: "see \uFFFD]8;;https://evil.example\uFFFDhere\uFFFD]8;;\uFFFD",
		},
		"a bidirectional override": {
			module:          `variable "a" { description = "admin` + "\u202e" + `resu" }`,
			wantDescription: "admin\uFFFDresu",
		},
		"a heredoc keeps its lines": {
			module:          "variable \"a\" {\n  description = <<EOT\nfirst\n\tsecond\nEOT\n}",
			wantDescription: "first\n\tsecond\n",
		},
		"a raw escape in a type's comment": {
			module:   "variable \"a\" { type = list(/* \x1b[2J */ string) }",
			wantType: "list(string)",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tc.module), 0o644); err != nil {
				t.Fatal(err)
			}
			vars, _, err := Inspect(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantDefault != "" && (len(vars) != 1 || vars[0].Default == nil || string(vars[0].Default.Raw) != tc.wantDefault) {
				t.Errorf("recorded %+v, want default %s", vars, tc.wantDefault)
				return
			}
			if len(vars) != 1 || vars[0].Description != tc.wantDescription || (tc.wantType != "" && vars[0].Type != tc.wantType) {
				t.Errorf("recorded %+v, want description %q type %q", vars, tc.wantDescription, tc.wantType)
			}
		})
	}
}
