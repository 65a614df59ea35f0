package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// TestRedactsMultilineAndEnv (issue 50, item 6): each line of a value of
// several, as terraform prints it in a heredoc; the values of environment
// variables from Secrets; a value amid lines another stream wrote.
func TestRedactsMultilineAndEnv(t *testing.T) {
	key := "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
	tfvars, _ := json.Marshal(map[string]string{"key": key})
	env := SensitiveEnv([]string{"AWS_SECRET_ACCESS_KEY=aws-secret-value", "DB_PASSWORD=db-secret-value", "DB_HOST=db.example.com",
		"REGION=eu-west-1", "PATH=/usr/bin", "HOSTNAME=runner-pod", "KUBERNETES_SERVICE_HOST=10.96.0.1", "TF_VAR_x=other"},
		[]string{"AWS_SECRET_ACCESS_KEY", "DB_*"}, []string{"DB_HOST"})
	if want := []string{"aws-secret-value", "db-secret-value"}; !slices.Equal(env, want) {
		t.Errorf("SensitiveEnv = %q, want %q", env, want)
	}
	r, err := NewRedactor(tfvars, []byte(`["key"]`), env...)
	if err != nil {
		t.Fatal(err)
	}
	heredoc := "      + content = <<-EOT\n            -----BEGIN PRIVATE KEY-----\n            MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n            BKcwggSjAgEAAoIBAQC7\n        EOT\n"
	for _, leak := range []string{"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "BKcwggSjAgEAAoIBAQC7"} {
		if strings.Contains(r.String(heredoc), leak) {
			t.Errorf("a heredoc line leaks %q: %q", leak, r.String(heredoc))
		}
	}
	if got := r.String("export AWS=aws-secret-value DB=db-secret-value host=db.example.com"); got != "export AWS="+Redacted+" DB="+Redacted+" host=db.example.com" {
		t.Errorf("env values: %q", got)
	}
	// stdout and stderr, each its own line buffer over one log.
	var out bytes.Buffer
	log := &lockedWriter{w: &out}
	stdout, stderr := r.Writer(log), r.Writer(log)
	for _, w := range []struct {
		w io.Writer
		s string
	}{{stdout, "token aws-sec"}, {stderr, "Warning: something\n"}, {stdout, "ret-value\n"}} {
		if _, err := w.w.Write([]byte(w.s)); err != nil {
			t.Fatal(err)
		}
	}
	stdout.Close()
	stderr.Close()
	if strings.Contains(out.String(), "aws-secret-value") || !strings.Contains(out.String(), "token "+Redacted) {
		t.Errorf("interleaved streams: %q", out.String())
	}
}

// TestExecRedactsEachStream: terraform's stdout and stderr reach the log
// through a line buffer each; a line of one written amid a line of the
// other splits no value.
func TestExecRedactsEachStream(t *testing.T) {
	r, err := NewRedactor([]byte(`{"db":"hunter2-secret"}`), []byte(`["db"]`))
	if err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(t.TempDir(), "terraform")
	// The sleeps order the writes as a busy terraform may: half a line on
	// stdout, a line on stderr, the rest.
	script := "#!/bin/sh\nprintf 'password hunter2-'\nsleep 0.2\nprintf 'Warning: x\\n' >&2\nsleep 0.2\nprintf 'secret\\n'\n"
	if err := os.WriteFile(tf, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	run := &Runner{redact: r, Log: &log}
	if _, err := run.exec(context.Background(), tf, t.TempDir(), nil, "plan"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "hunter2") || !strings.Contains(log.String(), "password "+Redacted) {
		t.Errorf("log %q", log.String())
	}
}
