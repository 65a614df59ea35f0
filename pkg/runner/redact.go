package runner

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
)

// Redacted stands where a sensitive value was.
const Redacted = "(sensitive value)"

// minSecret is the shortest value redacted: a shorter one would blank out
// ordinary words of terraform's output, and is no secret.
const minSecret = 4

// Redactor replaces sensitive values in what is logged or reported.
type Redactor struct {
	replacer *strings.Replacer
}

// NewRedactor takes the sensitive variables' values from tfvars: each
// string, a JSON value's string leaves, and the value as JSON; and the
// values in extra (environment variables from Secrets).
func NewRedactor(tfvars, sensitive []byte, extra ...string) (*Redactor, error) {
	var names []string
	if len(sensitive) > 0 {
		if err := json.Unmarshal(sensitive, &names); err != nil {
			return nil, err
		}
	}
	var vars map[string]json.RawMessage
	if len(names) > 0 {
		if err := json.Unmarshal(tfvars, &vars); err != nil {
			return nil, err
		}
	}
	var secrets []string
	for _, n := range names {
		raw, ok := vars[n]
		if !ok {
			continue
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			continue
		}
		if _, ok := v.(string); !ok {
			secrets = append(secrets, string(raw))
		}
		secrets = appendLeaves(secrets, v)
	}
	secrets = append(secrets, extra...)
	// Each line of a value of several (a PEM key, a cloud-config) too:
	// terraform prints those as an indented heredoc, a line at a time.
	for _, s := range secrets {
		if strings.Contains(s, "\n") {
			for _, line := range strings.Split(s, "\n") {
				secrets = append(secrets, strings.TrimSpace(line))
			}
		}
	}
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return len(s) < minSecret })
	// Longest first: a value that contains another goes whole.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	secrets = slices.Compact(secrets)
	if len(secrets) == 0 {
		return &Redactor{}, nil
	}
	var pairs []string
	for _, s := range secrets {
		pairs = append(pairs, s, Redacted)
		// As terraform prints a string inside HCL or JSON: quotes and
		// newlines escaped.
		if q, _ := json.Marshal(s); string(q[1:len(q)-1]) != s {
			pairs = append(pairs, string(q[1:len(q)-1]), Redacted)
		}
	}
	return &Redactor{replacer: strings.NewReplacer(pairs...)}, nil
}

func appendLeaves(out []string, v any) []string {
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = appendLeaves(out, e)
		}
	case map[string]any:
		for _, e := range v {
			out = appendLeaves(out, e)
		}
	}
	return out
}

// String redacts s.
func (r *Redactor) String(s string) string {
	if r == nil || r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// Contains tells whether s holds a sensitive value.
func (r *Redactor) Contains(s string) bool { return r.String(s) != s }

// Writer redacts what goes through it line by line (a value is never split
// across two writes of one line); Close writes what is left.
func (r *Redactor) Writer(w io.Writer) io.WriteCloser {
	return &redactingWriter{r: r, w: w}
}

type redactingWriter struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf = append(rw.buf, p...)
	if i := bytes.LastIndexByte(rw.buf, '\n'); i >= 0 {
		if _, err := io.WriteString(rw.w, rw.r.String(string(rw.buf[:i+1]))); err != nil {
			return 0, err
		}
		rw.buf = rw.buf[i+1:]
	}
	return len(p), nil
}

func (rw *redactingWriter) Close() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if len(rw.buf) == 0 {
		return nil
	}
	_, err := io.WriteString(rw.w, rw.r.String(string(rw.buf)))
	rw.buf = nil
	return err
}

// containerEnv are set by the image or the container runtime, never by an
// envFrom that matters.
var containerEnv = []string{"PATH", "HOME", "HOSTNAME", "TERM", "PWD", "SHLVL", "USER"}

// SensitiveEnv are the values of environ (os.Environ) that came from
// Secrets: the variables sensitive names, and, for each pattern "P*" of
// sensitive (an envFrom of a Secret, with its prefix), every variable that
// starts with P but those plain names (the pod's own env, which overrides
// envFrom).
func SensitiveEnv(environ, sensitive, plain []string) []string {
	var out []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || slices.Contains(plain, name) || slices.Contains(containerEnv, name) || strings.HasPrefix(name, "KUBERNETES_") {
			continue
		}
		for _, s := range sensitive {
			if prefix, isPattern := strings.CutSuffix(s, "*"); name == s || isPattern && strings.HasPrefix(name, prefix) {
				out = append(out, value)
				break
			}
		}
	}
	return out
}
