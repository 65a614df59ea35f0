package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// failingCreates is a client whose Secret creates fail with failures, one
// each, then succeed; calls counts them.
func failingCreates(failures []error) (*fake.Clientset, *int) {
	client := fake.NewClientset()
	calls := 0
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= len(failures) {
			return true, nil, failures[calls-1]
		}
		return false, nil, nil
	})
	return client, &calls
}

// TestWriteResultRetries: a result whose write loses its connection (the
// manager's pod replaced, say) is written again, not lost; an answer that
// refuses it is not retried.
func TestWriteResultRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failures  []error
		wantErr   bool
		wantCalls int
	}{
		{name: "connection lost once", failures: []error{errors.New("http2: client connection lost")}, wantCalls: 2},
		{name: "service unavailable twice", failures: []error{apierrors.NewServiceUnavailable("no endpoints"), apierrors.NewServiceUnavailable("no endpoints")}, wantCalls: 3},
		{name: "forbidden", failures: []error{apierrors.NewForbidden(corev1.Resource("secrets"), "x", errors.New("no"))}, wantErr: true, wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, calls := failingCreates(tc.failures)
			r := &Runner{Client: client, Config: Config{Spec: run.Spec{Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "c", ObjectUID: "uid", Job: "job"}},
				obj: names.Object{Kind: "tfc", Name: "c"}}
			err := r.writeResult(context.Background(), &run.Result{Outcome: run.OutcomeSucceeded})
			if (err != nil) != tc.wantErr {
				t.Fatalf("writeResult: %v, want error %v", err, tc.wantErr)
			}
			if *calls != tc.wantCalls {
				t.Errorf("%d creates, want %d", *calls, tc.wantCalls)
			}
			if !tc.wantErr {
				if _, err := client.CoreV1().Secrets("ns").Get(context.Background(), r.obj.Result("job"), metav1.GetOptions{}); err != nil {
					t.Errorf("the result is not there: %v", err)
				}
			}
		})
	}
}

// TestRescueRetries: the state terraform could not save is saved once the
// runner API answers again (it is the only record of what the run made),
// not lost at the first failed create; a refusal is final.
func TestRescueRetries(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("no endpoints")
	for _, tc := range []struct {
		name      string
		failures  []error
		wantErr   bool
		wantCalls int
	}{
		{name: "the runner API comes back", failures: []error{unavailable, errors.New("http2: client connection lost"), unavailable, unavailable}, wantCalls: 5},
		{name: "forbidden", failures: []error{apierrors.NewForbidden(corev1.Resource("secrets"), "x", errors.New("no"))}, wantErr: true, wantCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, calls := failingCreates(tc.failures)
			dir := t.TempDir()
			state := []byte(`{"version":4,"serial":3,"resources":[{"type":"terraform_data","name":"made"}]}`)
			if err := os.WriteFile(filepath.Join(dir, "errored.tfstate"), state, 0o600); err != nil {
				t.Fatal(err)
			}
			obj := names.Object{Kind: "tfc", Name: "c"}
			store := &statestore.StateStore{Client: client, Namespace: "ns", Object: obj, Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}}
			r := &Runner{Client: client, obj: obj}
			var res run.Result
			err := r.rescue(context.Background(), store, dir, &res)
			if (err != nil) != tc.wantErr {
				t.Fatalf("rescue: %v, want error %v", err, tc.wantErr)
			}
			if *calls != tc.wantCalls {
				t.Errorf("%d creates, want %d", *calls, tc.wantCalls)
			}
			if tc.wantErr {
				return
			}
			if res.RescuedState == "" {
				t.Fatal("the result names no rescued state")
			}
			sec, err := client.CoreV1().Secrets("ns").Get(context.Background(), res.RescuedState, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the rescued state is not there: %v", err)
			}
			if sec.Labels[names.LabelSecretType] != names.SecretTypeBackup {
				t.Errorf("the rescued state's Secret is a %q, want a backup", sec.Labels[names.LabelSecretType])
			}
			got, err := store.ReadBackup(context.Background(), res.RescuedState)
			if err != nil || string(got) != string(state) {
				t.Errorf("rescued state %q (%v), want %q", got, err, state)
			}
		})
	}
}

// TestReadInputsRetries: the run's first request, the read of its inputs,
// is sent again after a 429 (waiting its Retry-After) and after an answer
// cut in the middle of its body, as every later request is; a refusal is
// final.
func TestReadInputsRetries(t *testing.T) {
	secret := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"in","namespace":"ns"},"data":{"variables":"e30="}}`
	tooMany := func(w http.ResponseWriter, _ *http.Request) {
		// As the runner API's token budget answered before: no
		// Retry-After header, only the Status's retryAfterSeconds.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"TooManyRequests","code":429,"details":{"retryAfterSeconds":1}}`)
	}
	cutMidBody := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(secret)))
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, secret[:20])
		w.(http.Flusher).Flush()
		conn, _, _ := http.NewResponseController(w).Hijack()
		conn.Close()
	}
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, secret)
	}
	forbidden := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403}`)
	}
	for _, tc := range []struct {
		name     string
		answers  []http.HandlerFunc
		wantErr  bool
		minTaken time.Duration
	}{
		{name: "429 then the inputs", answers: []http.HandlerFunc{tooMany, ok}, minTaken: time.Second},
		{name: "cut mid-body then the inputs", answers: []http.HandlerFunc{cutMidBody, ok}},
		{name: "forbidden", answers: []http.HandlerFunc{forbidden, ok}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tc.answers[min(int(calls.Add(1)), len(tc.answers))-1](w, r)
			}))
			defer srv.Close()
			client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			r := &Runner{Client: client, Config: Config{Spec: run.Spec{Namespace: "ns"}}}
			start := time.Now()
			in, err := r.readInputs(context.Background(), "in")
			if (err != nil) != tc.wantErr {
				t.Fatalf("readInputs: %v, want error %v", err, tc.wantErr)
			}
			wantCalls := len(tc.answers)
			if tc.wantErr {
				wantCalls = 1
			} else if string(in.Data["variables"]) != "{}" {
				t.Errorf("inputs %v", in.Data)
			}
			if n := int(calls.Load()); n != wantCalls {
				t.Errorf("%d requests, want %d", n, wantCalls)
			}
			if took := time.Since(start); took < tc.minTaken {
				t.Errorf("took %s, want at least the %s the 429 asked for", took, tc.minTaken)
			}
		})
	}
}

// TestOneInterruptForTerraform: however many reasons to stop come (the
// pod's SIGTERM twice, the lock lost), terraform gets one SIGTERM: a second
// makes it exit at once and lose what an apply made.
func TestOneInterruptForTerraform(t *testing.T) {
	dir := t.TempDir()
	counted := filepath.Join(dir, "terms")
	ready := filepath.Join(dir, "ready")
	cmd := exec.Command("sh", "-c", `trap 'echo TERM >> `+counted+`' TERM; touch `+ready+`; while :; do sleep 0.05; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for range 100 {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := &Runner{}
	r.child = cmd
	for range 3 { // apart: signals sent at once would merge
		r.mu.Lock()
		r.interruptLocked()
		r.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	b, _ := os.ReadFile(counted)
	if n := strings.Count(string(b), "TERM"); n != 1 {
		t.Errorf("terraform got %d SIGTERMs, want 1", n)
	}
}
