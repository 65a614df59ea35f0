package runner

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedactor(t *testing.T) {
	tfvars := []byte(`{"db": "hunter2-secret", "cfg": {"k": "nested-secret", "n": 1}, "pub": "visible", "pin": "123", "multi": "line one\nline two"}`)
	r, err := NewRedactor(tfvars, []byte(`["db", "cfg", "pin", "multi", "absent"]`))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct{ in, want string }{
		"a plain value":             {`password = "hunter2-secret"`, `password = "` + Redacted + `"`},
		"a leaf of a JSON value":    {`token: nested-secret.`, `token: ` + Redacted + `.`},
		"the JSON value itself":     {`cfg = {"k": "nested-secret", "n": 1}`, `cfg = ` + Redacted},
		"escaped as terraform does": {`"line one\nline two"`, `"` + Redacted + `"`},
		"not sensitive":             {`name = "visible"`, `name = "visible"`},
		"too short to redact":       {`pin 123`, `pin 123`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := r.String(tc.in); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	// A value split across writes of one line is still caught.
	var out bytes.Buffer
	w := r.Writer(&out)
	for _, part := range []string{"Error: bad password hun", "ter2-sec", "ret\nnext line\ntail hunter2-", "secret"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if strings.Contains(out.String(), "hunter2") || !strings.Contains(out.String(), "next line\ntail "+Redacted) {
		t.Errorf("log = %q", out.String())
	}
	if !r.Contains(`{"url":"postgres://u:hunter2-secret@db"}`) || r.Contains(`"visible"`) {
		t.Error("Contains")
	}
	var none *Redactor
	if none.String("x") != "x" {
		t.Error("a nil Redactor changes text")
	}
}
