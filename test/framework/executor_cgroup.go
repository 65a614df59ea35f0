package framework

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/captf/captf/pkg/cgroup"
)

// memoryCgroups give image containers their memory limit as a container
// runtime does: a cgroup (v1 memory controller) under the executor's own,
// whose limit the kernel enforces, mounted where the container reads its
// own limit (/sys/fs/cgroup/memory, as in its own cgroup namespace).
// Without a writable memory controller (base empty) containers run
// without limits, as before.
type memoryCgroups struct{ base string }

// cgroupMountPoint is where the container sees its memory cgroup.
const cgroupMountPoint = "/sys/fs/cgroup/memory"

func findMemoryCgroups() (memoryCgroups, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return memoryCgroups{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !slices.Contains(strings.Split(parts[1], ","), "memory") {
			continue
		}
		base := filepath.Join(cgroupMountPoint, parts[2])
		probe := filepath.Join(base, fmt.Sprintf("captf-probe-%d", os.Getpid()))
		if err := os.Mkdir(probe, 0o755); err != nil {
			return memoryCgroups{}, fmt.Errorf("no memory cgroup to give containers their limits: %w", err)
		}
		return memoryCgroups{base: base}, os.Remove(probe)
	}
	return memoryCgroups{}, errors.New("no cgroup v1 memory controller: containers run without memory limits")
}

// create makes a cgroup of limit bytes for one run of a container.
func (m memoryCgroups) create(name string, limit int64) (string, error) {
	dir := filepath.Join(m.base, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		m.remove(dir)
		return "", err
	}
	return dir, nil
}

// oomKilled tells whether the kernel killed a process of the cgroup for
// want of memory: what the container would read of its own.
func (m memoryCgroups) oomKilled(dir string) bool {
	if dir == "" {
		return false
	}
	inDir := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, filepath.Base(name))) }
	return cgroup.OOMKills(inDir) > 0
}

// remove deletes a container's cgroup once its last process has gone
// (they are killed before; the kernel needs a moment to let them go).
func (m memoryCgroups) remove(dir string) {
	if dir == "" {
		return
	}
	for range 100 {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// MemoryLimits says why containers run from images get no memory limits
// on this machine; nil when they get them.
func (e *Executor) MemoryLimits() error { return e.cgroupsErr }
