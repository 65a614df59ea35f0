package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

// TestManagerHelp: `captf manager -h` exits 0 and lists CAPTF's flags and
// -v/-vmodule, none of klog's file and header flags.
func TestManagerHelp(t *testing.T) {
	out, err := exec.Command(captfBinary, "manager", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("captf manager -h: %v\n%s", err, out)
	}
	for _, want := range []string{"-v value", "-vmodule value", "-logging-format", "-watch-filter", "-metrics-secure", "-webhook-cert-dir"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("-h does not list %s", want)
		}
	}
	// Every flag has its line in the configuration page.
	doc, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllSubmatch(out, -1) {
		name := "--" + string(m[1])
		if len(m[1]) == 1 || string(m[1]) == "vmodule" {
			name = "-" + string(m[1])
		}
		if !bytes.Contains(doc, []byte("| `"+name+"` |")) {
			t.Errorf("docs/configuration.md has no line for %s", name)
		}
	}
	for _, klogOnly := range []string{"log_dir", "logtostderr", "add_dir_header", "skip_headers", "stderrthreshold", "one_output"} {
		if bytes.Contains(out, []byte(klogOnly)) {
			t.Errorf("-h lists klog's %s", klogOnly)
		}
	}
}

// TestJSONLogsAndWatchFilter: with --logging-format=json every line the
// manager logs is a JSON object; with --watch-filter it applies only the
// objects labelled with its value, and leaves the others to another
// instance.
func TestJSONLogsAndWatchFilter(t *testing.T) {
	e := newEnv(t)
	m := e.startManager("--logging-format=json", "--watch-filter=canary")
	// Cluster API's convention: the user labels the Cluster and its
	// infrastructure alike.
	cluster := e.newCluster("mine", false)
	patch := []byte(`{"metadata":{"labels":{"` + capi.WatchFilterLabel + `":"canary"}}}`)
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Patch(context.Background(), "mine", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mine := e.localCloud("mine", cluster, map[string]any{"instances": 1})
	mine.Labels[capi.WatchFilterLabel] = "canary"
	e.create(mine)
	other := e.localCloud("other", e.newCluster("other", false), map[string]any{"instances": 1})
	e.create(other)
	e.waitFor("mine", 2*time.Minute, "Ready", isReady)
	// The other had as long as the first took to apply, and more.
	e.never(3*time.Second, func() error {
		if tc := e.get("other"); len(tc.Finalizers) > 0 || len(tc.Status.Conditions) > 0 {
			return fmt.Errorf("the manager touched an object outside its watch filter: finalizers %v, conditions %v", tc.Finalizers, tc.Status.Conditions)
		}
		return nil
	})
	for _, j := range e.jobs("") {
		if !strings.HasPrefix(j.Name, "tfc-mine-") {
			t.Errorf("Job %s is not for the filtered object", j.Name)
		}
	}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(m.LogFile)
		return bytes.Contains(b, []byte(`"Created Job"`)), nil
	})
	if err != nil {
		t.Error("no \"Created Job\" message in the JSON log")
	}
	b, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var entry map[string]any
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			t.Errorf("a log line that is not JSON: %q", sc.Text())
			continue
		}
		if entry["msg"] == nil || entry["time"] == nil || entry["level"] == nil {
			t.Errorf("a JSON log line without msg, time or level: %q", sc.Text())
		}
		lines++
	}
	if lines < 10 {
		t.Errorf("%d JSON log lines", lines)
	}
}

// TestShards: two managers with --leader-elect and different watch filters
// split a fleet: each leads at once through its own Lease and applies
// exactly its shard's objects; neither creates a Job for the other's.
func TestShards(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	managers := map[string]*framework.Manager{}
	for _, shard := range []string{"shard-a", "shard-b"} {
		managers[shard] = e.startManager("--leader-elect", "--watch-filter="+shard)
	}
	for _, shard := range []string{"shard-a", "shard-b"} {
		name := "in-" + shard
		cluster := e.newCluster(name, false)
		patch := []byte(`{"metadata":{"labels":{"` + capi.WatchFilterLabel + `":"` + shard + `"}}}`)
		if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		tc := e.localCloud(name, cluster, map[string]any{"instances": 1})
		tc.Labels[capi.WatchFilterLabel] = shard
		e.create(tc)
	}
	for _, shard := range []string{"shard-a", "shard-b"} {
		e.waitFor("in-"+shard, 2*time.Minute, "Ready", isReady)
	}
	for shard := range managers {
		lease, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(ctx, names.LeaderLease(shard), metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			t.Errorf("the Lease of %s: %v %+v", shard, err, lease)
		}
	}
	// Each manager syncs its shard's objects and no other's: with shard-b's
	// manager stopped, a change to each object is seen (observedGeneration)
	// in shard-a only, until shard-b's manager is back.
	managers["shard-b"].Stop()
	for _, shard := range []string{"shard-a", "shard-b"} {
		e.update("in-"+shard, func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs.LockTimeout = &metav1.Duration{Duration: 30 * time.Second}
		})
	}
	e.observed("in-shard-a")
	e.never(3*time.Second, func() error {
		if tc := e.get("in-shard-b"); tc.Status.ObservedGeneration == tc.Generation {
			return fmt.Errorf("shard-a's manager synced shard-b's object (generation %d observed)", tc.Generation)
		}
		return nil
	})
	if err := managers["shard-b"].Restart(); err != nil {
		t.Fatal(err)
	}
	e.observed("in-shard-b")
	if len(e.jobs("apply")) != 2 {
		t.Errorf("apply Jobs %d, want one per object", len(e.jobs("apply")))
	}
}
