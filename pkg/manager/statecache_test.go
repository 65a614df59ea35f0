package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// stateHead is the metadata of a state Secret as the metadata informer
// gets it, once the runner of a machine has written its state six times
// (with five backups) and holds it for a drift check.
func stateHead(b *testing.B) []byte {
	ctx := context.Background()
	kube := fake.NewClientset()
	obj := names.Object{Kind: "tfm", Name: "pool-a-md-0-00000"}
	start := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	for i := range 6 {
		store := &statestore.StateStore{Client: kube, Namespace: "fleet", Object: obj, Backups: 5,
			Labels: names.ObjectLabels("TerraformMachine", obj.Name, "29b33912-8e3a-4907-b3a1-000000000000"),
			Clock:  testingclock.NewFakePassiveClock(start.Add(time.Duration(i) * time.Minute))}
		if err := store.Claim(ctx, fmt.Sprintf("tfm-%s-apply-a339ee24-%d", obj.Name, i), i > 0); err != nil {
			b.Fatal(err)
		}
		if err := store.Write(ctx, []byte(fmt.Sprintf(`{"version":4,"serial":%d,"lineage":"5f0c3b1e-6d4a-4d1c-9a57-3f1c1c0e2a11"}`, i))); err != nil {
			b.Fatal(err)
		}
		if err := store.MarkApplied(ctx); err != nil {
			b.Fatal(err)
		}
	}
	head, err := kube.CoreV1().Secrets("fleet").Get(ctx, obj.State(), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	head.UID, head.ResourceVersion = "d76ae80b-94e3-43fa-a943-000000000000", "100000"
	head.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "captf", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &metav1.Time{Time: start}}}
	data, err := json.Marshal(&metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: head.ObjectMeta})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkStateSecretCache reports the heap a state head takes in the
// state Secrets' metadata informer, with the transform the manager sets
// and without its trim.
func BenchmarkStateSecretCache(b *testing.B) {
	const n = 10000
	head := string(stateHead(b))
	wire := make([][]byte, n)
	for i := range wire {
		// Every object's own name and UIDs, as in a fleet.
		id := fmt.Sprintf("%05d", i)
		wire[i] = []byte(strings.NewReplacer("00000\"", id+"\"", "00000-", id+"-", "000000000000", "0000000"+id).Replace(head))
	}
	for name, trim := range map[string]func(any) any{"trimmed": workspace.CacheStateSecret, "untrimmed": nil} {
		b.Run(name, func(b *testing.B) {
			perHead := heapPerObject(b, wire, func(data []byte) (any, error) {
				m := &metav1.PartialObjectMetadata{}
				return m, json.Unmarshal(data, m)
			}, cacheTransform(newSharedStrings(), trim), nil)
			b.ReportMetric(perHead, "B/secret")
		})
	}
}
