package controller

import (
	"testing"

	"k8s.io/client-go/tools/cache"
)

// TestWrittenVersions: a cached object older than the controller's last
// write to it is behind; the same or a newer one is not, nor one of an
// object never written.
func TestWrittenVersions(t *testing.T) {
	a := cache.ObjectName{Namespace: "ns", Name: "a"}
	b := cache.ObjectName{Namespace: "ns", Name: "b"}
	tests := map[string]struct {
		writes []string
		forget bool
		cached string
		want   bool
	}{
		"never written":               {cached: "5", want: false},
		"cache older than the write":  {writes: []string{"10"}, cached: "9", want: true},
		"cache at the write":          {writes: []string{"10"}, cached: "10", want: false},
		"cache past the write":        {writes: []string{"10"}, cached: "11", want: false},
		"the newest write counts":     {writes: []string{"12", "10"}, cached: "11", want: true},
		"numbers, not strings":        {writes: []string{"100"}, cached: "99", want: true},
		"forgotten":                   {writes: []string{"10"}, forget: true, cached: "9", want: false},
		"a version that is no number": {writes: []string{"10"}, cached: "x", want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := NewWrittenVersions()
			for _, rv := range tc.writes {
				w.Wrote(a, rv)
			}
			if tc.forget {
				w.Forget(a)
			}
			if got := w.Behind(a, tc.cached); got != tc.want {
				t.Errorf("Behind(%q) = %v, want %v", tc.cached, got, tc.want)
			}
			if w.Behind(b, "1") {
				t.Error("another object is behind")
			}
		})
	}
}
