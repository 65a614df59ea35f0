// Package cgroup reads what a container's cgroup says of its memory: its
// limit, and whether the kernel killed one of its processes for want of
// memory. Both cgroup v2 and v1, as a container sees its own cgroup.
package cgroup

import (
	"strconv"
	"strings"
)

// ReadFile reads a file: os.ReadFile, or a test's.
type ReadFile func(name string) ([]byte, error)

var (
	limitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}
	eventFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}
)

// MemoryLimit is the container's memory limit in bytes; none when it has
// no limit or no cgroup to say.
func MemoryLimit(read ReadFile) (int64, bool) {
	for _, file := range limitFiles {
		b, err := read(file)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2), or v1's page-rounded maximum: no limit.
		if err != nil || n <= 0 || n > 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// OOMKills is how many processes of the container the kernel has killed
// for want of memory (v2 memory.events, v1 memory.oom_control: their
// oom_kill line).
func OOMKills(read ReadFile) int64 {
	for _, file := range eventFiles {
		b, err := read(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n
			}
		}
	}
	return 0
}
