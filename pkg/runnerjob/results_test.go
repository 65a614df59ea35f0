package runnerjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// TestResults: a Job's result is read from the API once, however many read
// it; a result not there yet, or unreadable, is read again; only the
// newest results are kept.
func TestResults(t *testing.T) {
	ctx := context.Background()
	kube := k8sfake.NewClientset()
	results := &runnerjob.Results{Kube: kube}
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
		if _, err := results.Read(ctx, "ns", "r-2", "job-2"); !errors.Is(err, runnerjob.ErrUnreadableResult) {
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

// TestResultsReadAtOnce: the object's controller and the Job metrics see a
// Job finish at the same moment; while one's read of its result is under
// way, the other waits for it instead of reading it too.
func TestResultsReadAtOnce(t *testing.T) {
	ctx := context.Background()
	b, _ := json.Marshal(run.Result{Outcome: run.OutcomeSucceeded})
	kube := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"}, Data: map[string][]byte{run.KeyResult: b}})
	entered, answer := make(chan struct{}, 2), make(chan struct{})
	var gets atomic.Int32
	kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		entered <- struct{}{}
		<-answer // the API takes its time
		return false, nil, nil
	})
	results := &runnerjob.Results{Kube: kube}
	var wg sync.WaitGroup
	read := func() {
		defer wg.Done()
		if res, err := results.Read(ctx, "ns", "r", "job"); err != nil || res.Outcome != run.OutcomeSucceeded {
			t.Errorf("read %+v, %v", res, err)
		}
	}
	wg.Add(2)
	go read()
	<-entered
	go read()
	time.Sleep(50 * time.Millisecond) // the second reader comes while the first waits for its answer
	close(answer)
	wg.Wait()
	if n := gets.Load(); n != 1 {
		t.Errorf("%d GETs by two readers at once, want 1", n)
	}
}

// TestResultsWritten: a result the runner API handed over is read without
// a request, the last one written if written twice; one unreadable or
// large is read from the API.
func TestResultsWritten(t *testing.T) {
	ctx := context.Background()
	result := func(reason string) map[string][]byte {
		b, _ := json.Marshal(run.Result{Outcome: run.OutcomeFailed, Reason: reason})
		return map[string][]byte{run.KeyResult: b}
	}
	big, _ := json.Marshal(run.Result{Outcome: run.OutcomeSucceeded, Outputs: map[string]run.Output{"blob": {Value: json.RawMessage(`"` + strings.Repeat("x", 20<<10) + `"`)}}})
	tests := map[string]struct {
		written  []map[string][]byte
		want     string // the result's reason
		wantGets int
	}{
		"handed over":          {written: []map[string][]byte{result("Handed")}, want: "Handed"},
		"written again":        {written: []map[string][]byte{result("First"), result("Again")}, want: "Again"},
		"unreadable: read":     {written: []map[string][]byte{{run.KeyResult: []byte("not json")}}, want: "Stored", wantGets: 1},
		"large: read":          {written: []map[string][]byte{{run.KeyResult: big}}, want: "Stored", wantGets: 1},
		"nothing handed: read": {want: "Stored", wantGets: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kube := k8sfake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "r-1", Namespace: "ns"}, Data: result("Stored")})
			results := &runnerjob.Results{Kube: kube}
			for _, data := range tc.written {
				results.Wrote("job-1", data)
			}
			for range 2 {
				res, err := results.Read(ctx, "ns", "r-1", "job-1")
				if err != nil || res.Reason != tc.want {
					t.Fatalf("read %+v, %v; want reason %s", res, err, tc.want)
				}
			}
			if n := len(kube.Actions()); n != tc.wantGets {
				t.Errorf("%d requests for a result read twice, want %d", n, tc.wantGets)
			}
		})
	}
}
