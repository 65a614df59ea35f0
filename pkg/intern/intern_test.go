package intern

import (
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// same tells whether two strings share their bytes.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// fresh is a copy of s in memory of its own, as a decoder makes.
func fresh(s string) string { return string([]byte(s)) }

func TestPool(t *testing.T) {
	long := fresh(string(make([]byte, maxLen+1)))
	for name, tc := range map[string]struct {
		a, b  string
		share bool
	}{
		"equal strings share":    {a: fresh("captf.io/operation"), b: fresh("captf.io/operation"), share: true},
		"different strings":      {a: fresh("apply"), b: fresh("destroy")},
		"too long to keep":       {a: long, b: fresh(long)},
		"the empty string stays": {a: "", b: ""},
	} {
		t.Run(name, func(t *testing.T) {
			var p Pool
			a, b := p.String(tc.a), p.String(tc.b)
			if a != tc.a || b != tc.b {
				t.Fatalf("String changed a value: %q %q", a, b)
			}
			if got := len(a) > 0 && same(a, b); got != tc.share {
				t.Errorf("shared = %v, want %v", got, tc.share)
			}
		})
	}
}

func TestPoolIsBounded(t *testing.T) {
	var p Pool
	for i := range maxEntries + 10 {
		p.String(fresh(string(rune(0x4e00+i%20000)) + string(rune('a'+i/20000)) + "-" + string(rune(0x4e00+i/1000))))
	}
	if len(p.strings) > maxEntries {
		t.Errorf("the pool holds %d strings, more than %d", len(p.strings), maxEntries)
	}
}

func TestMeta(t *testing.T) {
	p := Pool{LabelValues: map[string]bool{"captf.io/operation": true}}
	objects := make([]*metav1.ObjectMeta, 2)
	for i := range objects {
		objects[i] = &metav1.ObjectMeta{Name: fresh("cluster-a"), Namespace: fresh("tenant"),
			Labels:          map[string]string{fresh("captf.io/operation"): fresh("apply"), fresh("captf.io/object-uid"): fresh("1234")},
			Annotations:     map[string]string{fresh("note"): fresh("a note")},
			Finalizers:      []string{fresh("infrastructure.cluster.x-k8s.io/captf")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fresh("cluster.x-k8s.io/v1beta2"), Kind: fresh("Cluster"), Name: fresh("a")}}}
		p.Meta(objects[i])
	}
	a, b := objects[0], objects[1]
	key := func(m map[string]string, k string) string {
		for key := range m {
			if key == k {
				return key
			}
		}
		t.Fatalf("no key %s in %v", k, m)
		return ""
	}
	for what, pair := range map[string][2]string{
		"namespace":          {a.Namespace, b.Namespace},
		"label key":          {key(a.Labels, "captf.io/object-uid"), key(b.Labels, "captf.io/object-uid")},
		"shared label value": {a.Labels["captf.io/operation"], b.Labels["captf.io/operation"]},
		"annotation key":     {key(a.Annotations, "note"), key(b.Annotations, "note")},
		"finalizer":          {a.Finalizers[0], b.Finalizers[0]},
		"owner API version":  {a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion},
		"owner kind":         {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s %q is not shared", what, pair[0])
		}
	}
	for what, pair := range map[string][2]string{
		"name":                  {a.Name, b.Name},
		"an object's own label": {a.Labels["captf.io/object-uid"], b.Labels["captf.io/object-uid"]},
		"annotation value":      {a.Annotations["note"], b.Annotations["note"]},
	} {
		if same(pair[0], pair[1]) {
			t.Errorf("%s %q is shared, and should not be", what, pair[0])
		}
	}
}
