// Package intern shares, across the objects the manager caches, the
// strings that repeat from one object to the next: label and annotation
// keys, kinds, API versions, namespaces, finalizers, condition types and
// reasons. Each decoded object brings its own copy of every one of them;
// a fleet of 10,000 objects (and their Jobs) holds tens of thousands of
// copies of the same few hundred strings.
package intern

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxLen and maxEntries bound what a pool keeps: what repeats is short
// (an object's name or UID repeats only within its own object), and a
// pool that has seen maxEntries strings only hands out what it has.
const (
	maxLen     = 64
	maxEntries = 1 << 14
)

// Pool is a bounded set of strings. The zero value is ready to use.
type Pool struct {
	// LabelValues are the label keys whose values repeat across objects
	// (an operation, a kind), not those whose values are an object's own
	// (a name, a UID, a hash): only those values are shared.
	LabelValues map[string]bool

	mu      sync.RWMutex
	strings map[string]string
}

// String is s, or the pool's equal string.
func (p *Pool) String(s string) string {
	if len(s) == 0 || len(s) > maxLen {
		return s
	}
	p.mu.RLock()
	shared, ok := p.strings[s]
	p.mu.RUnlock()
	if ok {
		return shared
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if shared, ok := p.strings[s]; ok {
		return shared
	}
	if p.strings == nil {
		p.strings = map[string]string{}
	}
	if len(p.strings) >= maxEntries {
		return s
	}
	p.strings[s] = s
	return s
}

// Map rebuilds m with shared keys, and shared values for the keys in
// values.
func (p *Pool) Map(m map[string]string, values map[string]bool) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if values[k] {
			v = p.String(v)
		}
		out[p.String(k)] = v
	}
	return out
}

// Meta shares the repeated strings of an object's metadata: its
// namespace, label keys (and the LabelValues), annotation keys,
// finalizers and owner references' API versions and kinds.
func (p *Pool) Meta(m metav1.Object) {
	m.SetNamespace(p.String(m.GetNamespace()))
	m.SetLabels(p.Map(m.GetLabels(), p.LabelValues))
	m.SetAnnotations(p.Map(m.GetAnnotations(), nil))
	if f := m.GetFinalizers(); len(f) > 0 {
		for i := range f {
			f[i] = p.String(f[i])
		}
	}
	if refs := m.GetOwnerReferences(); len(refs) > 0 {
		for i := range refs {
			refs[i].APIVersion, refs[i].Kind = p.String(refs[i].APIVersion), p.String(refs[i].Kind)
		}
		m.SetOwnerReferences(refs)
	}
}

// Conditions shares the conditions' types, statuses and reasons.
func (p *Pool) Conditions(conds []metav1.Condition) {
	for i := range conds {
		c := &conds[i]
		c.Type, c.Status, c.Reason = p.String(c.Type), metav1.ConditionStatus(p.String(string(c.Status))), p.String(c.Reason)
	}
}
