package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
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
