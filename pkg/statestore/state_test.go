package statestore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/captf/captf/pkg/names"
)

// tickingClock moves on by step at each reading: each backup and chunk
// generation gets a name of its own.
type tickingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *tickingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func newStore(client *fake.Clientset, backups, chunk int) *StateStore {
	t0 := time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)
	return &StateStore{
		Client: client, Namespace: "ns", Object: names.Object{Kind: "tfc", Name: "c"},
		Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}, Backups: backups, ChunkSize: chunk,
		Clock: &tickingClock{now: t0, step: time.Second},
	}
}

func TestStateRoundTrip(t *testing.T) {
	random := make([]byte, 300<<10) // incompressible: three 128 KiB chunks
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		state      []byte
		wantChunks int
	}{
		"small, inline":   {state: []byte(`{"version":4,"serial":1}`), wantChunks: 0},
		"big, in chunks":  {state: random, wantChunks: 3},
		"compressible 5M": {state: bytes.Repeat([]byte(`{"resource":"x"},`), 300_000), wantChunks: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			s := newStore(client, 5, 128<<10)
			if got, err := s.Read(ctx); err != nil || got != nil {
				t.Fatalf("Read of no state = %q, %v; want nil, nil", got, err)
			}
			if err := s.Write(ctx, tc.state); err != nil {
				t.Fatal(err)
			}
			got, err := s.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.state) {
				t.Fatalf("read %d bytes, wrote %d", len(got), len(tc.state))
			}
			head, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
			if _, chunks := chunkInfo(head); chunks != tc.wantChunks {
				t.Errorf("chunks = %d, want %d", chunks, tc.wantChunks)
			}
			// A second write replaces the chunks of the first.
			if err := s.Write(ctx, append(tc.state, ' ')); err != nil {
				t.Fatal(err)
			}
			list, _ := client.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{LabelSelector: names.LabelSecretType + "=" + names.SecretTypeStateChunk})
			if len(list.Items) != tc.wantChunks {
				t.Errorf("%d chunk secrets after a rewrite, want %d", len(list.Items), tc.wantChunks)
			}
		})
	}
}

func TestBackupsRotate(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	var names []string
	// Each run (a new store) backs up the state it found, once.
	for run := range 8 {
		s := newStore(client, 3, 0)
		s.Clock = testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, run, 0, time.UTC))
		for write := range 2 {
			if err := s.Write(ctx, fmt.Appendf(nil, `{"serial":%d}`, run*10+write)); err != nil {
				t.Fatal(err)
			}
		}
		if run > 0 && s.BackupsMade != 1 {
			t.Fatalf("run %d made %d backups, want 1", run, s.BackupsMade)
		}
	}
	head, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
	if err := json.Unmarshal([]byte(head.Annotations[annotationBackups]), &names); err != nil {
		t.Fatal(err)
	}
	want := []string{"tfc-c-backup-20260101-000007", "tfc-c-backup-20260101-000006", "tfc-c-backup-20260101-000005"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("backups = %v, want %v (newest first)", names, want)
	}
	s := newStore(client, 3, 0)
	got, err := s.ReadBackup(ctx, want[0])
	if err != nil || string(got) != `{"serial":61}` {
		t.Fatalf("newest backup = %s, %v; want the last state of run 6", got, err)
	}
	list, _ := client.CoreV1().Secrets("ns").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 4 {
		t.Errorf("%d secrets, want the state and 3 backups", len(list.Items))
	}
}

func TestStateSafety(t *testing.T) {
	ctx := context.Background()
	tests := map[string]func(t *testing.T, client *fake.Clientset, s *StateStore){
		"a gzip bomb is an error, not a kill": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			s.MaxBytes = 1 << 20
			if err := s.Write(ctx, bytes.Repeat([]byte("0"), 2<<20)); err != nil { // 2 MiB of zeros: a few KiB gzipped
				t.Fatal(err)
			}
			// The next run reads it (this store would answer from memory).
			next := newStore(client, 0, 0)
			next.MaxBytes = 1 << 20
			if _, err := next.Read(ctx); !errors.Is(err, ErrStateTooLarge) {
				t.Fatalf("Read = %v, want ErrStateTooLarge", err)
			}
		},
		"an unchanged state is neither written nor backed up": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			for range 3 {
				s2 := newStore(client, 3, 0)
				if err := s2.Write(ctx, []byte(`{"serial":1}`)); err != nil {
					t.Fatal(err)
				}
				if s2.BackupsMade != 0 {
					t.Fatalf("made %d backups of an unchanged state", s2.BackupsMade)
				}
			}
		},
		"a restored backup is never rotated away": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			for i := range 3 {
				if err := newStore(client, 2, 0).Write(ctx, fmt.Appendf(nil, `{"serial":%d}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			backups, _ := s.ListBackups(ctx)
			oldest := backups[len(backups)-1]
			r := newStore(client, 2, 0)
			if err := r.Restore(ctx, oldest); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ReadBackup(ctx, oldest); err != nil {
				t.Fatalf("the restored backup %s: %v", oldest, err)
			}
			if got, _ := r.Read(ctx); string(got) != `{"serial":0}` {
				t.Fatalf("state after restore = %s", got)
			}
		},
		"a restore whose backup of the current state fails changes nothing": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			for i := range 2 {
				if err := newStore(client, 3, 0).Write(ctx, fmt.Appendf(nil, `{"serial":%d}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			backups, _ := s.ListBackups(ctx)
			client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("exceeded quota: count/secrets")
			})
			r := newStore(client, 3, 0)
			if err := r.Restore(ctx, backups[0]); err == nil || !strings.Contains(err.Error(), "exceeded quota") {
				t.Fatalf("Restore = %v, want the refused backup", err)
			}
			if got, _ := r.Read(ctx); string(got) != `{"serial":1}` {
				t.Fatalf("state after a failed restore = %s, want the current one kept", got)
			}
		},
		"a restore keeps the replaced state even when backups are off": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			for i := range 2 {
				if err := newStore(client, 1, 0).Write(ctx, fmt.Appendf(nil, `{"serial":%d}`, i)); err != nil {
					t.Fatal(err)
				}
			}
			backups, _ := s.ListBackups(ctx)
			r := newStore(client, 0, 0)
			if err := r.Restore(ctx, backups[0]); err != nil {
				t.Fatal(err)
			}
			if got, err := r.ReadBackup(ctx, r.LastBackup); err != nil || string(got) != `{"serial":1}` {
				t.Fatalf("backup %q of the replaced state = %s, %v", r.LastBackup, got, err)
			}
		},
		"another object's state is neither read nor written": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			if err := s.Write(ctx, []byte(`{"serial":1}`)); err != nil {
				t.Fatal(err)
			}
			head, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
			head.Annotations[names.AnnotationObjectName] = "victim"
			if _, err := client.CoreV1().Secrets("ns").Update(ctx, head, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			s2 := newStore(client, 3, 0)
			if _, err := s2.Read(ctx); !errors.Is(err, ErrOtherOwner) {
				t.Fatalf("Read = %v, want ErrOtherOwner", err)
			}
			if err := s2.Claim(ctx, "pod", false); !errors.Is(err, ErrOtherOwner) {
				t.Fatalf("Claim = %v, want ErrOtherOwner", err)
			}
		},
		"a backup that cannot be made does not cost the new state": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			if err := s.Write(ctx, []byte(`{"serial":1}`)); err != nil {
				t.Fatal(err)
			}
			client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, errors.New("exceeded quota: count/secrets")
			})
			next := newStore(client, 3, 0)
			if err := next.Write(ctx, []byte(`{"serial":2}`)); err != nil {
				t.Fatal(err)
			}
			if got, _ := next.Read(ctx); string(got) != `{"serial":2}` || next.BackupErrors != 1 {
				t.Fatalf("state %s, %d backup errors; want the new state and 1", got, next.BackupErrors)
			}
		},
		"runs that fail again and again do not rotate the last good state away": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			good := newStore(client, 2, 0)
			if err := good.Write(ctx, []byte(`{"serial":1,"good":true}`)); err != nil {
				t.Fatal(err)
			}
			if err := good.MarkApplied(ctx); err != nil {
				t.Fatal(err)
			}
			for run := range 5 { // each failure leaves a new tainted resource
				failing := newStore(client, 2, 0)
				failing.Clock = testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, run, 0, time.UTC))
				if err := failing.Write(ctx, fmt.Appendf(nil, `{"serial":%d}`, run+2)); err != nil {
					t.Fatal(err)
				}
			}
			backups, _ := s.ListBackups(ctx)
			var found bool
			for _, b := range backups {
				if got, _ := s.ReadBackup(ctx, b); string(got) == `{"serial":1,"good":true}` {
					found = true
				}
			}
			if !found || len(backups) > 3 {
				t.Fatalf("backups %v: want the last good state among at most 3", backups)
			}
		},
		"a missing state of an applied object is refused": func(t *testing.T, client *fake.Clientset, s *StateStore) {
			if err := s.Claim(ctx, "pod", true); !errors.Is(err, ErrStateMissing) {
				t.Fatalf("Claim = %v, want ErrStateMissing", err)
			}
		},
	}
	for name, test := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			test(t, client, newStore(client, 3, 0))
		})
	}
}

// TestStateWriteAnswerLost: a state write whose connection is cut (the
// runner API's pod killed mid-request) neither fails the run nor loses the
// state, whether or not the write landed; a write that lost a real race is
// still fenced.
func TestStateWriteAnswerLost(t *testing.T) {
	random := make([]byte, 200<<10) // incompressible: two chunks
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		state     []byte
		landed    bool // the cut write reached the API before its answer was lost
		raced     bool // another run wrote the head in between
		wantFence bool
	}{
		"inline, landed":         {state: []byte(`{"serial":2}`), landed: true},
		"inline, not landed":     {state: []byte(`{"serial":2}`)},
		"chunked, landed":        {state: random, landed: true},
		"chunked, not landed":    {state: random},
		"another run wrote last": {state: []byte(`{"serial":2}`), raced: true, wantFence: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			s := newStore(client, 2, 128<<10)
			if err := s.Claim(ctx, "run-1", false); err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, []byte(`{"serial":1}`)); err != nil {
				t.Fatal(err)
			}
			cut, chunkCut := false, false
			client.PrependReactor("create", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
				sec := action.(k8stesting.CreateAction).GetObject().(*corev1.Secret)
				if chunkCut || sec.Labels[names.LabelSecretType] != names.SecretTypeStateChunk {
					return false, nil, nil
				}
				chunkCut = true // the first chunk lands, its answer is lost
				if err := client.Tracker().Create(action.GetResource(), sec, "ns"); err != nil {
					return true, nil, err
				}
				return true, nil, io.ErrUnexpectedEOF
			})
			// resourceVersion fencing, which the fake tracker does not do,
			// and one cut connection on the next write of the head.
			client.PrependReactor("update", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
				sec := action.(k8stesting.UpdateAction).GetObject().(*corev1.Secret).DeepCopy()
				current, err := client.Tracker().Get(action.GetResource(), "ns", sec.Name)
				if err != nil {
					return true, nil, err
				}
				rv := current.(*corev1.Secret).ResourceVersion
				if sec.ResourceVersion != rv {
					return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), sec.Name, errors.New("changed"))
				}
				n, _ := strconv.Atoi(rv)
				sec.ResourceVersion = strconv.Itoa(n + 1)
				if sec.Name == "tfc-c-state" && !cut {
					cut = true
					if tc.raced {
						other := current.(*corev1.Secret).DeepCopy()
						other.Annotations[AnnotationHolder] = "run-2"
						other.ResourceVersion = sec.ResourceVersion
						_ = client.Tracker().Update(action.GetResource(), other, "ns")
					} else if tc.landed {
						_ = client.Tracker().Update(action.GetResource(), sec, "ns")
					}
					return true, nil, io.ErrUnexpectedEOF
				}
				return true, sec, client.Tracker().Update(action.GetResource(), sec, "ns")
			})
			err := s.Write(ctx, tc.state)
			if tc.wantFence {
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("Write = %v, want ErrFenced", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Write = %v", err)
			}
			got, err := newStore(client, 2, 128<<10).Read(ctx)
			if err != nil || !bytes.Equal(got, tc.state) {
				t.Fatalf("read back %d bytes (%v), wrote %d", len(got), err, len(tc.state))
			}
			if err := s.MarkApplied(ctx); err != nil {
				t.Fatalf("MarkApplied after the cut write: %v", err)
			}
		})
	}
}

// TestRestoreStreamsChunks: a restore (and the backup of the state it
// replaces) copies a chunk at a time, each written before the next is
// read, so the manager never holds more than one chunk of a state however
// big a backup a module wrote; a forged backup that fails a check leaves
// no chunk of its copy and the state as it was.
func TestRestoreStreamsChunks(t *testing.T) {
	random := make([]byte, 5*(64<<10)) // incompressible: five or six chunks of 64 KiB
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		forge   func(t *testing.T, client *fake.Clientset, backup string) // as module code may, through the runner API
		wantErr string
	}{
		"intact": {},
		"a chunk changed": {
			forge: func(t *testing.T, client *fake.Clientset, backup string) {
				chunk := names.Object{Kind: "tfc", Name: "c"}.BackupChunk(backup, 2)
				sec, err := client.CoreV1().Secrets("ns").Get(context.Background(), chunk, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sec.Data[dataKey][10] ^= 0xff
				if _, err := client.CoreV1().Secrets("ns").Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "gzip: invalid checksum",
		},
		"more chunks than the limit": {
			forge: func(t *testing.T, client *fake.Clientset, backup string) {
				sec, err := client.CoreV1().Secrets("ns").Get(context.Background(), backup, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				sec.Annotations[annotationChunks] = "100000"
				if _, err := client.CoreV1().Secrets("ns").Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "over the size limit",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			s := newStore(client, 5, 64<<10)
			if err := s.Write(ctx, random); err != nil {
				t.Fatal(err)
			}
			next := newStore(client, 5, 64<<10) // the next run backs up the state it found
			if err := next.Write(ctx, append([]byte("x"), random...)); err != nil {
				t.Fatal(err)
			}
			backup := next.LastBackup
			if tc.forge != nil {
				tc.forge(t, client, backup)
			}
			before, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
			chunksBefore := countChunks(t, client)
			client.ClearActions()
			r := newStore(client, 5, 64<<10)
			r.Clock = testingclock.NewFakePassiveClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
			if err := r.Claim(ctx, "restorer", true); err != nil {
				t.Fatal(err)
			}
			err := r.Restore(ctx, backup)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Restore = %v, want an error with %q", err, tc.wantErr)
				}
				after, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
				if after.Annotations[annotationGeneration] != before.Annotations[annotationGeneration] {
					t.Errorf("the state changed to generation %s", after.Annotations[annotationGeneration])
				}
				// Nothing is left of it: no chunk of the copy, no backup of
				// the current state (which the restore makes last).
				if got := countChunks(t, client); got != chunksBefore || r.LastBackup != "" {
					t.Errorf("%d chunk Secrets and backup %q after a failed restore, want %d and none", got, r.LastBackup, chunksBefore)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Every chunk read is written before the next chunk is read.
			var order []string
			for _, a := range client.Actions() {
				switch a := a.(type) {
				case k8stesting.GetAction:
					if a.GetVerb() == "get" && chunkName.MatchString(a.GetName()) {
						order = append(order, "get "+a.GetName())
					}
				case k8stesting.CreateAction:
					if sec := a.GetObject().(*corev1.Secret); a.GetVerb() == "create" && strings.HasSuffix(sec.Labels[names.LabelSecretType], "chunk") {
						order = append(order, "create "+sec.Name)
					}
				}
			}
			if got, err := r.Read(ctx); err != nil || !bytes.Equal(got, random) {
				t.Fatalf("restored state: %d bytes, %v; want the backup's %d", len(got), err, len(random))
			}
			// What follows the last write deletes the replaced chunks.
			for len(order) > 0 && strings.HasPrefix(order[len(order)-1], "get") {
				order = order[:len(order)-1]
			}
			for i := 1; i < len(order); i++ {
				if strings.HasPrefix(order[i], "get") && strings.HasPrefix(order[i-1], "get") {
					t.Fatalf("two chunks read without a write between them: %v", order)
				}
			}
			if len(order) < 4 {
				t.Fatalf("chunk reads and writes: %v, want a copy of each chunk", order)
			}
		})
	}
}

// chunkName matches the names of state and backup chunks.
var chunkName = regexp.MustCompile(`(-state-\d+|-backup-\d{8}-\d{6}(-\d+)?)-\d+$`)

func countChunks(t *testing.T, client *fake.Clientset) int {
	t.Helper()
	n := 0
	for _, typ := range []string{names.SecretTypeStateChunk, names.SecretTypeBackupChunk} {
		list, err := client.CoreV1().Secrets("ns").List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelSecretType + "=" + typ})
		if err != nil {
			t.Fatal(err)
		}
		n += len(list.Items)
	}
	return n
}

// TestRestoreReplacesABrokenState: the state being replaced is backed up
// without being decompressed, so a current state that is no longer gzip
// (module code can write one) does not block the restore that repairs it.
func TestRestoreReplacesABrokenState(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	if err := newStore(client, 5, 0).Write(ctx, []byte(`{"serial":1}`)); err != nil {
		t.Fatal(err)
	}
	next := newStore(client, 5, 0)
	if err := next.Write(ctx, []byte(`{"serial":2}`)); err != nil {
		t.Fatal(err)
	}
	head, err := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte("not gzip at all")
	head.Data[dataKey] = junk
	head.Annotations[annotationSHA256] = hex.EncodeToString(sha256Of(junk))
	if _, err := client.CoreV1().Secrets("ns").Update(ctx, head, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := newStore(client, 5, 0)
	r.Clock = testingclock.NewFakePassiveClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	if err := r.Claim(ctx, "restorer", true); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(ctx, next.LastBackup); err != nil {
		t.Fatalf("restoring over a broken state: %v", err)
	}
	if got, err := r.Read(ctx); err != nil || string(got) != `{"serial":1}` {
		t.Errorf("restored state %q, %v", got, err)
	}
	kept, err := client.CoreV1().Secrets("ns").Get(ctx, r.LastBackup, metav1.GetOptions{})
	if err != nil || !bytes.Equal(kept.Data[dataKey], junk) {
		t.Errorf("the replaced state is not kept as it was in backup %q: %v", r.LastBackup, err)
	}
}

// enforceResourceVersions makes client's Secrets (or the resources named)
// behave as the API server's: each write gets a new resourceVersion, and an update naming
// another one than the stored object's is a conflict. The fake tracker
// alone accepts any update, so no test could see a write that is not
// fenced.
func enforceResourceVersions(client *fake.Clientset, resources ...string) {
	rv := 0
	if len(resources) == 0 {
		resources = []string{"secrets"}
	}
	for _, resource := range resources {
		enforceResourceVersionsOf(client, resource, &rv)
	}
}

func enforceResourceVersionsOf(client *fake.Clientset, resource string, counter *int) {
	rv := counter
	client.PrependReactor("*", resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		tracker := client.Tracker()
		// By verb: an UpdateAction is a CreateAction too.
		switch a.GetVerb() {
		case "create":
			obj := a.(k8stesting.CreateAction).GetObject().DeepCopyObject()
			*rv++
			obj.(metav1.Object).SetResourceVersion(strconv.Itoa(*rv))
			return true, obj, tracker.Create(a.GetResource(), obj, a.GetNamespace())
		case "update":
			obj := a.(k8stesting.UpdateAction).GetObject().DeepCopyObject()
			meta := obj.(metav1.Object)
			current, err := tracker.Get(a.GetResource(), a.GetNamespace(), meta.GetName())
			if err != nil {
				return true, nil, err
			}
			// No resourceVersion: an unconditional update, as the API allows.
			if meta.GetResourceVersion() != "" && current.(metav1.Object).GetResourceVersion() != meta.GetResourceVersion() {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), meta.GetName(), errors.New("the object has been modified"))
			}
			*rv++
			meta.SetResourceVersion(strconv.Itoa(*rv))
			return true, obj, tracker.Update(a.GetResource(), obj, a.GetNamespace())
		}
		return false, nil, nil
	})
}

// TestStateWritesAreFenced: once another run has claimed the state, no
// write of the run it replaced lands, neither a state nor the mark of an
// applied one: each is ErrFenced, and the other run's claim stays.
func TestStateWritesAreFenced(t *testing.T) {
	ctx := context.Background()
	tests := map[string]func(s *StateStore) error{
		"a state":      func(s *StateStore) error { return s.Write(ctx, []byte(`{"serial":9}`)) },
		"applied mark": func(s *StateStore) error { return s.MarkApplied(ctx) },
	}
	for name, write := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			enforceResourceVersions(client)
			if err := newStore(client, 3, 0).Write(ctx, []byte(`{"serial":1}`)); err != nil {
				t.Fatal(err)
			}
			old := newStore(client, 3, 0)
			if err := old.Claim(ctx, "old-run", true); err != nil {
				t.Fatal(err)
			}
			if err := newStore(client, 3, 0).Claim(ctx, "new-run", true); err != nil {
				t.Fatal(err)
			}
			if err := write(old); !errors.Is(err, ErrFenced) {
				t.Fatalf("the replaced run's write: %v, want ErrFenced", err)
			}
			head, err := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if h := head.Annotations[AnnotationHolder]; h != "new-run" {
				t.Errorf("the state's holder is %q, want new-run", h)
			}
			if got, err := newStore(client, 3, 0).Read(ctx); err != nil || string(got) != `{"serial":1}` {
				t.Errorf("state = %s, %v; want the one before", got, err)
			}
		})
	}
}

// TestAClaimedStateIsReadOnce: terraform reads the state once per command;
// after a claim those reads cost the chunks' GETs once, and after a write
// nothing. A store that re-read the state Secret each time fails this.
func TestAClaimedStateIsReadOnce(t *testing.T) {
	ctx := context.Background()
	random := make([]byte, 300<<10) // incompressible: three 128 KiB chunks
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	if err := newStore(client, 0, 128<<10).Write(ctx, random); err != nil {
		t.Fatal(err)
	}
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "secrets" {
				n++
			}
		}
		return n
	}
	s := newStore(client, 0, 128<<10)
	if err := s.Claim(ctx, "run-2", true); err != nil {
		t.Fatal(err)
	}
	before := gets()
	for i := range 3 {
		got, err := s.Read(ctx)
		if err != nil || !bytes.Equal(got, random) {
			t.Fatalf("read %d after the claim: %d bytes, %v; want the state", i, len(got), err)
		}
	}
	if n := gets() - before; n != 3 {
		t.Errorf("three reads after a claim made %d GETs, want the 3 chunks' once", n)
	}
	next := []byte(`{"serial":2}`)
	if err := s.Write(ctx, next); err != nil {
		t.Fatal(err)
	}
	before = gets()
	if got, err := s.Read(ctx); err != nil || !bytes.Equal(got, next) {
		t.Fatalf("read after a write: %s, %v; want what was written", got, err)
	}
	if n := gets() - before; n != 0 {
		t.Errorf("a read after a write made %d GETs, want none", n)
	}

	// A check of a drift run reads as little.
	ro := newStore(client, 0, 128<<10)
	if err := ro.CheckReadOnly(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	before = gets()
	for range 2 {
		if got, err := ro.Read(ctx); err != nil || !bytes.Equal(got, next) {
			t.Fatalf("a read-only read: %s, %v", got, err)
		}
	}
	if n := gets() - before; n != 0 {
		t.Errorf("reads after a read-only check made %d GETs, want none (the state is inline)", n)
	}
}

// TestAClaimedStateOutlivesItsSecret: the state Secret deleted while a run
// holds it (a careless kubectl delete): terraform's later reads still get
// the state the run claimed, never none (which would plan every resource
// anew), and the run's write fails rather than make a state from nothing.
func TestAClaimedStateOutlivesItsSecret(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	enforceResourceVersions(client)
	if err := newStore(client, 0, 0).Write(ctx, []byte(`{"serial":1}`)); err != nil {
		t.Fatal(err)
	}
	s := newStore(client, 0, 0)
	if err := s.Claim(ctx, "run-2", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Secrets("ns").Delete(ctx, "tfc-c-state", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(ctx); err != nil || string(got) != `{"serial":1}` {
		t.Errorf("a read after the state Secret went: %s, %v; want the claimed state", got, err)
	}
	if err := s.Write(ctx, []byte(`{"serial":2}`)); err == nil {
		t.Error("a write after the state Secret went succeeded; want an error")
	}
	if _, err := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{}); err == nil {
		t.Error("the write made a new state Secret")
	}
}

// TestClaimRequests: the claim of an object never applied creates its state
// Secret without reading it first; one that finds a Secret there reads it
// and claims it as the claim of an applied object does, refusing another
// object's.
func TestClaimRequests(t *testing.T) {
	ctx := context.Background()
	empty := func() *corev1.Secret { // left by a first apply that failed
		s := newStore(fake.NewClientset(), 0, 0).newSecret("tfc-c-state", names.SecretTypeState)
		s.Annotations[names.AnnotationObjectName], s.Labels[names.LabelKind] = "c", "tfc"
		return s
	}
	other := empty()
	other.Annotations[names.AnnotationObjectName] = "another"
	abandoned := empty() // a former object of this name let it go
	abandoned.Labels[names.LabelAbandoned] = "true"
	tests := map[string]struct {
		new      bool
		existing *corev1.Secret
		want     []string
		wantErr  error
		// loseCreate: the create's answer is lost; the claim is tried again.
		loseCreate bool
	}{
		"a new object, the create's answer lost: the retry finds its own": {new: true, loseCreate: true, want: []string{"create", "get", "update"}},
		"a new object: created at once":                                   {new: true, want: []string{"create"}},
		"an object applied before: read, then claimed":                    {existing: empty(), want: []string{"get", "update"}},
		"new, but a first apply that failed left one":                     {new: true, existing: empty(), want: []string{"create", "get", "update"}},
		"new, but another object's is there: refused":                     {new: true, existing: other, want: []string{"create", "get"}, wantErr: ErrOtherOwner},
		"an abandoned state of this name: refused":                        {existing: abandoned, want: []string{"get"}, wantErr: ErrOtherOwner},
		"not known to be new, and none there: read first":                 {want: []string{"get", "create"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.existing != nil {
				client = fake.NewClientset(tc.existing)
			}
			if tc.loseCreate {
				client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
					client.ReactionChain = client.ReactionChain[1:]
					if err := client.Tracker().Create(a.GetResource(), a.(k8stesting.CreateAction).GetObject(), "ns"); err != nil {
						t.Fatal(err)
					}
					return true, nil, io.ErrUnexpectedEOF
				})
			}
			s := newStore(client, 0, 0)
			s.New = tc.new
			err := s.Claim(ctx, "pod-uid", false)
			if tc.loseCreate && errors.Is(err, io.ErrUnexpectedEOF) {
				err = s.Claim(ctx, "pod-uid", false) // as retry.Transiently does
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Claim = %v, want %v", err, tc.wantErr)
			}
			var verbs []string
			for _, a := range client.Actions() {
				verbs = append(verbs, a.GetVerb())
			}
			if !slices.Equal(verbs, tc.want) {
				t.Errorf("requests %v, want %v", verbs, tc.want)
			}
			if err != nil {
				return
			}
			head, _ := client.CoreV1().Secrets("ns").Get(ctx, "tfc-c-state", metav1.GetOptions{})
			if head.Annotations[AnnotationHolder] != "pod-uid" {
				t.Errorf("state holder %q, want the claim's", head.Annotations[AnnotationHolder])
			}
		})
	}
}

// TestClaimPlanned: an apply checks the state read-only, plans, and claims
// only once its plan may apply; the claim takes the state the plan was made
// from, or fences the run.
func TestClaimPlanned(t *testing.T) {
	tests := map[string]struct {
		state string // "" none
		// between runs after the check: another write, or the claim's own
		// write whose answer is lost.
		otherWrite, loseAnswer, appears bool
		wantErr                         error
	}{
		"the state checked is claimed":                    {state: `{"serial":1}`},
		"no state yet: the claim creates one":             {},
		"a write since the plan makes it stale":           {state: `{"serial":1}`, otherWrite: true, wantErr: ErrChangedSincePlan},
		"a state that appeared since makes it stale":      {appears: true, wantErr: ErrChangedSincePlan},
		"the claim's own answer lost: the retry finds it": {state: `{"serial":1}`, loseAnswer: true},
		"a create's own answer lost: the retry finds it":  {loseAnswer: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset()
			enforceResourceVersions(client)
			if tc.state != "" {
				if err := newStore(client, 0, 0).Write(ctx, []byte(tc.state)); err != nil {
					t.Fatal(err)
				}
			}
			s := newStore(client, 0, 0)
			if err := s.CheckReadOnly(ctx, "", false); err != nil {
				t.Fatal(err)
			}
			if err := s.Write(ctx, []byte(`{"serial":9}`)); err == nil {
				t.Fatal("a write after a read-only check passed")
			}
			switch {
			case tc.otherWrite:
				if err := newStore(client, 0, 0).Write(ctx, []byte(`{"serial":2}`)); err != nil {
					t.Fatal(err)
				}
			case tc.appears:
				if err := newStore(client, 0, 0).Write(ctx, []byte(`{"serial":1}`)); err != nil {
					t.Fatal(err)
				}
			}
			lost := tc.loseAnswer
			client.PrependReactor("*", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if lost && (a.GetVerb() == "create" || a.GetVerb() == "update") {
					lost = false
					// The write lands, its answer does not.
					_, _, err := client.ReactionChain[1].React(a)
					if err != nil {
						t.Fatal(err)
					}
					return true, nil, apierrors.NewTimeoutError("the answer was lost", 1)
				}
				return false, nil, nil
			})
			err := s.ClaimPlanned(ctx, "run-2")
			if tc.loseAnswer {
				if err == nil {
					t.Fatal("the first claim's answer was lost, yet it returned no error")
				}
				err = s.ClaimPlanned(ctx, "run-2")
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ClaimPlanned: %v, want %v", err, tc.wantErr)
			}
			head, gerr := client.CoreV1().Secrets("ns").Get(ctx, s.Object.State(), metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if claimed := head.Annotations[AnnotationHolder] == "run-2"; claimed != (tc.wantErr == nil) {
				t.Errorf("the state claimed: %v, want %v", claimed, tc.wantErr == nil)
			}
			if tc.wantErr != nil {
				return
			}
			if err := s.Write(ctx, []byte(`{"serial":3}`)); err != nil {
				t.Errorf("a write after the claim: %v", err)
			}
		})
	}
}
