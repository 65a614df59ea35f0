// Package catalog is what the module catalog knows of a module's code: its
// variables and outputs, read from the configuration without running
// anything (Inspect), and the check of an object's variables against them
// (CheckVariables).
package catalog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	ctyjson "github.com/zclconf/go-cty/cty/json"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// Bounds of what is recorded in status: a module's own text, kept short.
const (
	maxDescription = 1024
	maxTypeText    = 1024
	maxDefault     = 4096
	maxDeclared    = 512
)

var fileSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "variable", LabelNames: []string{"name"}},
	{Type: "output", LabelNames: []string{"name"}},
}}

var variableSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "type"}, {Name: "default"}, {Name: "description"}, {Name: "sensitive"},
}}

var outputSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{
	{Name: "description"}, {Name: "sensitive"},
}}

// Inspect reads the variables and outputs the root module in dir declares
// (its *.tf and *.tf.json files; override files last, as terraform merges
// them). Nothing is evaluated but literals: a default or description that
// is an expression is an error, as terraform itself refuses one.
func Inspect(dir string) ([]infrav1.ModuleVariable, []infrav1.ModuleOutput, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files, overrides []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".tf") || strings.HasSuffix(n, ".tf.json")) {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(n, ".json"), ".tf")
		if base == "override" || strings.HasSuffix(base, "_override") {
			overrides = append(overrides, n)
		} else {
			files = append(files, n)
		}
	}
	vars, outs := map[string]infrav1.ModuleVariable{}, map[string]infrav1.ModuleOutput{}
	parser := hclparse.NewParser()
	for _, n := range append(files, overrides...) {
		path := filepath.Join(dir, n)
		var f *hcl.File
		var diags hcl.Diagnostics
		if strings.HasSuffix(n, ".json") {
			f, diags = parser.ParseJSONFile(path)
		} else {
			f, diags = parser.ParseHCLFile(path)
		}
		if diags.HasErrors() {
			return nil, nil, fmt.Errorf("%s: %s", n, diags.Error())
		}
		content, _, diags := f.Body.PartialContent(fileSchema)
		if diags.HasErrors() {
			return nil, nil, fmt.Errorf("%s: %s", n, diags.Error())
		}
		for _, b := range content.Blocks {
			switch b.Type {
			case "variable":
				v, err := variable(b, f.Bytes)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: variable %q: %w", n, b.Labels[0], err)
				}
				vars[v.Name] = v
			case "output":
				o, err := output(b)
				if err != nil {
					return nil, nil, fmt.Errorf("%s: output %q: %w", n, b.Labels[0], err)
				}
				outs[o.Name] = o
			}
		}
	}
	if len(vars) > maxDeclared || len(outs) > maxDeclared {
		return nil, nil, fmt.Errorf("the module declares %d variables and %d outputs: the catalog records at most %d of each", len(vars), len(outs), maxDeclared)
	}
	vs := mapsValues(vars)
	sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
	ol := mapsValues(outs)
	sort.Slice(ol, func(i, j int) bool { return ol[i].Name < ol[j].Name })
	return vs, ol, nil
}

func mapsValues[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func variable(b *hcl.Block, src []byte) (infrav1.ModuleVariable, error) {
	v := infrav1.ModuleVariable{Name: b.Labels[0], Required: true}
	content, _, diags := b.Body.PartialContent(variableSchema)
	if diags.HasErrors() {
		return v, diags
	}
	ty := cty.DynamicPseudoType
	var defaults *typeexpr.Defaults
	if a, ok := content.Attributes["type"]; ok {
		if ty, defaults, diags = typeexpr.TypeConstraintWithDefaults(a.Expr); diags.HasErrors() {
			return v, diags
		}
		v.Type = typeText(a.Expr, src, ty)
	}
	if a, ok := content.Attributes["description"]; ok {
		s, err := literalString(a)
		if err != nil {
			return v, err
		}
		v.Description = truncate(PlainText(s), maxDescription)
	}
	if a, ok := content.Attributes["sensitive"]; ok {
		val, diags := a.Expr.Value(nil)
		if diags.HasErrors() || val.Type() != cty.Bool || val.IsNull() {
			return v, fmt.Errorf("sensitive must be true or false")
		}
		v.Sensitive = val.True()
	}
	if a, ok := content.Attributes["default"]; ok {
		v.Required = false
		val, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			return v, diags
		}
		if !val.IsNull() {
			if defaults != nil {
				val = defaults.Apply(val)
			}
			if _, err := convert.Convert(val, ty); err != nil {
				return v, fmt.Errorf("the default is not of the type %s: %w", v.Type, err)
			}
		}
		raw, err := ctyjson.Marshal(val, cty.DynamicPseudoType)
		if err != nil {
			return v, err
		}
		// Marshalled with its type beside it: keep the value only.
		var wrapped struct{ Value json.RawMessage }
		if err := json.Unmarshal(raw, &wrapped); err != nil {
			return v, err
		}
		if wrapped.Value == nil {
			wrapped.Value = json.RawMessage("null")
		}
		// A sensitive variable's default is a secret of the module's: the
		// status, readable by every tenant, says only that there is one.
		if len(wrapped.Value) <= maxDefault && !v.Sensitive {
			// Shown, never used (the module's own default applies): its
			// strings' runes a terminal acts on go, as in descriptions.
			v.Default = &runtime.RawExtension{Raw: []byte(PlainText(string(wrapped.Value)))}
		}
	}
	return v, nil
}

// typeText is the type constraint as written, or as cty prints it when
// the text is too long or not at hand (JSON).
func typeText(expr hcl.Expression, src []byte, ty cty.Type) string {
	r := expr.Range()
	if r.Start.Byte < r.End.Byte && r.End.Byte <= len(src) && r.End.Byte-r.Start.Byte <= maxTypeText {
		s := string(src[r.Start.Byte:r.End.Byte])
		if !strings.HasPrefix(strings.TrimSpace(s), `"`) && PlainText(s) == s {
			return strings.Join(strings.Fields(s), " ")
		}
	}
	return truncate(typeexpr.TypeString(ty), maxTypeText)
}

func output(b *hcl.Block) (infrav1.ModuleOutput, error) {
	o := infrav1.ModuleOutput{Name: b.Labels[0]}
	content, _, diags := b.Body.PartialContent(outputSchema)
	if diags.HasErrors() {
		return o, diags
	}
	if a, ok := content.Attributes["description"]; ok {
		s, err := literalString(a)
		if err != nil {
			return o, err
		}
		o.Description = truncate(PlainText(s), maxDescription)
	}
	if a, ok := content.Attributes["sensitive"]; ok {
		if val, diags := a.Expr.Value(nil); !diags.HasErrors() && val.Type() == cty.Bool && !val.IsNull() {
			o.Sensitive = val.True()
		}
	}
	return o, nil
}

func literalString(a *hcl.Attribute) (string, error) {
	val, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return "", diags
	}
	if val.IsNull() || val.Type() != cty.String {
		return "", fmt.Errorf("%s must be a string", a.Name)
	}
	return val.AsString(), nil
}

// PlainText is s with what a terminal would act on (control characters
// but newline and tab, bidirectional overrides) replaced by U+FFFD:
// descriptions reach people's terminals through the webhook's refusals
// and kubectl captf modules.
func PlainText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// CheckValue says why the JSON value raw is not of the variable's type, or
// "". A variable of no type takes any value.
func CheckValue(v infrav1.ModuleVariable, raw []byte) string {
	if v.Type == "" {
		return ""
	}
	ty, err := ParseType(v.Type)
	if err != nil {
		return "" // recorded by the catalog, so parsed once; a type it cannot read again is not the writer's fault
	}
	implied, err := ctyjson.ImpliedType(raw)
	if err != nil {
		return "not JSON: " + err.Error()
	}
	val, err := ctyjson.Unmarshal(raw, implied)
	if err != nil {
		return "not JSON: " + err.Error()
	}
	if _, err := convert.Convert(val, ty); err != nil {
		return fmt.Sprintf("is not a %s: %s", v.Type, convertMessage(err))
	}
	return ""
}

func convertMessage(err error) string {
	if pe, ok := err.(cty.PathError); ok && len(pe.Path) > 0 {
		return fmt.Sprintf("at %s: %s", pathString(pe.Path), pe.Error())
	}
	return err.Error()
}

func pathString(p cty.Path) string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case cty.GetAttrStep:
			b.WriteString("." + s.Name)
		case cty.IndexStep:
			if s.Key.Type() == cty.String {
				fmt.Fprintf(&b, "[%q]", s.Key.AsString())
			} else if s.Key.Type() == cty.Number {
				fmt.Fprintf(&b, "[%s]", s.Key.AsBigFloat().Text('f', -1))
			}
		}
	}
	return strings.TrimPrefix(b.String(), ".")
}

// ParseType reads a type constraint as Inspect recorded it.
func ParseType(s string) (cty.Type, error) {
	expr, diags := hclsyntax.ParseExpression([]byte(s), "type", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	ty, _, diags := typeexpr.TypeConstraintWithDefaults(expr)
	if diags.HasErrors() {
		return cty.NilType, diags
	}
	return ty, nil
}

// Declared tells whether name is one of vars.
func Declared(vars []infrav1.ModuleVariable, name string) bool {
	return slices.ContainsFunc(vars, func(v infrav1.ModuleVariable) bool { return v.Name == name })
}
