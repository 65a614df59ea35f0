package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/test/framework"
)

// user makes a ServiceAccount of the test's namespace bound to the Roles
// docs/security.md shows, and returns a kubeconfig of it, as a person's.
func (e *env) user(name string, roles ...string) string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	for _, r := range roles {
		role, err := framework.ShippedRole(r)
		if err != nil {
			e.t.Fatal(err)
		}
		role.Name, role.Namespace = name+"-"+r, ""
		if _, err := plane.Kube.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: e.ns}}}
		if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	cfg, err := plane.ServiceAccountConfig(ctx, e.ns, name)
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.t.TempDir(), name+".kubeconfig")
	if err := framework.WriteKubeconfig(path, cfg, name); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// pluginRun is one run of the built plugin.
type pluginRun struct {
	out, err string
	code     int
}

// kubectlCaptf runs the plugin as a user would, with kubeconfig and stdin.
func (e *env) kubectlCaptf(bin, kubeconfig, stdin string, args ...string) pluginRun {
	e.t.Helper()
	cmd := exec.Command(bin, append(args, "--kubeconfig", kubeconfig, "-n", e.ns)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return pluginRun{out.String(), errOut.String(), code}
}

// TestKubectlPlugin (issue 34, item 1): every command of kubectl captf, run
// as a user with the docs' Roles: a viewer reads plans, runs, logs and the
// cluster's tree but cannot approve; an approver approves exactly the plan
// shown, after confirmation; backups, restore and abandon say what they do.
func TestKubectlPlugin(t *testing.T) {
	bin := pluginBinary(t)
	e := newEnv(t)
	installApprovalPolicy(t)
	e.startManager()
	viewer := e.user("viewer", "captf-viewer")
	approver := e.user("approver", "captf-writer", "captf-approver")
	admin := plane.KubeconfigFile
	tc := e.blockedDestroy("shop")
	hash := tc.Status.LastPlan.Hash
	expect := func(what string, r pluginRun, code int, out, errOut []string) {
		t.Helper()
		if r.code != code {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.out, r.err)
		}
		for _, w := range out {
			if !strings.Contains(r.out, w) {
				t.Errorf("%s: stdout does not say %q:\n%s", what, w, r.out)
			}
		}
		for _, w := range errOut {
			if !strings.Contains(r.err, w) {
				t.Errorf("%s: stderr does not say %q:\n%s", what, w, r.err)
			}
		}
	}

	// A viewer sees the plan, its JSON, the runs, the log, the tree.
	expect("plan", e.kubectlCaptf(bin, viewer, "", "plan", "tfc/shop"), 0,
		[]string{"Plan " + hash + " of terraformclusters/shop", "destroy terraform_data.instance[1]", "terraform_data.instance[1] will be destroyed",
			"Waiting for approval (captf.io/approve-destructive-plan): kubectl captf approve terraformclusters/shop"}, nil)
	r := e.kubectlCaptf(bin, viewer, "", "plan", "terraformcluster/shop", "--json")
	var plan struct {
		ResourceChanges []struct{ Address string } `json:"resource_changes"`
	}
	if err := json.Unmarshal([]byte(r.out), &plan); err != nil || r.code != 0 || len(plan.ResourceChanges) == 0 {
		t.Errorf("plan --json: exit %d, %v: %s %s", r.code, err, r.out, r.err)
	}
	expect("runs", e.kubectlCaptf(bin, viewer, "", "runs", "tfc/shop"), 0, []string{"RUN", "apply", "Blocked", hash, "Succeeded"}, nil)
	expect("logs", e.kubectlCaptf(bin, viewer, "", "logs", "tfc/shop"), 0, []string{"terraform_data.instance[1] will be destroyed"}, nil)
	expect("describe", e.kubectlCaptf(bin, viewer, "", "describe", "cluster", "shop"), 0,
		[]string{"Cluster/shop", "└─TerraformCluster/shop", "plan " + hash + " waits for captf.io/approve-destructive-plan"}, nil)
	expect("a viewer approves", e.kubectlCaptf(bin, viewer, "", "approve", "tfc/shop", "--yes"), 1, nil, []string{"Error from server (Forbidden)"})

	// An approver is asked, and a no approves nothing.
	expect("approve, answered no", e.kubectlCaptf(bin, approver, "n\n", "approve", "tfc/shop"), 1,
		// The plan text as terraform wrote it (issue 50, item 8: the Roles
		// the docs gave an approver read no run records, so only a summary).
		[]string{"Plan " + hash, "terraform_data.instance[1] will be destroyed",
			"Approve plan " + hash + " of terraformclusters/shop (captf.io/approve-destructive-plan=" + hash + ")? [y/N]"}, []string{"error: not approved"})
	if v := e.get("shop").Annotations[infrav1.AnnotationApproveDestructivePlan]; v != "" {
		t.Fatalf("a no approved %q", v)
	}
	expect("approve, answered yes", e.kubectlCaptf(bin, approver, "y\n", "approve", "tfc/shop"), 0, []string{"terraformclusters/shop approved: plan " + hash}, nil)
	e.waitFor("shop", 2*time.Minute, "the approved plan applied", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedPlanHash == hash && isReady(tc)
	})
	expect("approve with nothing waiting", e.kubectlCaptf(bin, approver, "", "approve", "tfc/shop", "--yes"), 1, nil,
		[]string{"error: no plan of terraformclusters/shop waits for approval"})

	// Backups, a restore and an abandon, by someone who may read states.
	// Someone who may write Secrets made a look-alike backup, newer than
	// any (issue 50, item 5): the default restore picked it.
	forged := e.forgedBackup("shop")
	r = e.kubectlCaptf(bin, admin, "", "backups", "tfc/shop")
	expect("backups", r, 0, []string{"BACKUP", "tfc-shop-backup-", "serial ", forged + "  "}, nil)
	if line := lineWith(r.out, forged); !strings.Contains(line, "unlisted") {
		t.Errorf("backups shows the look-alike as %q, want it unlisted", line)
	}
	expect("backups as a viewer", e.kubectlCaptf(bin, viewer, "", "backups", "tfc/shop"), 1, nil, []string{"Error from server (Forbidden)"})
	expect("restore, answered no", e.kubectlCaptf(bin, admin, "no\n", "restore", "tfc/shop"), 1, []string{"Restoring makes backup tfc-shop-backup-", "Restore? [y/N]"}, []string{"error: not restored"})
	expect("abandon", e.kubectlCaptf(bin, admin, "y\n", "abandon", "tfc/shop"), 0,
		[]string{"Abandoning lets terraformclusters/shop be deleted without destroying its infrastructure", "terraformclusters/shop abandoned"}, nil)
	if v := e.get("shop").Annotations[infrav1.AnnotationAbandonInfrastructure]; v != "true" {
		t.Errorf("abandon set %s=%q", infrav1.AnnotationAbandonInfrastructure, v)
	}
	expect("restore", e.kubectlCaptf(bin, admin, "", "restore", "tfc/shop", "--yes"), 0, []string{"restore of tfc-shop-backup-"}, nil)
	if v := e.get("shop").Annotations[infrav1.AnnotationRestoreState]; !strings.HasPrefix(v, "tfc-shop-backup-") || v == forged {
		t.Errorf("restore set %s=%q, want the newest backup the state's store made, not the look-alike %s", infrav1.AnnotationRestoreState, v, forged)
	}

	// Help on every command; mistakes said as kubectl says them.
	for _, c := range []string{"plan", "approve", "runs", "logs", "backups", "restore", "abandon", "describe", "completion", "version"} {
		expect(c+" -h", e.kubectlCaptf(bin, viewer, "", c, "-h"), 0, []string{"Usage:\n  kubectl captf " + c}, nil)
	}
	expect("an unknown command", e.kubectlCaptf(bin, viewer, "", "aply", "tfc/shop"), 1, nil, []string{`error: unknown command "aply" for "kubectl captf"`})
	expect("a missing object", e.kubectlCaptf(bin, viewer, "", "plan", "tfc/nope"), 1, nil, []string{"Error from server (NotFound)"})
	expect("not a KIND/NAME", e.kubectlCaptf(bin, viewer, "", "plan", "shop"), 1, nil, []string{`error: "shop" is no KIND/NAME`})
	expect("completion", e.kubectlCaptf(bin, viewer, "", "completion", "bash"), 0, []string{"complete -F _kubectl_captf kubectl-captf"}, nil)
}

// pluginBinary is the kubectl plugin under test (framework.PluginBinary).
func pluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := framework.PluginBinary("kubectl-captf")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestPluginPrintsOnlyPrintable (issue 50, item 5): the plugin printed what
// module code wrote into a run's log as it came; a bidi override or a
// zero-width character reached the approver's terminal (and, before the
// log was filtered, an escape sequence that clears it). Every byte the
// plugin prints is printable now: read the raw bytes.
func TestPluginPrintsOnlyPrintable(t *testing.T) {
	bin := pluginBinary(t)
	e := newEnv(t)
	e.startManager()
	viewer := e.user("viewer", "captf-viewer")
	tc := e.localCloud("noisy", e.newCluster("noisy", false), map[string]any{})
	// Octal escapes for printf: ESC [2J ESC [H, CR, U+202E, U+200B, U+2066.
	tc.Spec.Module.Inline = `
resource "terraform_data" "noisy" {
  provisioner "local-exec" {
    command = "printf 'before\\033[2J\\033[Hafter\\rover \\342\\200\\256evil \\342\\200\\213zw \\342\\201\\246iso\\n'"
  }
}
`
	tc.Spec.Variables = nil
	e.create(tc)
	e.waitFor("noisy", 2*time.Minute, "Ready", isReady)
	r := e.kubectlCaptf(bin, viewer, "", "logs", "tfc/noisy")
	if r.code != 0 || !strings.Contains(r.out, "evil") {
		t.Fatalf("logs: exit %d\nstdout: %q\nstderr: %q", r.code, r.out, r.err)
	}
	for _, bad := range []string{"\x1b", "\r", "\u202e", "\u200b", "\u2066"} {
		if strings.Contains(r.out, bad) || strings.Contains(r.err, bad) {
			t.Errorf("the plugin printed %q raw: %q", bad, r.out)
		}
	}
	// (terraform takes a carriage return for the end of a line.)
	for _, shown := range []string{`\x1b[2J`, `\u202eevil`, `\u200bzw`, `\u2066iso`} {
		if !strings.Contains(r.out, shown) {
			t.Errorf("the log does not show %s as an escape: %q", shown, r.out)
		}
	}
}

// TestForgedRunRecordsAreIgnored (issue 50, item 5): anyone who may create a
// ConfigMap in the namespace made a look-alike run record that claimed the
// waiting plan, and kubectl captf approve showed its text (a tag change)
// for a plan that destroys an instance. Now the plugin shows only the
// record the object's status vouches for, and that record is immutable;
// under the approval policy only the manager makes run records.
func TestForgedRunRecordsAreIgnored(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	e.startManager()
	tn := e.newTenant()
	e.grant("configmap-editor", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "patch"}})
	tc := e.blockedDestroy("shop")
	plan := tc.Status.LastPlan

	real := e.recordOf(tc, func(rec *run.Record) bool { return rec.Plan != nil && rec.Plan.Hash == plan.Hash })
	forgedRun, _ := json.Marshal(run.Record{Job: "tfc-shop-apply-zz", Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked,
		Plan: &run.Plan{Hash: plan.Hash, Summary: plan.Summary}})
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "tfc-shop-apply-zz-run", Labels: real.Labels, OwnerReferences: real.OwnerReferences},
		Data: map[string]string{run.KeyRun: string(forgedRun), run.KeyPlanText: "Only a tag changes: nothing is destroyed.\n"}}
	// Under the approval policy a writer who may create ConfigMaps makes
	// no run record; someone who may (or a cluster without the policy)
	// still shows the approver nothing of it.
	labelled := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mine", Labels: map[string]string{"app": "x"}}}
	err := waitAPI(func() error { // the tenant's Role takes a moment
		_, err := tn.kube.CoreV1().ConfigMaps(e.ns).Create(ctx, labelled, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tn.kube.CoreV1().ConfigMaps(e.ns).Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the CAPTF manager makes") {
		t.Fatalf("a writer makes run record %s under the approval policy: %v, want the policy's refusal", forged.Name, err)
	}
	labelled.Labels = real.Labels
	if _, err := tn.kube.CoreV1().ConfigMaps(e.ns).Update(ctx, labelled, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "only the CAPTF manager makes") {
		t.Errorf("a writer labels a ConfigMap of theirs a run record: %v, want the policy's refusal", err)
	}
	if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Nor may the writer edit the real one.
	edited := real.DeepCopy()
	edited.Data[run.KeyPlanText] = "Only a tag changes: nothing is destroyed.\n"
	if _, err := tn.kube.CoreV1().ConfigMaps(e.ns).Update(ctx, edited, metav1.UpdateOptions{}); err == nil {
		t.Errorf("a writer edited run record %s: want it immutable", real.Name)
	}

	approver := e.user("approver", "captf-writer", "captf-approver")
	r := e.kubectlCaptf(pluginBinary(t), approver, "n\n", "approve", "tfc/shop")
	if strings.Contains(r.out, "Only a tag changes") || !strings.Contains(r.out, "will be destroyed") {
		t.Errorf("kubectl captf approve showed the approver:\n%s\nwant the real plan's text, not the look-alike's", r.out)
	}
	if r := e.kubectlCaptf(pluginBinary(t), approver, "", "runs", "tfc/shop"); !strings.Contains(r.out, "VOUCHED") {
		t.Errorf("kubectl captf runs does not say which records are vouched for:\n%s", r.out)
	}
}

// recordOf is the run record of tc whose run.json matches.
func (e *env) recordOf(tc *infrav1.TerraformCluster, match func(*run.Record) bool) *corev1.ConfigMap {
	e.t.Helper()
	list, err := plane.Kube.CoreV1().ConfigMaps(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelRunRecord + "=true"})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, cm := range list.Items {
		var rec run.Record
		if names.OwnedBy(&cm, tc.UID) && json.Unmarshal([]byte(cm.Data[run.KeyRun]), &rec) == nil && match(&rec) {
			return &list.Items[i]
		}
	}
	e.t.Fatalf("no run record of %s matches", tc.Name)
	return nil
}

// forgedBackup makes, as someone who may write Secrets, a Secret that
// looks like a newer state backup of name, and returns its name.
func (e *env) forgedBackup(name string) string {
	e.t.Helper()
	ctx := context.Background()
	list, err := plane.Kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelSecretType + "=" + names.SecretTypeBackup})
	if err != nil || len(list.Items) == 0 {
		e.t.Fatalf("no backup to copy: %v", err)
	}
	real := list.Items[0]
	forged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tfcNames(name).Backup("29991231-000000"), Labels: real.Labels, Annotations: real.Annotations}, Data: real.Data}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return forged.Name
}

// lineWith is the first line of out that holds s.
func lineWith(out, s string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
