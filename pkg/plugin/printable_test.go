package plugin

import (
	"bytes"
	"testing"
)

// TestPrintable (issue 50, item 5): what the plugin prints reaches the
// terminal without a character the terminal would act on or hide, however
// the bytes are split between writes.
func TestPrintable(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"text, newlines and tabs", "plan: é 日本\n\tok\n", "plan: é 日本\n\tok\n"},
		{"an escape sequence", "\x1b[2J\x1b[Hfake plan", `\x1b[2J\x1b[Hfake plan`},
		{"a carriage return", "real\rfake", `real\x0dfake`},
		{"a C1 control as UTF-8", "a\u009b2Jb", `a\x9b2Jb`},
		{"a lone C1 byte", "a\x9b2Jb", `a\x9b2Jb`},
		{"a bidi override", "destroy \u202enoitcudorp", `destroy \u202enoitcudorp`},
		{"bidi isolates", "\u2066x\u2069", `\u2066x\u2069`},
		{"zero-width characters", "de\u200bstroy\u200d\ufeff", `de\u200bstroy\u200d\ufeff`},
		{"line and paragraph separators", "a\u2028b\u2029", `a\u2028b\u2029`},
		{"a bell and a backspace", "a\a\bb", `a\x07\x08b`},
		{"a character cut short at the end", "ok\xe2\x80", `ok\xe2\x80`},
		{"a tag character, beyond U+FFFF", "a\U000e0001b", `a\udb40\udc01b`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for split := 0; split <= len(tc.in); split++ {
				var out bytes.Buffer
				p := newPrintable(&out)
				if n, err := p.Write([]byte(tc.in[:split])); err != nil || n != split {
					t.Fatalf("Write = %d, %v", n, err)
				}
				if n, err := p.Write([]byte(tc.in[split:])); err != nil || n != len(tc.in)-split {
					t.Fatalf("Write = %d, %v", n, err)
				}
				if err := p.Flush(); err != nil {
					t.Fatal(err)
				}
				if out.String() != tc.want {
					t.Errorf("split at %d: %q, want %q", split, out.String(), tc.want)
				}
			}
		})
	}
}
