package cgroup

import (
	"io/fs"
	"testing"
)

func files(m map[string]string) ReadFile {
	return func(name string) ([]byte, error) {
		if s, ok := m[name]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestMemoryLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  int64
		ok    bool
	}{
		"v2":                 {files: map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}, want: 268435456, ok: true},
		"v2 without a limit": {files: map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}},
		"v1":                 {files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, want: 536870912, ok: true},
		"v1 without a limit": {files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}},
		"no cgroup files":    {},
	} {
		t.Run(name, func(t *testing.T) {
			if got, ok := MemoryLimit(files(tc.files)); got != tc.want || ok != tc.ok {
				t.Errorf("MemoryLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestOOMKills(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		want  int64
	}{
		"v2":              {files: map[string]string{"/sys/fs/cgroup/memory.events": "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"}, want: 2},
		"v1":              {files: map[string]string{"/sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"}, want: 1},
		"v1, none":        {files: map[string]string{"/sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}},
		"no cgroup files": {},
	} {
		t.Run(name, func(t *testing.T) {
			if got := OOMKills(files(tc.files)); got != tc.want {
				t.Errorf("OOMKills = %d, want %d", got, tc.want)
			}
		})
	}
}
