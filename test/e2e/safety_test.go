package e2e

// State safety (issue 10): one object, one state, and no path that loses,
// shares or orphans it. Each test is a way users, their tools or a hostile
// tenant lost state or infrastructure before.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
	"github.com/captf/captf/test/framework"
)

func tfcNames(name string) names.Object { return names.Object{Kind: "tfc", Name: name} }

// stateOf reads an object's current state as the runner would.
func (e *env) stateOf(name string) *tfState {
	e.t.Helper()
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: tfcNames(name)}
	b, err := store.Read(context.Background())
	if err != nil {
		e.t.Fatalf("state of %s: %v", name, err)
	}
	return parseState(e.t, b)
}

// abandonedState reads a state CAPTF no longer reads for any object.
func (e *env) abandonedState(name string) *tfState {
	e.t.Helper()
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), tfcNames(name).State(), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(head.Data["tfstate"]) == 0 {
		return &tfState{}
	}
	r, err := gzip.NewReader(bytes.NewReader(head.Data["tfstate"]))
	if err != nil {
		e.t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		e.t.Fatal(err)
	}
	return parseState(e.t, b)
}

type tfState struct {
	Resources []struct {
		Type      string            `json:"type"`
		Name      string            `json:"name"`
		Instances []json.RawMessage `json:"instances"`
	} `json:"resources"`
}

func parseState(t *testing.T, b []byte) *tfState {
	t.Helper()
	var s tfState
	if len(b) > 0 {
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
	}
	return &s
}

// instances counts the instances of terraform_data.instance in a state.
func (s *tfState) instances() int {
	for _, r := range s.Resources {
		if r.Type == "terraform_data" && r.Name == "instance" {
			return len(r.Instances)
		}
	}
	return 0
}

func (e *env) setVars(name string, vars map[string]any) {
	e.t.Helper()
	vars["instance_dir"] = e.instances
	e.update(name, func(tc *infrav1.TerraformCluster) { setVariables(&tc.Spec.WorkspaceSpec, vars) })
}

func (e *env) deleteTC(name string, policy metav1.DeletionPropagation) {
	e.t.Helper()
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		e.t.Fatal(err)
	}
}

func readyReason(reason string) func(*infrav1.TerraformCluster) bool {
	return func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == reason
	}
}

func gone(tc *infrav1.TerraformCluster) bool { return tc == nil }

// stateSecretNames lists the state, backup and durable-inputs Secrets of
// an object.
func (e *env) stateSecretNames(name string) []string {
	e.t.Helper()
	var out []string
	for _, s := range e.secrets() {
		if s.Annotations[names.AnnotationObjectName] == name {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestOneObjectOneState (defect 1): names that the old short form made
// collide (a dot, and the short form itself, chosen by a hostile tenant)
// and names that share a long prefix, as machines of a MachineDeployment do,
// each get their own state; a state recorded for another object is never
// used.
func TestOneObjectOneState(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	deployment := "workers-" + strings.Repeat("x", 30)
	pairs := [][2]string{
		{"victim.m1", "victim-m1-d4efb"}, // the short form main gave victim.m1
		{deployment + "-6f9c7d8b5-a1", deployment + "-6f9c7d8b5-b2"},
	}
	for i, pair := range pairs {
		for j, name := range pair {
			cluster := e.newClusterOf(strings.Join([]string{"c", string(rune('a' + i)), string(rune('a' + j))}, "-"), name, false)
			e.create(e.localCloud(name, cluster, map[string]any{}))
			e.waitFor(name, 2*time.Minute, "Ready", isReady)
		}
	}
	if files := e.instanceFiles(); len(files) != 4 {
		t.Errorf("instance files %v, want 4: one object planned against another's state", files)
	}
	for _, pair := range pairs {
		for _, name := range pair {
			if n := e.stateOf(name).instances(); n != 1 {
				t.Errorf("%s: %d instances in its state, want its own 1", name, n)
			}
		}
	}

	// A Secret whose recorded owner is another object: neither read nor
	// written, and the object says why; with CAPTF's labels (the manager
	// sees it before any Job) and without (the runner refuses it).
	for _, labelled := range []bool{true, false} {
		name := map[bool]string{true: "forged", false: "forged-unlabelled"}[labelled]
		var labels map[string]string
		if labelled {
			labels = map[string]string{names.LabelManagedBy: names.ManagedByValue}
		}
		forged := statestore.NewStateSecret(e.ns, tfcNames(name).State(), tfcNames("victim.m1"), names.SecretTypeState, labels)
		forged.Finalizers = nil
		forged, err := plane.Kube.CoreV1().Secrets(e.ns).Create(context.Background(), forged, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.create(e.localCloud(name, e.newCluster(name, false), map[string]any{}))
		tc := e.waitFor(name, time.Minute, "StateOwnedByOther", readyReason(workspace.ReasonStateOwnedByOther))
		if msg := condition(tc, infrav1.ConditionReady).Message; !strings.Contains(msg, `records tfc "victim.m1" as its owner`) {
			t.Errorf("%s: Ready message %q", name, msg)
		}
		if now, _ := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), forged.Name, metav1.GetOptions{}); now.ResourceVersion != forged.ResourceVersion {
			t.Errorf("%s: the forged state Secret was written", name)
		}
	}
	if files := e.instanceFiles(); len(files) != 4 {
		t.Errorf("instance files %v, want the 4: nothing for the forged states", files)
	}
}

// TestForegroundDeleteDestroys (defect 2): a foreground delete, as GitOps
// prunes do, used to let the garbage collector take the state first; the
// destroy then found nothing and the instance stayed. Now the instance is
// destroyed and then the state goes.
func TestForegroundDeleteDestroys(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	tc := e.create(e.localCloud("fg", e.newCluster("fg", false), map[string]any{"instances": 2}))
	e.waitFor("fg", 2*time.Minute, "Ready", isReady)
	// The garbage collector goes first (the manager restarts, or is slow):
	// everything the object owns is deleted before CAPTF looks.
	m.Stop()
	e.deleteTC("fg", metav1.DeletePropagationForeground)
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, s := range e.secrets() {
			for _, o := range s.OwnerReferences {
				if o.UID == tc.UID {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("the garbage collector never deleted what the object owns")
	}
	e.startManager()
	e.waitFor("fg", 2*time.Minute, "gone", gone)
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instances left behind: %v", files)
	}
	if left := e.stateSecretNames("fg"); len(left) != 0 {
		t.Errorf("state Secrets left after the destroy: %v", left)
	}
	if _, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(context.Background(), tfcNames("fg").Lock(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the state lock outlived the object: %v", err)
	}
}

// TestNamespaceDeleteKeepsState (defect 2): kubectl delete namespace used to
// take the state in seconds and leave every instance behind. No Job can run
// in a terminating namespace: the object stays, says so, and the state
// stays; abandoning lets the namespace go.
func TestNamespaceDeleteKeepsState(t *testing.T) {
	e := newEnv(t)
	// The manager's identity lives elsewhere: this namespace is deleted.
	home := newEnv(t)
	m, err := plane.StartManager(context.Background(), framework.ManagerOptions{Binary: captfBinary, Namespace: home.ns, Dir: t.TempDir(),
		Args: []string{"--namespace=" + e.ns}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	e.create(e.localCloud("doomed", e.newCluster("doomed", false), map[string]any{"instances": 2}))
	e.waitFor("doomed", 2*time.Minute, "Ready", isReady)
	if err := plane.Kube.CoreV1().Namespaces().Delete(context.Background(), e.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := e.waitFor("doomed", 2*time.Minute, "NamespaceTerminating", readyReason(workspace.ReasonNamespaceTerminating))
	msg := condition(tc, infrav1.ConditionReady).Message
	for _, want := range []string{"Namespace " + e.ns + " is being deleted", infrav1.AnnotationAbandonInfrastructure + "=true", "kubectl get secrets -n " + e.ns} {
		if !strings.Contains(msg, want) {
			t.Errorf("Ready message %q lacks %q", msg, want)
		}
	}
	// The namespace controller retries: nothing may go meanwhile.
	e.never(5*time.Second, func() error {
		if files := e.instanceFiles(); len(files) != 2 {
			return fmt.Errorf("instances %v, want both", files)
		}
		return nil
	})
	if n := e.stateOf("doomed").instances(); n != 2 {
		t.Errorf("state holds %d instances, want 2", n)
	}
	// No event: a terminating namespace takes no new Event either.

	e.annotate("doomed", infrav1.AnnotationAbandonInfrastructure, "true")
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Kube.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the namespace never went after the abandon: %v", err)
	}
	if files := e.instanceFiles(); len(files) != 2 {
		t.Errorf("abandoned instances %v, want both kept", files)
	}
}

// TestStateMissing (defect 3): a state Secret deleted by hand, then a
// change, used to create every resource again. Now nothing runs until a
// backup is restored, and the condition says how.
func TestStateMissing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	e.create(e.localCloud("lost", e.newCluster("lost", false), map[string]any{"api_port": 6443}))
	e.waitFor("lost", 2*time.Minute, "Ready", isReady)
	e.setVars("lost", map[string]any{"api_port": 6444})
	e.waitFor("lost", 2*time.Minute, "port 6444", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Spec.ControlPlaneEndpoint.Port != 0 && strings.Contains(string(tc.Status.Outputs["control_plane_endpoint"].Raw), "6444")
	})
	backups := backupNames(t, e.ns)
	if len(backups) != 1 {
		t.Fatalf("backups %v, want the state before the second apply", backups)
	}
	applies := len(e.jobs("apply"))

	// A careless cleanup: finalizer stripped, Secret deleted.
	secrets := plane.Kube.CoreV1().Secrets(e.ns)
	if _, err := secrets.Patch(ctx, tfcNames("lost").State(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, tfcNames("lost").State(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.setVars("lost", map[string]any{"api_port": 6445})
	tc := waitCondition(e, "lost", infrav1.ConditionStateMissing, "StateMissing", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	msg := condition(tc, infrav1.ConditionStateMissing).Message
	if want := "kubectl annotate terraformcluster -n " + e.ns + " lost " + infrav1.AnnotationRestoreState + "=" + backups[0]; !strings.Contains(msg, want) {
		t.Errorf("StateMissing message %q lacks %q", msg, want)
	}
	if c := condition(tc, infrav1.ConditionReady); c.Reason != workspace.ReasonStateMissing {
		t.Errorf("Ready %s: %s", c.Reason, c.Message)
	}
	if findEvent(t, e.ns, "lost", workspace.ReasonStateMissing) == nil {
		t.Error("no StateMissing event")
	}
	if body := e.scrape(m); !strings.Contains(body, `captf_state_missing{kind="TerraformCluster",name="lost",namespace="`+e.ns+`"} 1`) {
		t.Errorf("no captf_state_missing series:\n%s", grepLines(body, "captf_state"))
	}
	e.never(3*time.Second, func() error {
		if n := len(e.jobs("apply")); n != applies {
			return fmt.Errorf("%d apply Jobs, want %d: an apply ran on a missing state", n, applies)
		}
		return nil
	})

	// Restored, the change applies on the state it was made for.
	e.annotate("lost", infrav1.AnnotationRestoreState, backups[0])
	e.waitFor("lost", 2*time.Minute, "port 6445", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && strings.Contains(string(tc.Status.Outputs["control_plane_endpoint"].Raw), "6445")
	})
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instances %v, want the one", files)
	}
	if n := e.stateOf("lost").instances(); n != 1 {
		t.Errorf("state holds %d instances, want 1", n)
	}
	if c := condition(e.get("lost"), infrav1.ConditionStateMissing); c.Status != metav1.ConditionFalse {
		t.Errorf("StateMissing still %s", c.Status)
	}

	// Deleted with its state gone again: no destroy "of nothing", the
	// finalizer holds.
	if _, err := secrets.Patch(ctx, tfcNames("lost").State(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Delete(ctx, tfcNames("lost").State(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deleteTC("lost", metav1.DeletePropagationBackground)
	e.waitFor("lost", time.Minute, "StateMissing while deleted", readyReason(workspace.ReasonStateMissing))
	if jobs := e.jobs("destroy"); len(jobs) != 0 {
		t.Errorf("%d destroy Jobs on a missing state", len(jobs))
	}
	tc = e.get("lost")
	newest := backupNames(t, e.ns)[0]
	if msg := condition(tc, infrav1.ConditionStateMissing).Message; !strings.Contains(msg, infrav1.AnnotationRestoreState+"="+newest) {
		t.Errorf("StateMissing message %q does not name the newest backup %s", msg, newest)
	}
	e.annotate("lost", infrav1.AnnotationRestoreState, newest)
	e.waitFor("lost", 2*time.Minute, "destroyed", gone)
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instances left %v", files)
	}
}

func backupNames(t *testing.T, ns string) []string {
	t.Helper()
	list, err := plane.Kube.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelSecretType + "=" + names.SecretTypeBackup})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Secret) int { return strings.Compare(b.Name, a.Name) })
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	return out
}

// TestAbandonWaitsForTheJob (defect 4): abandoned and deleted while its
// first apply ran, an object used to go at once; the Job's state, written
// afterwards, was garbage-collected. Now the Job is stopped first and
// whatever it wrote stays, labelled abandoned.
func TestAbandonWaitsForTheJob(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	cluster := e.newCluster("quit", false)
	e.create(e.localCloud("quit", cluster, map[string]any{"sleep_seconds": 20}))
	e.runningPod("apply", time.Minute)
	e.waitLockHeld(tfcNames("quit").Lock())
	e.waitStateClaimed(tfcNames("quit").State()) // it applies
	e.annotate("quit", infrav1.AnnotationAbandonInfrastructure, "true")
	e.deleteTC("quit", metav1.DeletePropagationBackground)
	e.waitFor("quit", 3*time.Minute, "gone", gone)
	pods, err := plane.Kube.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			t.Errorf("pod %s still runs after the abandon", p.Name)
		}
	}
	state, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), tfcNames("quit").State(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the abandoned state: %v", err)
	}
	if state.Labels[names.LabelAbandoned] != "true" || len(state.Finalizers) != 0 || len(state.OwnerReferences) != 0 {
		t.Errorf("abandoned state: labels %v, finalizers %v, owners %v", state.Labels, state.Finalizers, state.OwnerReferences)
	}
	// Nothing exists the state does not record (the instance whose create
	// was stopped is recorded, tainted, whether or not it was made).
	if n, files := e.abandonedState("quit").instances(), e.instanceFiles(); n < len(files) {
		t.Errorf("state records %d instances, %d exist (%v)", n, len(files), files)
	}

	// An object of the same name does not take the abandoned state up on its
	// own; once the label goes, it does, and creates nothing twice.
	e.create(e.localCloud("quit", cluster, map[string]any{}))
	tc := e.waitFor("quit", time.Minute, "StateAbandoned", readyReason(workspace.ReasonStateAbandoned))
	if msg := condition(tc, infrav1.ConditionReady).Message; !strings.Contains(msg, names.LabelAbandoned+"-") {
		t.Errorf("Ready message %q does not say how to take the state up", msg)
	}
	if jobs := e.jobs("apply"); len(jobs) != 0 {
		t.Errorf("%d apply Jobs on an abandoned state", len(jobs))
	}
	for _, name := range e.stateSecretNames("quit") {
		if _, err := plane.Kube.CoreV1().Secrets(e.ns).Patch(context.Background(), name, types.JSONPatchType,
			[]byte(`[{"op":"remove","path":"/metadata/labels/captf.io~1abandoned"}]`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The stopped create left its instance tainted: replacing it waits for
	// an approver, as any replace does.
	tc = e.waitFor("quit", 2*time.Minute, "Ready or the tainted instance's replace waiting", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDestructivePlanBlocked)
		return isReady(tc) || c != nil && c.Status == metav1.ConditionTrue
	})
	if !isReady(tc) {
		e.annotate("quit", infrav1.AnnotationApproveDestructivePlan, tc.Status.LastPlan.Hash)
	}
	e.waitFor("quit", 2*time.Minute, "Ready", isReady)
	if n, files := e.stateOf("quit").instances(), e.instanceFiles(); n != 1 || len(files) != 1 {
		t.Errorf("state records %d instances, %v exist; want the one", n, files)
	}
}

// TestGzipBombRestore (defect 5): a forged backup that inflates past the
// limit, named in captf.io/restore-state, used to crash-loop the manager.
func TestGzipBombRestore(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	e.create(e.localCloud("bomb", e.newCluster("bomb", false), map[string]any{}))
	e.waitFor("bomb", 2*time.Minute, "Ready", isReady)
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range 512 { // 512 MiB of zeros, about 500 KiB compressed: over the default 128 MiB
		_, _ = w.Write(zeros)
	}
	_ = w.Close()
	n := tfcNames("bomb")
	bomb := statestore.NewStateSecret(e.ns, n.Backup("20990101-000000"), n, names.SecretTypeBackup, map[string]string{names.LabelManagedBy: names.ManagedByValue})
	bomb.Finalizers = nil
	bomb.Annotations["captf.io/backup-of"] = n.State()
	bomb.Annotations["captf.io/encoding"] = "gzip"
	bomb.Data = map[string][]byte{"tfstate": gz.Bytes()}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(context.Background(), bomb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.stateOf("bomb").instances()
	e.annotate("bomb", infrav1.AnnotationRestoreState, bomb.Name)
	tc := waitCondition(e, "bomb", infrav1.ConditionStateRestored, "BackupTooLarge", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Reason == workspace.ReasonBackupTooLarge
	})
	if msg := condition(tc, infrav1.ConditionStateRestored).Message; !strings.Contains(msg, "over 134217728 bytes") || !strings.Contains(msg, "nothing was changed") {
		t.Errorf("StateRestored message %q", msg)
	}
	if m.Exited() {
		t.Fatal("the manager died")
	}
	if after := e.stateOf("bomb").instances(); after != before {
		t.Errorf("state changed: %d instances, was %d", after, before)
	}
}

// TestRestoreKeepsItsBackup (defect 8): with one backup kept, restoring it
// used to rotate it away in the same write.
func TestRestoreKeepsItsBackup(t *testing.T) {
	e := newEnv(t)
	e.startManager("--state-backups=1")
	e.create(e.localCloud("keep", e.newCluster("keep", false), map[string]any{"api_port": 6443}))
	e.waitFor("keep", 2*time.Minute, "Ready", isReady)
	e.setVars("keep", map[string]any{"api_port": 6444})
	e.waitFor("keep", 2*time.Minute, "port 6444", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && strings.Contains(string(tc.Status.Outputs["control_plane_endpoint"].Raw), "6444")
	})
	backups := backupNames(t, e.ns)
	if len(backups) != 1 {
		t.Fatalf("backups %v, want 1", backups)
	}
	e.annotate("keep", infrav1.AnnotationRestoreState, backups[0])
	waitCondition(e, "keep", infrav1.ConditionStateRestored, "Restored", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Reason == workspace.ReasonRestored
	})
	if now := backupNames(t, e.ns); !slices.Contains(now, backups[0]) {
		t.Errorf("backups after the restore %v: the restored %s is gone", now, backups[0])
	}
}

// TestRunnerAccessComesBack (defect 10): a deleted runner ServiceAccount
// used to stay deleted until the manager restarted. The RoleBinding that
// gave it Secret rights before the runner API is deleted.
func TestRunnerAccessComesBack(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	old := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: names.RunnerRoleBinding, Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-runner"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: names.RunnerServiceAccount, Namespace: e.ns}}}
	if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.create(e.localCloud("access", e.newCluster("access", false), map[string]any{"api_port": 6443}))
	e.waitFor("access", 2*time.Minute, "Ready", isReady)
	if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Get(ctx, names.RunnerRoleBinding, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the old release's RoleBinding is still there: %v", err)
	}
	if err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Delete(ctx, names.RunnerServiceAccount, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, saErr := plane.Kube.CoreV1().ServiceAccounts(e.ns).Get(ctx, names.RunnerServiceAccount, metav1.GetOptions{})
		return saErr == nil, nil
	})
	if err != nil {
		t.Fatal("the runner's ServiceAccount did not come back")
	}
	e.setVars("access", map[string]any{"api_port": 6444})
	e.waitFor("access", 2*time.Minute, "port 6444", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && strings.Contains(string(tc.Status.Outputs["control_plane_endpoint"].Raw), "6444")
	})
}

// TestBlockMove (defect 11): clusterctl move waits while a Job may change
// the state: the annotation is on before the Job, and off once none runs.
func TestBlockMove(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("move", e.newCluster("move", false), map[string]any{"sleep_seconds": 4}))
	_, pod := e.runningPod("apply", time.Minute)
	if _, ok := e.get("move").Annotations[capi.BlockMoveAnnotation]; !ok {
		t.Errorf("pod %s runs, and %s is not set", pod, capi.BlockMoveAnnotation)
	}
	tc := e.waitFor("move", 2*time.Minute, "Ready without block-move", func(tc *infrav1.TerraformCluster) bool {
		_, blocked := tc.Annotations[capi.BlockMoveAnnotation]
		return isReady(tc) && !blocked
	})
	for _, s := range e.secrets() {
		if s.Labels[names.LabelSecretType] == names.SecretTypeState {
			if _, ok := s.Labels[names.LabelClusterctlMove]; !ok {
				t.Errorf("state Secret %s lacks %s: clusterctl move would leave it behind", s.Name, names.LabelClusterctlMove)
			}
		}
	}
	_ = tc
}

// TestFinalizerNames (defect 13): the domain-qualified form with a path,
// beside the finalizers of others.
func TestFinalizerNames(t *testing.T) {
	e := newEnv(t)
	tc := e.localCloud("fin", e.newCluster("fin", false), map[string]any{})
	tc.Finalizers = []string{"example.com/other"}
	e.create(tc)
	e.startManager()
	e.waitFor("fin", 2*time.Minute, "Ready", isReady)
	if got := e.get("fin").Finalizers; !slices.Equal(got, []string{"example.com/other", infrav1.TerraformClusterFinalizer}) {
		t.Errorf("finalizers %v", got)
	}
	if !strings.Contains(infrav1.TerraformClusterFinalizer, "/") {
		t.Errorf("finalizer %s has no path", infrav1.TerraformClusterFinalizer)
	}
}

// TestForgetIsGated (defect 12): a plan that only drops a resource from the
// state (removed, destroy = false) used to count as no change and apply at
// once under Manual; the resource left CAPTF's management silently.
func TestForgetIsGated(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("forget", e.newCluster("forget", false), map[string]any{})
	tc.Spec.Module.Inline = `resource "terraform_data" "instance" { input = "kept" }`
	tc.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	e.create(tc)
	first := waitCondition(e, "forget", infrav1.ConditionPlanAwaitingApproval, "the first plan waits", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	e.annotate("forget", infrav1.AnnotationApprovePlan, first.Status.LastPlan.Hash)
	e.waitFor("forget", 2*time.Minute, "Ready", isReady)
	if n := len(e.stateOf("forget").Resources); n != 1 {
		t.Fatalf("%d resources in state, want 1", n)
	}

	e.update("forget", func(tc *infrav1.TerraformCluster) {
		tc.Spec.Module.Inline = "removed {\n  from = terraform_data.instance\n  lifecycle {\n    destroy = false\n  }\n}\n"
	})
	e.approveModule("forget") // new code waits for an approver before it plans (issue 50)
	blocked := waitCondition(e, "forget", infrav1.ConditionDestructivePlanBlocked, "DestructivePlanBlocked", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	msg := condition(blocked, infrav1.ConditionDestructivePlanBlocked).Message
	if !strings.Contains(msg, "1 to forget") || !strings.Contains(msg, "forget terraform_data.instance") {
		t.Errorf("DestructivePlanBlocked message %q does not name the forget", msg)
	}
	if s := blocked.Status.LastPlan.Summary; s.Forget != 1 {
		t.Errorf("plan summary %+v, want 1 to forget", s)
	}
	if n := len(e.stateOf("forget").Resources); n != 1 {
		t.Errorf("%d resources in state: the forget applied without approval", n)
	}
}

// TestDeletingObjectLosesItsFinalizer (defect 9): an object that a newer
// webhook rule refuses could never lose its finalizer; a metadata-only
// update of an object being deleted is admitted, a spec change is not.
func TestDeletingObjectLosesItsFinalizer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	admin := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	// Made before the rule existed (the webhook is not registered yet),
	// held by another controller's finalizer.
	old := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: e.ns, Finalizers: []string{"example.com/hold"}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Source: " ./m"}}}}
	if _, err := admin.Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startManagerWithWebhook()
	// The rule is in force for live objects.
	err := updateCluster(e.ns, "old", func(tc *infrav1.TerraformCluster) { tc.Labels = map[string]string{"touched": "yes"} })
	if err == nil || !strings.Contains(err.Error(), "white space") {
		t.Fatalf("an update of a live invalid object: %v, want the webhook's refusal", err)
	}
	if err := admin.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = updateCluster(e.ns, "old", func(tc *infrav1.TerraformCluster) { tc.Spec.Module.Source = " ./n" })
	if err == nil {
		t.Error("a spec change of a deleting object was admitted")
	}
	// Its controller removes its finalizer: admitted.
	if err := updateCluster(e.ns, "old", func(tc *infrav1.TerraformCluster) { tc.Finalizers = nil }); err != nil {
		t.Fatalf("removing the finalizer of a deleting object: %v", err)
	}
	e.waitFor("old", 30*time.Second, "gone", gone)
}

// TestRescuedState (defect 7): a state terraform cannot save (here the API
// server refuses it, as a policy engine limiting Secret sizes would) used to
// be dropped with errored.tfstate, and the retry created the instance again.
// It is kept as a backup, the object says so and runs nothing until a state
// is restored.
func TestRescuedState(t *testing.T) {
	e := newEnv(t)
	m := e.startManager()
	unlimit := e.limitStateSize(2048)
	e.create(e.localCloud("rescue", e.newCluster("rescue", false), map[string]any{"state_padding_kib": 16}))
	tc := waitCondition(e, "rescue", infrav1.ConditionStateRescued, "StateRescued", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	msg := condition(tc, infrav1.ConditionStateRescued).Message
	backups := backupNames(t, e.ns)
	if len(backups) != 1 || !strings.Contains(backups[0], "-errored-") {
		t.Fatalf("backups %v, want the rescued state", backups)
	}
	if want := "kubectl annotate terraformcluster -n " + e.ns + " rescue " + infrav1.AnnotationRestoreState + "=" + backups[0]; !strings.Contains(msg, want) {
		t.Errorf("StateRescued message %q lacks %q", msg, want)
	}
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: tfcNames("rescue")}
	rescued, err := store.ReadBackup(context.Background(), backups[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := parseState(t, rescued).instances(); n != 1 {
		t.Errorf("the rescued state holds %d instances, want the one created", n)
	}
	// Past the first retry's backoff (10 s).
	e.never(15*time.Second, func() error {
		if jobs := e.jobs("apply"); len(jobs) != 1 {
			return fmt.Errorf("%d apply Jobs: a retry on the state that lacks the instance", len(jobs))
		}
		if files := e.instanceFiles(); len(files) != 1 {
			return fmt.Errorf("instances %v, want 1", files)
		}
		return nil
	})
	// Changed inputs do not get around the hold: their apply would run on
	// the state that lacks the instance too.
	e.update("rescue", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"state_padding_kib": 15, "instance_dir": e.instances})
	})
	e.observed("rescue")
	e.never(3*time.Second, func() error {
		if jobs := e.jobs("apply"); len(jobs) != 1 {
			return fmt.Errorf("%d apply Jobs after a spec change: an apply on the state that lacks the instance", len(jobs))
		}
		return nil
	})
	if r := condition(e.get("rescue"), infrav1.ConditionReady).Reason; r != "StateRescued" {
		t.Errorf("Ready reason %q after a spec change, want StateRescued", r)
	}

	// The operator lifts the limit and restores the rescued state, through
	// the webhook.
	unlimit()
	m.Stop()
	m = e.startManagerWithWebhook()
	e.annotate("rescue", infrav1.AnnotationRestoreState, backups[0])
	e.waitFor("rescue", 2*time.Minute, "Ready", isReady)
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instances %v after the restore, want the same 1", files)
	}
	if n := e.stateOf("rescue").instances(); n != 1 {
		t.Errorf("state holds %d instances, want 1", n)
	}
}

// TestRunnerAPIOutage: the manager, and with it the runner API, is down for
// a minute (two lock durations) while the runner creates an instance. The
// runner cannot renew its lock, and that is not losing it: terraform goes
// on, its state write waits for the API, and the run ends well once the
// manager is back. One Job, no rescue, the instance in the state once.
// It waits out its minute beside the other parallel tests.
func TestRunnerAPIOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := e.startManager()
	e.create(e.localCloud("outage", e.newCluster("outage", false), map[string]any{"sleep_seconds": 20}))
	job, pod := e.runningPod("apply", time.Minute)
	e.waitCreating(pod)
	m.Stop()
	time.Sleep(time.Minute)
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	tc := e.waitFor("outage", 3*time.Minute, "Ready", isReady)
	logs, err := executor.Logs(e.ns, pod)
	if err != nil || strings.Contains(logs, "lost the state lock") {
		t.Errorf("the runner stopped terraform while the manager was away (%v):\n%s", err, tail(logs, 20))
	}
	if res := e.result(job); res.Outcome != run.OutcomeSucceeded || res.RescuedState != "" {
		t.Errorf("the run's result: %s in %s (rescued %q): %s", res.Outcome, res.Stage, res.RescuedState, res.Error)
	}
	if jobs := e.jobs("apply"); len(jobs) != 1 {
		t.Errorf("%d apply Jobs, want the one", len(jobs))
	}
	if c := condition(tc, infrav1.ConditionStateRescued); c != nil && c.Status == metav1.ConditionTrue {
		t.Errorf("StateRescued: %s", c.Message)
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instances %v, want the one", files)
	}
	if n := e.stateOf("outage").instances(); n != 1 {
		t.Errorf("state holds %d instances, want 1", n)
	}
}

// TestRunnerCutOffPastItsDeadline: a runner's node is cut off (from the
// runner API and the API server) while its terraform creates an instance,
// and its Job's deadline passes meanwhile: the Job controller deletes the
// pod, but no kubelet confirms it. Nothing may start a second terraform for
// the object while the first may still run: the runner keeps its lock and
// terraform goes on (the old runner stopped it once its lock was 30 s
// without renewal), no second Job or runner starts while the pod exists,
// and once the node is back the instance is in the state, made once.
//
// It takes over three minutes, mostly waiting (so it runs beside the other
// parallel tests): the cut must outlast both the lock's duration (30 s) and
// the two minutes the old runner retried a request, and the module's sleep
// outlasts the cut.
func TestRunnerCutOffPastItsDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("cutoff", e.newCluster("cutoff", false), map[string]any{"sleep_seconds": 180})
	tc.Spec.Jobs = &infrav1.JobPolicy{ActiveDeadlineSeconds: ptrTo(int64(25)), LockTimeout: &metav1.Duration{Duration: 10 * time.Second}}
	e.create(tc)
	job, pod := e.runningPod("apply", time.Minute)
	e.waitCreating(pod)
	e.front.Cut()
	executor.CutOff(e.ns, pod)
	cut := time.Now()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			e.front.Heal()
			executor.Heal(e.ns, pod)
		}
	}
	defer heal()

	// The deadline passes: the pod is deleted, and stays, terminating.
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := plane.Kube.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil, nil
	})
	if err != nil {
		t.Fatalf("the Job's deadline did not delete its pod: %v", err)
	}
	// For 150 s without renewal, the object's runs are watched: no second
	// Job, terraform goes on, the lock stays the first pod's.
	for time.Since(cut) < 150*time.Second {
		if jobs := e.jobs("apply"); len(jobs) != 1 {
			t.Fatalf("%d apply Jobs while the first one's pod may still run terraform", len(jobs))
		}
		if logs, _ := executor.Logs(e.ns, pod); strings.Contains(logs, "lost the state lock") || strings.Contains(logs, "Interrupt received") {
			t.Fatalf("the cut-off runner stopped terraform %s after the cut:\n%s", time.Since(cut).Round(time.Second), tail(logs, 20))
		}
		time.Sleep(time.Second)
	}
	lease, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(ctx, tfcNames("cutoff").Lock(), metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != pod {
		t.Fatalf("the lock's holder: %v %v, want the cut-off pod %s", err, lease.Spec.HolderIdentity, pod)
	}

	// The network comes back to the runner: its terraform finishes, its
	// state lands and it exits. Then the kubelet's view: the pod's end is
	// reported, and the object converges without a second instance. (Were
	// both back at once, the kubelet would stop the deleted pod at once,
	// and terraform, interrupted, would keep a tainted instance.)
	e.front.Heal()
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := executor.WaitExited(waitCtx, e.ns, pod); err != nil {
		t.Fatalf("the cut-off runner did not finish once the network was back: %v", err)
	}
	heal()
	e.waitFor("cutoff", 3*time.Minute, "Ready", isReady)
	if logs, _ := executor.Logs(e.ns, pod); !strings.Contains(logs, "Apply complete!") {
		t.Errorf("the first runner's terraform did not finish its apply:\n%s", tail(logs, 20))
	}
	for _, j := range e.jobs("apply") {
		if j.Name != job && !strings.HasPrefix(j.Name, strings.TrimSuffix(job, "0")) {
			t.Errorf("apply Job %s is not a retry of %s", j.Name, job)
		}
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instances %v, want the one", files)
	}
	if n := e.stateOf("cutoff").instances(); n != 1 {
		t.Errorf("state holds %d instances, want 1", n)
	}
	if backups := backupNames(t, e.ns); slices.ContainsFunc(backups, func(b string) bool { return strings.Contains(b, "-errored-") }) {
		t.Errorf("a state was rescued: %v", backups)
	}
}

// waitCreating waits until the apply in pod creates the first instance.
func (e *env) waitCreating(pod string) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		logs, err := executor.Logs(e.ns, pod)
		return err == nil && strings.Contains(logs, "terraform_data.instance[0]: Creating..."), nil
	})
	if err != nil {
		e.t.Fatal("the apply never started creating the instance")
	}
}

// TestFencedRunner (defect 6): a runner's node stalls mid-apply (SIGSTOP)
// and is cut off; an administrator force-deletes its pod, the one act that
// frees a lock whose holder may still run, and another run takes the lock
// over. Once the stalled runner wakes it must write nothing and stop.
// It is parallel: its 40 s are mostly waits (the stall, the takeover's
// lock), and fit beside TestRunnerCutOffPastItsDeadline.
func TestFencedRunner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	tc := e.create(e.localCloud("stall", e.newCluster("stall", false), map[string]any{"sleep_seconds": 10}))
	job, pod := e.runningPod("apply", time.Minute)
	// Stalled mid-apply: its plan is made, the instance is being created.
	e.waitCreating(pod)
	if err := executor.SignalPod(e.ns, pod, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	executor.CutOff(e.ns, pod)
	defer executor.Heal(e.ns, pod)
	// No retry of the failed Job may run beside the takeover below, which
	// is no pod: the Cluster is paused meanwhile.
	e.setPaused("stall", true)
	if err := plane.Kube.CoreV1().Pods(e.ns).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}
	// The next attempt: a runner of the same object, inputs and Job.
	takeover := exec.Command(captfBinary, "runner", "--namespace="+e.ns, "--object-kind=TerraformCluster", "--object-name=stall",
		"--object-uid="+string(tc.UID), "--operation=apply", "--job="+job, "--workdir="+t.TempDir(), "--lock-timeout=2m")
	takeover.Env = append(os.Environ(), "KUBECONFIG="+plane.KubeconfigFile, "POD_NAME=takeover", "POD_UID=takeover-uid",
		framework.PathEnv())
	out, err := takeover.CombinedOutput()
	if err != nil {
		t.Fatalf("the takeover run: %v\n%s", err, tail(string(out), 30))
	}
	head, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, tfcNames("stall").State(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := executor.SignalPod(e.ns, pod, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err = executor.WaitExited(waitCtx, e.ns, pod)
	if logs, _ := executor.Logs(e.ns, pod); err != nil || !strings.Contains(logs, "lost the state lock") {
		t.Fatalf("the stalled runner did not stop on finding it lost its lock (%v):\n%s", err, tail(logs, 20))
	}
	after, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, tfcNames("stall").State(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != head.ResourceVersion {
		t.Errorf("the stalled runner wrote the state after it lost the lock (resourceVersion %s, was %s)", after.ResourceVersion, head.ResourceVersion)
	}
	if n := e.stateOf("stall").instances(); n != 1 {
		t.Errorf("state holds %d instances, want 1", n)
	}
}

// TestRestoreIntoNewPlane (defect 11): objects and Secrets exported the way
// a backup tool does (metadata reset), the plane lost, restored with the
// Cluster paused, then unpaused: nothing is created or destroyed, the
// object is Ready (with its status restored too, without a Job), and
// deleting it afterwards destroys everything and leaves no Secret.
func TestRestoreIntoNewPlane(t *testing.T) {
	for _, keepStatus := range []bool{false, true} {
		t.Run(map[bool]string{false: "status dropped", true: "status kept"}[keepStatus], func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			m := e.startManager()
			e.create(e.localCloud("dr", e.newCluster("dr", false), map[string]any{"instances": 2}))
			e.waitFor("dr", 2*time.Minute, "Ready", isReady)
			files := e.instanceFiles()

			// The backup.
			saved := e.get("dr")
			var secrets []corev1.Secret
			for _, s := range e.secrets() {
				if s.Labels[names.LabelSecretType] != names.SecretTypeRunInputs && s.Labels[names.LabelSecretType] != names.SecretTypeResult {
					secrets = append(secrets, s)
				}
			}
			// The plane is lost.
			m.Stop()
			e.wipe()

			// The restore, in the documented order: Cluster paused first.
			cluster := e.newCluster("dr", true)
			for _, s := range secrets {
				s.ObjectMeta = metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: s.Labels, Annotations: s.Annotations}
				if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, &s, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			restored := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "dr", Namespace: e.ns, Labels: saved.Labels, Annotations: saved.Annotations},
				Spec: saved.Spec}
			created := e.create(restored)
			if keepStatus {
				created.Status = saved.Status
				if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			e.startManager()
			e.waitFor("dr", time.Minute, "waiting for its owner", readyReason("WaitingForClusterOwner"))
			// Cluster API sets the owner again, then the operator unpauses.
			e.update("dr", func(tc *infrav1.TerraformCluster) {
				tc.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(cluster)}
			})
			e.unpause("dr")
			e.waitFor("dr", 2*time.Minute, "Ready", isReady)
			applies := 0
			for _, j := range e.jobs("apply") {
				if j.Labels[names.LabelObjectUID] == string(created.UID) {
					applies++
				}
			}
			if want := map[bool]int{false: 1, true: 0}[keepStatus]; applies != want {
				t.Errorf("%d apply Jobs after the restore, want %d", applies, want)
			}
			if now := e.instanceFiles(); !slices.Equal(now, files) {
				t.Errorf("instances %v after the restore, were %v", now, files)
			}

			// Deleting the restored cluster leaves nothing behind.
			if err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Delete(ctx, "dr", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			e.deleteTC("dr", metav1.DeletePropagationBackground)
			e.waitFor("dr", 2*time.Minute, "destroyed", gone)
			if now := e.instanceFiles(); len(now) != 0 {
				t.Errorf("instances left: %v", now)
			}
			err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return len(e.secrets()) == 0, nil
			})
			if err != nil {
				var left []string
				for _, s := range e.secrets() {
					left = append(left, s.Name)
				}
				t.Errorf("Secrets left after the destroy: %v", left)
			}
		})
	}
}

// wipe deletes the namespace's Cluster, TerraformCluster and CAPTF Secrets
// past every finalizer: the plane they lived on is gone.
func (e *env) wipe() {
	e.t.Helper()
	ctx := context.Background()
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	tcs := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	list, err := tcs.List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, tc := range list.Items {
		if _, err := tcs.Patch(ctx, tc.Name, types.MergePatchType, strip, metav1.PatchOptions{}); err != nil {
			e.t.Fatal(err)
		}
		if err := tcs.Delete(ctx, tc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
		e.waitFor(tc.Name, 30*time.Second, "gone", gone)
	}
	if err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		e.t.Fatal(err)
	}
	for _, s := range e.secrets() {
		if _, err := plane.Kube.CoreV1().Secrets(e.ns).Patch(ctx, s.Name, types.MergePatchType, strip, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
		if err := plane.Kube.CoreV1().Secrets(e.ns).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
	if err := plane.Kube.BatchV1().Jobs(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) unpause(cluster string) { e.setPaused(cluster, false) }

func (e *env) setPaused(cluster string, paused bool) {
	e.t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused)
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Patch(context.Background(), cluster, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// limitStateSize makes the API server refuse state Secrets over max bytes
// in the test's namespace (a ValidatingAdmissionPolicy); the returned func
// lifts it.
func (e *env) limitStateSize(max int) func() {
	e.t.Helper()
	ctx := context.Background()
	name := "state-size-" + e.ns
	deny := []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf(`!has(object.metadata.labels) || !('captf.io/secret-type' in object.metadata.labels) || object.metadata.labels['captf.io/secret-type'] != 'state' || !has(object.data) || !('tfstate' in object.data) || size(object.data['tfstate']) <= %d`, max),
				Message:    fmt.Sprintf("state Secrets are limited to %d bytes here", max)}}}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: deny,
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns}}}}}
	vap := plane.Kube.AdmissionregistrationV1()
	if _, err := vap.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := vap.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	lift := func() {
		_ = vap.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = vap.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	e.t.Cleanup(lift)
	// In force once a big state Secret is refused.
	probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: e.ns, Labels: map[string]string{names.LabelSecretType: names.SecretTypeState}},
		Data: map[string][]byte{"tfstate": make([]byte, max+1)}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		created, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, probe, metav1.CreateOptions{})
		if err == nil {
			_ = plane.Kube.CoreV1().Secrets(e.ns).Delete(ctx, created.Name, metav1.DeleteOptions{})
			return false, nil
		}
		return strings.Contains(err.Error(), "limited to"), nil
	})
	if err != nil {
		e.t.Fatal("the state size policy never took effect")
	}
	return func() {
		lift()
		time.Sleep(2 * time.Second) // the API server's policy cache
	}
}

// TestNoLegacyStateAdoption (issue 30, item 6): earlier builds kept a state
// whose object name had a dot under a shortened name, and the manager moved
// such a state to the object's own name when its UID label matched. Module
// code can write that label, and another object's own family can spell a
// shortened name: a tenant names its object so that its state is the
// victim's old-style state, labels it with the victim's UID, and the
// victim's first run adopted the tenant's state (its destroy then destroyed
// the tenant's resources with the tenant's module). CAPTF had no release
// with those names: nothing reads them any more.
func TestNoLegacyStateAdoption(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	// "tfc-victim-db-" plus the first five hex digits of sha256("victim.db")
	// was the old short name of TerraformCluster victim.db.
	sum := sha256.Sum256([]byte("victim.db"))
	planted := "victim-db-" + hex.EncodeToString(sum[:])[:5]
	e.create(e.localCloud(planted, e.newCluster(planted, false), map[string]any{"instances": 2}))
	e.waitFor(planted, 2*time.Minute, "Ready", isReady)
	m.Stop()
	victim := e.create(e.localCloud("victim.db", e.newClusterOf("victim-db", "victim.db", false), map[string]any{"instances": 1}))
	secrets := plane.Kube.CoreV1().Secrets(e.ns)
	// What module code can do through the runner API: label its own state
	// with the victim's UID.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, names.LabelObjectUID, victim.UID)
	if _, err := secrets.Patch(ctx, tfcNames(planted).State(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startManager()
	e.waitFor("victim.db", 2*time.Minute, "Ready", isReady)
	lineage := func(name string) string {
		store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: tfcNames(name)}
		b, err := store.Read(ctx)
		if err != nil {
			t.Fatalf("state of %s: %v", name, err)
		}
		var st struct{ Lineage string }
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatal(err)
		}
		return st.Lineage
	}
	if lineage("victim.db") == lineage(planted) {
		t.Errorf("victim.db adopted the state of %s (lineage %s)", planted, lineage(planted))
	}
	if findEvent(t, e.ns, "victim.db", "StateMoved") != nil {
		t.Error("a StateMoved event: the victim took up a planted state")
	}
	if n := e.stateOf("victim.db").instances(); n != 1 {
		t.Errorf("victim.db's state holds %d instances, want its own 1", n)
	}
	if n := e.stateOf(planted).instances(); n != 2 {
		t.Errorf("%s's state holds %d instances, want 2", planted, n)
	}
}

// TestFailingRunsKeepTheGoodBackup (defect 8): an apply that fails again and
// again changes the state each time (a tainted resource, made anew); with
// backups rotating, the state before the failures used to be gone within
// minutes. The backup of the last state a run ended well with stays.
//
// It mostly waits out the failed applies' backoff, so it runs beside the
// other parallel tests (it fits beside TestRunnerCutOffPastItsDeadline);
// three failures took 84 s alone, within 4 minutes under any load.
func TestFailingRunsKeepTheGoodBackup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startManager("--state-backups=1")
	tc := e.localCloud("fails", e.newCluster("fails", false), map[string]any{})
	tc.Spec.Module.Inline = `resource "terraform_data" "a" { input = "ok" }`
	e.create(tc)
	e.waitFor("fails", 2*time.Minute, "Ready", isReady)
	// Each run updates "clock" (a new state), then fails on "b", whose
	// input can only be read once clock is applied: no taint, no gate.
	e.update("fails", func(tc *infrav1.TerraformCluster) {
		tc.Spec.Module.Inline += `
resource "terraform_data" "clock" { input = timestamp() }
resource "terraform_data" "b" { input = file("/nonexistent/${terraform_data.clock.output}") }
`
	})
	e.approveModule("fails")
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 4*time.Minute, true, func(context.Context) (bool, error) {
		failed := 0
		for _, j := range e.jobs("apply") {
			if j.Status.Failed > 0 {
				failed++
			}
		}
		return failed >= 3, nil
	})
	if err != nil {
		t.Fatal("the apply did not fail three times")
	}
	store := &statestore.StateStore{Client: plane.Kube, Namespace: e.ns, Object: tfcNames("fails")}
	var good []string
	for _, b := range backupNames(t, e.ns) {
		state, err := store.ReadBackup(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		if s := parseState(t, state); len(s.Resources) == 1 && s.Resources[0].Name == "a" { // before "clock"
			good = append(good, b)
		}
	}
	if len(good) == 0 {
		t.Errorf("backups %v: none holds the state before the failures", backupNames(t, e.ns))
	}
}
