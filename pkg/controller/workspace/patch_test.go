package workspace

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// TestMergePatch: the patch an update sends holds what the sync changed of
// metadata and spec, with the version it read, and nothing the cache left
// out or the status.
func TestMergePatch(t *testing.T) {
	base := func() *infrav1.TerraformMachine {
		return &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", ResourceVersion: "7",
			Annotations: map[string]string{infrav1.AnnotationApprovePlan: "1111111111111111", "captf.io/keep": "x"},
			Finalizers:  []string{"example.com/hold"}}}
	}
	for name, tc := range map[string]struct {
		change func(*infrav1.TerraformMachine)
		want   string
	}{
		"nothing changed: only the version": {change: func(*infrav1.TerraformMachine) {},
			want: `{"metadata":{"resourceVersion":"7"}}`},
		"a finalizer added: the whole list": {change: func(m *infrav1.TerraformMachine) {
			m.Finalizers = append(m.Finalizers, infrav1.TerraformMachineFinalizer)
		}, want: `{"metadata":{"finalizers":["example.com/hold","` + infrav1.TerraformMachineFinalizer + `"],"resourceVersion":"7"}}`},
		"an approval used: null": {change: func(m *infrav1.TerraformMachine) {
			delete(m.Annotations, infrav1.AnnotationApprovePlan)
		}, want: `{"metadata":{"annotations":{"` + infrav1.AnnotationApprovePlan + `":null},"resourceVersion":"7"}}`},
		"the last annotation the cache holds removed: null for it alone": {change: func(m *infrav1.TerraformMachine) {
			m.Annotations = nil
		}, want: `{"metadata":{"annotations":{"` + infrav1.AnnotationApprovePlan + `":null,"captf.io/keep":null},"resourceVersion":"7"}}`},
		"an annotation changed": {change: func(m *infrav1.TerraformMachine) {
			m.Annotations["captf.io/keep"] = "y"
		}, want: `{"metadata":{"annotations":{"captf.io/keep":"y"},"resourceVersion":"7"}}`},
		"a provider ID set, the status changed: the spec only": {change: func(m *infrav1.TerraformMachine) {
			m.Spec.ProviderID = "localcloud://i-1"
			m.Status.FailureDomain = "ignored"
		}, want: `{"metadata":{"resourceVersion":"7"},"spec":{"providerID":"localcloud://i-1"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			obj := base()
			tc.change(obj)
			got, err := mergePatch(base(), obj)
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			if err := json.Unmarshal(got, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &b); err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, a), mustJSON(t, b); g != w {
				t.Errorf("patch %s\nwant  %s", g, w)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
