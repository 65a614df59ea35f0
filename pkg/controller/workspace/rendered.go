package workspace

import (
	"crypto/sha256"
	"encoding/json"
	"sync"

	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// renderedInputs remembers, per object, the hash of the inputs it last
// rendered and a digest of what went into them that needs no read: the
// object (UID, workspace spec), CAPTF's inputs (its owner's, the cluster's
// exports) and the names of the Secrets it read. A sync that only asks
// whether the applied inputs are current takes the hash from here instead
// of reading the module's ConfigMap and the Secrets again (two reads of
// every sync of a machine: most of its syncs come with Cluster API's and
// its own status changes). A Job never runs remembered inputs (Apply asks
// for a render), and a resync forgets them: Secrets and ConfigMaps are read
// again when a Job starts and at least every --sync-period, as before.
type renderedInputs struct {
	mu       sync.Mutex
	byObject map[cache.ObjectName]rendered
}

type rendered struct {
	from [sha256.Size]byte
	hash string
}

func newRenderedInputs() *renderedInputs {
	return &renderedInputs{byObject: map[cache.ObjectName]rendered{}}
}

// renderedFrom digests what inputs are rendered from, short of the
// Secrets' and ConfigMaps' content: the object's workspace spec (not its
// generation: a machine's provider ID, written once it is applied, changes
// no input), CAPTF's inputs and the names of the Secrets read.
func renderedFrom(uid string, ws *infrav1.WorkspaceSpec, captf map[string]any, secretNames ...string) ([sha256.Size]byte, error) {
	b, err := json.Marshal(struct {
		UID         string
		Workspace   *infrav1.WorkspaceSpec
		CAPTF       map[string]any
		SecretNames []string
	}{uid, ws, captf, secretNames})
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}

// lookup returns the hash of key's inputs if they were last rendered from
// from.
func (m *renderedInputs) lookup(key cache.ObjectName, from [sha256.Size]byte) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.byObject[key]
	if !ok || r.from != from {
		return "", false
	}
	return r.hash, true
}

func (m *renderedInputs) remember(key cache.ObjectName, from [sha256.Size]byte, hash string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byObject[key] = rendered{from: from, hash: hash}
}

func (m *renderedInputs) forget(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byObject, key)
}
