package workspace

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// keptRunInputs bounds the run inputs RunInputs keeps: those of the Jobs
// created whose runners have not read them yet (seconds, unless pods wait
// for a node); larger ones than keptRunInputBytes are not kept, so that
// they take at most 4 MiB.
const (
	keptRunInputs     = 256
	keptRunInputBytes = 16 << 10
)

// RunInputs keeps the run-inputs Secrets the controllers have just
// created, for the runner API to serve each once: a runner's first read of
// its inputs then needs no request to the API server. A second read (a
// runner's retry), a manager that restarted and a standby replica read
// them from the API server, as before.
type RunInputs struct {
	mu     sync.Mutex
	byName map[cache.ObjectName]*corev1.Secret
	order  []cache.ObjectName // oldest first
}

// Created keeps sec, a run-inputs Secret as the API server created it.
func (k *RunInputs) Created(sec *corev1.Secret) {
	if k == nil || secretSize(sec.Data) > keptRunInputBytes {
		return
	}
	key := cache.ObjectName{Namespace: sec.Namespace, Name: sec.Name}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byName == nil {
		k.byName = map[cache.ObjectName]*corev1.Secret{}
	}
	if _, ok := k.byName[key]; !ok {
		k.order = append(k.order, key)
	}
	k.byName[key] = sec
	for len(k.order) > keptRunInputs {
		delete(k.byName, k.order[0])
		k.order = k.order[1:]
	}
}

// Take returns the run-inputs Secret namespace/name created, once; nil
// when it is not kept.
func (k *RunInputs) Take(namespace, name string) *corev1.Secret {
	if k == nil {
		return nil
	}
	key := cache.ObjectName{Namespace: namespace, Name: name}
	k.mu.Lock()
	defer k.mu.Unlock()
	sec, ok := k.byName[key]
	if !ok {
		return nil
	}
	k.forget(key)
	return sec
}

// Forget drops namespace/name: the controller deleted it.
func (k *RunInputs) Forget(namespace, name string) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forget(cache.ObjectName{Namespace: namespace, Name: name})
}

// forget drops key; k.mu is held.
func (k *RunInputs) forget(key cache.ObjectName) {
	if _, ok := k.byName[key]; !ok {
		return
	}
	delete(k.byName, key)
	for i, o := range k.order {
		if o == key {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
}
