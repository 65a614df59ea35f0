package runner

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestOutOfMemory: a terraform command that fails while the container's
// cgroup records an OOM kill says so, with the pod's limit and what to
// raise, under its own reason; any other failure keeps terraform's message.
func TestOutOfMemory(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "terraform")
	// As the kernel ends it: SIGKILL, no message.
	if err := os.WriteFile(tf, []byte("#!/bin/sh\necho 'Initializing the backend...'\nkill -9 $$\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files      map[string]string
		want       string
		wantReason string
	}{
		"killed at the limit": {files: map[string]string{"/sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes": "50331648\n"},
			want: "the kernel killed a process of terraform plan (terraform, a provider or a provisioner's command) at the runner pod's memory limit (48Mi): raise spec.jobs.resources.limits.memory (or the cluster's spec.defaults.jobs). terraform plan: signal: killed: Initializing the backend...", wantReason: "RunnerOutOfMemory"},
		"killed, no limit known": {files: map[string]string{"/sys/fs/cgroup/memory.events": "oom 1\noom_kill 1\n"},
			want: "memory limit (its limit)", wantReason: "RunnerOutOfMemory"},
		"killed otherwise": {files: map[string]string{"/sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"},
			want: "terraform plan: signal: killed: Initializing the backend..."},
		"no cgroup": {want: "terraform plan: signal: killed"},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Runner{readFile: func(name string) ([]byte, error) {
				if s, ok := tc.files[name]; ok {
					return []byte(s), nil
				}
				return nil, fs.ErrNotExist
			}}
			_, err := r.exec(context.Background(), tf, dir, nil, "plan")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
			if got := failureReason(err); got != tc.wantReason {
				t.Errorf("reason %q, want %q", got, tc.wantReason)
			}
			if tc.wantReason == "" && errors.Is(err, errOutOfMemory) {
				t.Error("an out-of-memory error without an OOM kill")
			}
		})
	}
}

// TestTerraformHasItsOwnProcessGroup: a SIGTERM to the runner's process
// group (an init that signals groups) does not reach terraform, which gets
// only the runner's forwarded interrupt.
func TestTerraformHasItsOwnProcessGroup(t *testing.T) {
	dir := t.TempDir()
	tf := filepath.Join(dir, "terraform")
	// Prints its process group: the fifth field of /proc/self/stat.
	if err := os.WriteFile(tf, []byte("#!/bin/sh\nread -r stat < /proc/$$/stat\nset -- ${stat##*) }\necho \"$3\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := (&Runner{}).exec(context.Background(), tf, dir, nil, "version")
	if err != nil {
		t.Fatal(err)
	}
	if got, ours := strings.TrimSpace(string(out)), strconv.Itoa(syscall.Getpgrp()); got == ours || got == "" {
		t.Errorf("terraform runs in process group %q, the runner's is %s: a group-wide SIGTERM would interrupt it twice", got, ours)
	}
}
