package run

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
)

// NewWriteKey is a fresh write key for one Job.
func NewWriteKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// WriteKeyOf is the write key a Job's pod template gives its runner: the
// last EnvWriteKey of its container, as the kubelet takes the last of
// duplicate names. ok is false for a Job made before write keys, which has
// none; an empty key is one no request carries.
func WriteKeyOf(pod *corev1.PodSpec) (key string, ok bool) {
	for _, c := range pod.Containers {
		for _, e := range c.Env {
			if e.Name == EnvWriteKey {
				key, ok = e.Value, true
			}
		}
	}
	return key, ok
}

// WriteKeyMatches tells whether sent is the Job's key, in constant time.
func WriteKeyMatches(key, sent string) bool {
	return key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(sent)) == 1
}
