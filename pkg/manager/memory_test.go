package manager

import (
	"io/fs"
	"math"
	"runtime/debug"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

func TestTuneGC(t *testing.T) {
	for name, tc := range map[string]struct {
		env   map[string]string
		files map[string]string
		// want is the soft memory limit set; math.MaxInt64 for none.
		want int64
	}{
		"cgroup v2 limit":           {files: map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}, want: 241591910},
		"cgroup v2 without a limit": {files: map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, want: math.MaxInt64},
		"cgroup v1 limit":           {files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912\n"}, want: 483183820},
		"cgroup v1 without a limit": {files: map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, want: math.MaxInt64},
		"no cgroup files":           {want: math.MaxInt64},
		"GOMEMLIMIT decides":        {env: map[string]string{"GOMEMLIMIT": "100MiB"}, files: map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}, want: math.MaxInt64},
	} {
		t.Run(name, func(t *testing.T) {
			gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
			t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
			read := func(name string) ([]byte, error) {
				if s, ok := tc.files[name]; ok {
					return []byte(s), nil
				}
				return nil, fs.ErrNotExist
			}
			tuneGC(ktesting.NewLogger(t, ktesting.NewConfig()), func(k string) string { return tc.env[k] }, read)
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("soft memory limit %d, want %d", got, tc.want)
			}
			if got := debug.SetGCPercent(100); got != defaultGCPercent {
				t.Errorf("GOGC %d, want %d", got, defaultGCPercent)
			}
		})
	}
}
