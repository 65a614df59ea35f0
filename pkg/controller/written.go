package controller

import (
	"strconv"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// WrittenVersions remembers the resourceVersion of each object's last write
// by the controller, so a sync can tell a cache that has not caught up yet
// (read-your-writes, as kube-controller-manager's consistency store does).
type WrittenVersions struct {
	mu       sync.Mutex
	versions map[cache.ObjectName]uint64
}

// NewWrittenVersions makes an empty store.
func NewWrittenVersions() *WrittenVersions {
	return &WrittenVersions{versions: map[cache.ObjectName]uint64{}}
}

// Wrote records a write that returned resourceVersion rv.
func (w *WrittenVersions) Wrote(key cache.ObjectName, rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if v > w.versions[key] {
		w.versions[key] = v
	}
}

// Behind reports whether a cached object at resourceVersion rv predates
// the last write to it. Resource versions are etcd revisions here; one that
// does not parse is taken as caught up.
func (w *WrittenVersions) Behind(key cache.ObjectName, rv string) bool {
	v, err := strconv.ParseUint(rv, 10, 64)
	w.mu.Lock()
	defer w.mu.Unlock()
	return err == nil && v < w.versions[key]
}

// Forget drops key, when its object is gone.
func (w *WrittenVersions) Forget(key cache.ObjectName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.versions, key)
}
