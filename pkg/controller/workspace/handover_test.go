package workspace_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
)

// TestRunInputsHandedOnce: the run inputs a sync creates are kept for the
// runner API, given once, and not past the bounds.
func TestRunInputsHandedOnce(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k), k.capi, k.kube...)
		kept := &workspace.RunInputs{}
		f.c.EngineForTest().RunInputs = kept
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 {
			t.Fatalf("Jobs %v, want one", jobNames(jobs))
		}
		name := names.Object{Kind: k.short, Name: "prod"}.RunInputs(jobs[0].Name)
		sec := kept.Take("ns", name)
		if sec == nil || sec.Labels[names.LabelObjectUID] != string(f.object().GetUID()) || len(sec.Data) == 0 {
			t.Fatalf("handed %v, want the run inputs the sync created", sec)
		}
		if again := kept.Take("ns", name); again != nil {
			t.Errorf("handed %s twice", name)
		}
	})

	secret := func(i, size int) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("in-%d", i), Namespace: "ns"},
			Data: map[string][]byte{"v": []byte(strings.Repeat("x", size))}}
	}
	var kept workspace.RunInputs
	kept.Created(secret(0, 17<<10))
	if kept.Take("ns", "in-0") != nil {
		t.Error("kept inputs of 17 KiB, over the bound")
	}
	kept.Created(secret(1, 10))
	kept.Forget("ns", "in-1")
	if kept.Take("ns", "in-1") != nil {
		t.Error("handed inputs the controller deleted")
	}
	for i := range 300 {
		kept.Created(secret(i, 10))
	}
	if kept.Take("ns", "in-43") != nil || kept.Take("ns", "in-44") == nil || kept.Take("ns", "in-299") == nil {
		t.Error("kept more than the 256 newest, or not the newest")
	}
}
