package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/run"
)

// TestResults: a Job's result is read from the API once, however many read
// it; a result not there yet, or unreadable, is read again; only the
// newest results are kept.
func TestResults(t *testing.T) {
	ctx := context.Background()
	kube := k8sfake.NewClientset()
	results := &workspace.Results{Kube: kube}
	gets := func() int {
		n := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		kube.ClearActions()
		return n
	}
	write := func(name string, data []byte) {
		t.Helper()
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{run.KeyResult: data}}
		if _, err := kube.CoreV1().Secrets("ns").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		kube.ClearActions()
	}
	result := func(reason string) []byte {
		b, _ := json.Marshal(run.Result{Outcome: run.OutcomeFailed, Reason: reason})
		return b
	}

	if _, err := results.Read(ctx, "ns", "r-1", "job-1"); !apierrors.IsNotFound(err) {
		t.Fatalf("a result not written yet: %v, want NotFound", err)
	}
	if n := gets(); n != 1 {
		t.Errorf("%d GETs for one read, want 1", n)
	}
	write("r-1", result("First"))
	for range 3 {
		if res, err := results.Read(ctx, "ns", "r-1", "job-1"); err != nil || res.Reason != "First" {
			t.Fatalf("read %+v, %v; want the result written", res, err)
		}
	}
	if n := gets(); n != 1 {
		t.Errorf("%d GETs for a result read three times once it was written, want 1 (one not found is not kept)", n)
	}

	write("r-2", []byte("not json"))
	for range 2 {
		if _, err := results.Read(ctx, "ns", "r-2", "job-2"); !errors.Is(err, workspace.ErrUnreadableResult) {
			t.Fatalf("an unreadable result: %v, want ErrUnreadableResult", err)
		}
	}
	if n := gets(); n != 2 {
		t.Errorf("%d GETs for an unreadable result read twice, want 2 (it is not kept)", n)
	}

	// A large result (outputs of a megabyte, say) is not kept.
	big, _ := json.Marshal(run.Result{Outcome: run.OutcomeSucceeded, Outputs: map[string]run.Output{"blob": {Value: json.RawMessage(`"` + strings.Repeat("x", 20<<10) + `"`)}}})
	write("r-3", big)
	for range 2 {
		if _, err := results.Read(ctx, "ns", "r-3", "job-3"); err != nil {
			t.Fatal(err)
		}
	}
	if n := gets(); n != 2 {
		t.Errorf("%d GETs for a large result read twice, want 2 (it is not kept)", n)
	}

	// The oldest go once more Jobs' results were read than are kept.
	for i := range 300 {
		name := fmt.Sprintf("more-%d", i)
		write(name, result(name))
		if _, err := results.Read(ctx, "ns", name, types.UID(name)); err != nil {
			t.Fatal(err)
		}
	}
	gets()
	if res, err := results.Read(ctx, "ns", "r-1", "job-1"); err != nil || res.Reason != "First" || gets() != 1 {
		t.Errorf("the oldest result was kept past the bound: %+v %v", res, err)
	}
	if _, err := results.Read(ctx, "ns", "more-299", "more-299"); err != nil || gets() != 0 {
		t.Errorf("the newest result was read again: %v", err)
	}
}
