package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// TestBigStateAndBackups: a state over 1 MiB compressed round-trips through
// the real API server in chunks, and backups rotate to the configured count.
func TestBigStateAndBackups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	big := make([]byte, 3<<20) // random: 3 MiB compressed too
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	obj := names.Object{Kind: "tfc", Name: "big"}
	for run := range 4 {
		store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: obj, Backups: 2,
			Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue},
			Clock:  testingclock.NewFakePassiveClock(time.Date(2026, 11, 29, 0, 0, run, 0, time.UTC))}
		state := append(bytes.Clone(big), fmt.Sprintf(`{"run":%d}`, run)...)
		if err := store.Write(ctx, state); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		got, err := store.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, state) {
			t.Fatalf("run %d: read back %d bytes, not what was written", run, len(got))
		}
	}
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, obj.State(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if head.Annotations["captf.io/chunks"] == "" {
		t.Errorf("a 3 MiB state is not chunked: %v", head.Annotations)
	}
	want := `["tfc-big-backup-20261129-000003","tfc-big-backup-20261129-000002"]`
	if got := head.Annotations["captf.io/backups"]; got != want {
		t.Errorf("backups = %s, want %s", got, want)
	}
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: obj}
	old, err := store.ReadBackup(ctx, "tfc-big-backup-20261129-000003")
	if err != nil || !bytes.HasSuffix(old, []byte(`{"run":2}`)) {
		t.Errorf("newest backup holds %q..., want the state of run 2 (err %v)", tailBytes(old), err)
	}
	secrets := e.secrets()
	// 1 state + 2 backups, each with its chunks; nothing else survives: no
	// rotated backup, no chunk of one, no chunk of an older state.
	kept := []string{obj.State(), "tfc-big-backup-20261129-000003", "tfc-big-backup-20261129-000002"}
	var total int
	for _, s := range secrets {
		if !slices.ContainsFunc(kept, func(k string) bool { return s.Name == k || strings.HasPrefix(s.Name, k+"-") }) {
			t.Errorf("Secret %s (%s) is neither the state nor a kept backup, nor a chunk of one", s.Name, s.Labels[names.LabelSecretType])
		}
		for _, v := range s.Data {
			total += len(v)
		}
		if len(s.Data["tfstate"]) > statestore.DefaultChunkSize {
			t.Errorf("secret %s holds %d bytes, over the chunk size", s.Name, len(s.Data["tfstate"]))
		}
	}
	// Random bytes do not compress: each of the three is 3 MiB and a little.
	if want := 3 * (3<<20 + 64<<10); total > want {
		t.Errorf("%d bytes in Secrets for a state and 2 backups of 3 MiB, more than %d: old chunks leak", total, want)
	}
}

func tailBytes(b []byte) string {
	if len(b) > 20 {
		b = b[len(b)-20:]
	}
	return string(b)
}

// TestFiftyMiBState: a 50 MiB state (of the repetitive JSON Terraform
// writes) round-trips through the real API server.
func TestFiftyMiBState(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var b bytes.Buffer
	for i := 0; b.Len() < 50<<20; i++ {
		fmt.Fprintf(&b, `{"address":"terraform_data.instance[%d]","values":{"id":"%08x-5f1c-4c1e-9a3b-%012x","input":{"zone":"zone-%d"}}},`, i, i*7919, i*104729, i%3)
	}
	state := b.Bytes()
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: names.Object{Kind: "tfc", Name: "huge"},
		Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}}
	if err := store.Write(ctx, state); err != nil {
		t.Fatal(err)
	}
	got, err := store.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, state) {
		t.Fatalf("read %d bytes back, wrote %d", len(got), len(state))
	}
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, "tfc-huge-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d MiB of state in %s chunk Secrets", len(state)>>20, head.Annotations["captf.io/chunks"])
}
