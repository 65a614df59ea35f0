package manager

import (
	"runtime/debug"

	"k8s.io/klog/v2"

	"github.com/captf/captf/pkg/cgroup"
)

// defaultGCPercent is the manager's GOGC when the environment sets none.
const defaultGCPercent = 25

// memoryLimitShare of the container's memory limit is the manager's soft
// memory limit when GOMEMLIMIT is unset: near the limit the collector runs
// harder rather than the kernel kill the manager. The rest is for what the
// Go runtime does not account for (the mapped binary, C allocations).
const memoryLimitShare = 0.9

// tuneGC sets GOGC and the soft memory limit the environment leaves unset.
func tuneGC(logger klog.Logger, getenv func(string) string, readFile func(string) ([]byte, error)) {
	// The caches are most of the heap, and live: Go's default GOGC=100 lets
	// the heap grow to twice their size before collecting. At 2,000 objects
	// with drift checks, 25 against 50 took 66.4 MiB against 70.1 and about
	// a quarter more CPU (creating them: 8.4 s against 6.7; over 6 minutes
	// of checks, 7.1% of a core against 5.6%). The collector's CPU follows
	// the rate of allocation, not the size of the caches: the memory saved
	// grows with the fleet, the CPU does not (docs/scaling.md).
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if getenv("GOMEMLIMIT") != "" {
		return
	}
	if limit, ok := cgroup.MemoryLimit(readFile); ok {
		soft := int64(float64(limit) * memoryLimitShare)
		debug.SetMemoryLimit(soft)
		logger.Info("Soft memory limit set from the container's", "containerLimitBytes", limit, "GOMEMLIMIT", soft)
	}
}
