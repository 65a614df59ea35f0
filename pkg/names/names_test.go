package names

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreValid(t *testing.T) {
	tests := map[string]Object{
		"short":      {Kind: "tfc", Name: "prod"},
		"long":       {Kind: "tfmp", Name: strings.Repeat("a", 253)},
		"long, dots": {Kind: "tfm", Name: "worker." + strings.Repeat("b", 100) + ".x"},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			job := o.Job("destroy", "0123456789abcdef", 12)
			for _, n := range []string{job, o.Result(job), o.State(), o.StateChunk(17000000000, 99), o.Backup("20261129-220000"),
				o.BackupChunk(o.Backup("20261129-220000"), 3), o.DurableInputs(), o.Lock()} {
				if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
					t.Errorf("%q: %v", n, errs)
				}
			}
			if errs := validation.IsDNS1123Label(job); len(errs) > 0 {
				t.Errorf("job name %q is not a label value: %v", job, errs)
			}
			if errs := validation.IsValidLabelValue(LabelValue(o.Name)); len(errs) > 0 {
				t.Errorf("label value %q: %v", LabelValue(o.Name), errs)
			}
		})
	}
}

func TestLongNamesDoNotCollide(t *testing.T) {
	a := Object{Kind: "tfc", Name: strings.Repeat("x", 40) + "a"}
	b := Object{Kind: "tfc", Name: strings.Repeat("x", 40) + "b"}
	if a.Prefix() == b.Prefix() {
		t.Fatalf("%q and %q share the prefix %q", a.Name, b.Name, a.Prefix())
	}
}

func TestDotsDoNotCollide(t *testing.T) {
	a, b := Object{Kind: "tfm", Name: "a.b"}, Object{Kind: "tfm", Name: "a-b"}
	if a.Prefix() == b.Prefix() {
		t.Fatalf("%q and %q share the prefix %q", a.Name, b.Name, a.Prefix())
	}
}
