package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// TestRestoreState: captf.io/restore-state makes a backup the current state
// (the current one becomes a backup first), once; the next plan works from
// it. An unknown backup name changes nothing and says so.
func TestRestoreState(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("restore", e.newCluster("restore", false), map[string]any{"instances": 1}))
	e.waitFor("restore", 2*time.Minute, "Ready", isReady)
	e.update("restore", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 2, "instance_dir": e.instances})
	})
	e.waitFor("restore", 2*time.Minute, "2 instances", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && len(e.instanceFiles()) == 2
	})
	n := names.Object{Kind: "tfc", Name: "restore"}
	state, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, n.State(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backups, err := plane.Kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelSecretType + "=" + names.SecretTypeBackup})
	if err != nil || len(backups.Items) != 1 {
		t.Fatalf("backups %v (%v), want the one state before the second apply", backups, err)
	}
	oneInstance := backups.Items[0].Name

	// An unknown backup: a condition, nothing changed.
	unknown := n.Backup("20200101-000000")
	e.update("restore", func(tc *infrav1.TerraformCluster) {
		tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: unknown}
	})
	tc := e.waitFor("restore", time.Minute, "BackupNotFound", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionStateRestored)
		return c != nil && c.Reason == workspace.ReasonBackupNotFound
	})
	if msg := condition(tc, infrav1.ConditionStateRestored).Message; !strings.Contains(msg, unknown+", which is not a state backup of this object; nothing was changed") || !strings.Contains(msg, oneInstance) {
		t.Errorf("StateRestored message %q", msg)
	}
	if now, _ := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, n.State(), metav1.GetOptions{}); now.ResourceVersion != state.ResourceVersion {
		t.Errorf("the state Secret changed after a restore of an unknown backup")
	}
	if ev := findEvent(t, e.ns, "restore", workspace.ReasonBackupNotFound); ev == nil {
		t.Errorf("no BackupNotFound event")
	}

	// The real backup: restored once, the annotation goes, and the next
	// plan starts from the one-instance state (it adds the second again).
	e.update("restore", func(tc *infrav1.TerraformCluster) {
		tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: oneInstance}
	})
	tc = e.waitFor("restore", 2*time.Minute, "restored and applied again", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionStateRestored)
		return c != nil && c.Reason == workspace.ReasonRestored && isReady(tc) &&
			tc.Status.LastRestore != nil && !tc.Status.LastAppliedTime.Before(&tc.Status.LastRestore.Time) &&
			condition(tc, infrav1.ConditionReady).Reason == workspace.ReasonApplied
	})
	if _, ok := tc.Annotations[infrav1.AnnotationRestoreState]; ok {
		t.Errorf("the restore annotation is still there")
	}
	if lr := tc.Status.LastRestore; lr == nil || lr.Backup != oneInstance || lr.PreviousState == "" {
		t.Errorf("status.lastRestore = %+v", lr)
	}
	if s := tc.Status.LastPlan.Summary; s.Add != 1 || s.Destroy != 0 {
		t.Errorf("the plan after the restore %+v, want it to add the instance the restored state lacks", s)
	}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, tc.Status.LastRestore.PreviousState, metav1.GetOptions{}); err != nil {
		t.Errorf("the state before the restore is not kept as backup %s: %v", tc.Status.LastRestore.PreviousState, err)
	}
	if ev := findEvent(t, e.ns, "restore", infrav1.ConditionStateRestored); ev == nil {
		t.Errorf("no StateRestored event")
	}
	// Once: no further restore or apply.
	applies := len(e.jobs("apply"))
	e.never(3*time.Second, func() error {
		if now := e.get("restore"); now.Status.LastRestore.Time != tc.Status.LastRestore.Time || len(e.jobs("apply")) != applies {
			return errors.New("the restore or its apply ran again")
		}
		return nil
	})
}

// TestDefaultBackupsKept: with the manager's defaults, every apply that
// changes the state keeps the state before it, and the newest 5 stay. (No
// instances: only the outputs change, so no plan waits for approval.)
func TestDefaultBackupsKept(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("kept", e.newCluster("kept", false), map[string]any{"instances": 0, "zones": []string{"zone-0"}}))
	e.waitFor("kept", 2*time.Minute, "Ready", isReady)
	var made []string
	for i := 1; i <= 6; i++ {
		zone := fmt.Sprintf("zone-%d", i)
		e.update("kept", func(tc *infrav1.TerraformCluster) {
			setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 0, "zones": []string{zone}, "instance_dir": e.instances})
		})
		e.waitFor("kept", 2*time.Minute, "applied with "+zone, func(tc *infrav1.TerraformCluster) bool {
			return isReady(tc) && len(tc.Status.FailureDomains) == 1 && tc.Status.FailureDomains[0].Name == zone
		})
		for _, b := range backupNames(t, e.ns) {
			if !slices.Contains(made, b) {
				made = append(made, b)
			}
		}
	}
	if len(made) != 6 {
		t.Fatalf("backups made %v, want one per apply after the first", made)
	}
	kept := backupNames(t, e.ns) // newest first
	slices.Sort(made)
	slices.Reverse(made)
	if want := made[:5]; !slices.Equal(kept, want) {
		t.Errorf("backups kept %v, want the newest 5 %v", kept, want)
	}
}

// TestForgedBackupCannotExhaustTheManager (issue 30, item 3): module code
// may write Secrets of its own object's state family through the runner
// API, a backup among them, as large as --max-state-bytes allows; a tenant
// then asks the manager to restore it. The manager streams the restore a
// chunk at a time: its peak memory does not grow with the backup, it is
// never killed, and the restore is carried out.
func TestForgedBackupCannotExhaustTheManager(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManagerWithWebhook()
	tn := e.newTenant()
	e.create(e.localCloud("forged", e.newCluster("forged", false), map[string]any{"instances": 0}))
	e.waitFor("forged", 2*time.Minute, "Ready", isReady)

	// 96 MiB that do not compress, gzip-compressed into 128 chunks of 768
	// KiB: what the runner API lets a run write (chunks in order, under
	// the size limit), as a rescued state the webhook lets the tenant name.
	big := make([]byte, 96<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	obj := names.Object{Kind: "tfc", Name: "forged"}
	module := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: obj,
		Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}}
	backup, err := module.SaveRescue(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	big = nil
	t.Cleanup(func() { deleteStateFamily(t, e.ns, obj) }) // 200 MiB in etcd: not for the tests after this one

	before := procStatus(t, m.Pid())
	tc := e.get("forged")
	tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: backup}
	if _, err := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Update(ctx, tc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("forged", 5*time.Minute, "restored", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionStateRestored)
		return c != nil && (c.Reason == workspace.ReasonRestored || c.Reason == workspace.ReasonRestoreFailed)
	})
	if c := condition(e.get("forged"), infrav1.ConditionStateRestored); c.Reason != workspace.ReasonRestored {
		t.Errorf("StateRestored %s: %s", c.Reason, c.Message)
	}
	after := procStatus(t, m.Pid())
	// The bound is the point of the test, not a speed target: a manager
	// that held the backup whole would have grown by at least its 96 MiB.
	growth := after["VmHWM"] - before["VmRSS"]
	t.Logf("manager RSS before the restore %d MiB, peak after %d MiB (+%d MiB) for a %d MiB backup",
		before["VmRSS"]>>10, after["VmHWM"]>>10, growth>>10, 96)
	if growth > 48<<10 {
		t.Errorf("the manager's peak RSS grew by %d MiB restoring a 96 MiB backup: it holds more than a chunk at a time", growth>>10)
	}
	if m.Exited() {
		t.Errorf("the manager exited (code %d)", m.ExitCode())
	}
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, obj.State(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := statestore.StateSize(head); size != 96<<20 {
		t.Errorf("the restored state is %d bytes, want the backup's %d", size, 96<<20)
	}
}

// procStatus reads the sizes (in KiB) of /proc/<pid>/status.
func procStatus(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			out[k] = n
		}
	}
	return out
}

// deleteStateFamily deletes an object's state Secrets, chunks and backups.
func deleteStateFamily(t *testing.T, ns string, obj names.Object) {
	ctx := context.Background()
	opts := metav1.ListOptions{LabelSelector: names.LabelKind + "=" + obj.Kind + "," + names.LabelObjectName + "=" + obj.Name, Limit: 16}
	for {
		list, err := plane.Kube.CoreV1().Secrets(ns).List(ctx, opts)
		if err != nil {
			t.Error(err)
			return
		}
		for _, s := range list.Items {
			if err := statestore.DeleteStateSecret(ctx, plane.Kube.CoreV1().Secrets(ns), s.Name); err != nil {
				t.Error(err)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return
		}
	}
}
