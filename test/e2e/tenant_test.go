package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runner"
	"github.com/captf/captf/test/framework"
)

// tenant is a user with what a team gets in a shared management cluster:
// the captf-writer Role docs/security.md shows (Cluster API and CAPTF
// objects of its namespace, ClusterClasses included), nothing on Secrets,
// pods or Jobs.
type tenant struct {
	kube  kubernetes.Interface
	captf versioned.Interface
}

func (e *env) newTenant() *tenant {
	e.t.Helper()
	cfg, err := plane.Tenant(context.Background(), e.ns)
	if err != nil {
		e.t.Fatal(err)
	}
	return &tenant{kube: kubernetes.NewForConfigOrDie(cfg), captf: versioned.NewForConfigOrDie(cfg)}
}

// waitAPI retries check for a few seconds: the API server's authorizer
// sees a new RoleBinding a moment after it is created.
func waitAPI(check func() error) error {
	var err error
	for range 50 {
		if err = check(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// attackModule is module code a hostile tenant writes: it tries, with every
// credential its runner pod holds, to reach what is not its object's, and
// writes down what the API servers answered.
const attackModule = `
variable "captf_cluster_name" { type = string }
variable "captf_name" { type = string }
variable "out" { type = string }
variable "apiserver" { type = string }
variable "own_state" { type = string }
variable "victim_state" { type = string }
variable "own_backup" { type = string }

resource "terraform_data" "attack" {
  provisioner "local-exec" {
    command = <<-EOT
      set -u
      tok=/var/run/secrets/captf.io/runner/token
      ca=$(mktemp); printf '%s' "$CAPTF_RUNNER_API_CA" > $ca
      auth="Authorization: Bearer $(cat $tok)"
      code() { curl -s -o /dev/null -w '%%{http_code}' "$@"; }
      api="${var.apiserver}/api/v1/namespaces/$POD_NAMESPACE"
      ra="$CAPTF_RUNNER_API/api/v1/namespaces/$POD_NAMESPACE"
      json='Content-Type: application/json'
      {
        echo "default-token=$(ls /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null || echo none)"
        echo "apiserver-kubeconfig=$(code -k -H "$auth" $api/secrets/${var.captf_cluster_name}-kubeconfig)"
        echo "apiserver-own-state=$(code -k -H "$auth" $api/secrets/${var.own_state})"
        echo "runnerapi-own-state=$(code --cacert $ca -H "$auth" $ra/secrets/${var.own_state})"
        echo "runnerapi-kubeconfig=$(code --cacert $ca -H "$auth" $ra/secrets/${var.captf_cluster_name}-kubeconfig)"
        echo "runnerapi-victim-state=$(code --cacert $ca -H "$auth" $ra/secrets/${var.victim_state})"
        echo "runnerapi-victim-state-write=$(code --cacert $ca -H "$auth" -H "$json" -X PUT -d '{"metadata":{"name":"${var.victim_state}","labels":{"app.kubernetes.io/managed-by":"captf"}}}' $ra/secrets/${var.victim_state})"
        echo "runnerapi-token-secret=$(code --cacert $ca -H "$auth" -H "$json" -X POST -d '{"metadata":{"name":"stolen","annotations":{"kubernetes.io/service-account.name":"default"}},"type":"kubernetes.io/service-account-token"}' $ra/secrets)"
        echo "runnerapi-any-secret=$(code --cacert $ca -H "$auth" -H "$json" -X POST -d '{"metadata":{"name":"mine","labels":{"app.kubernetes.io/managed-by":"captf"}}}' $ra/secrets)"
        echo "runnerapi-list-secrets=$(code --cacert $ca -H "$auth" $ra/secrets)"
        own='"app.kubernetes.io/managed-by":"captf","captf.io/kind":"tfc","captf.io/object-name":"${var.captf_name}"'
        echo "runnerapi-backup-as-bootstrap-data=$(code --cacert $ca -H "$auth" -H "$json" -X POST -d '{"metadata":{"name":"${var.own_backup}","labels":{'"$own"',"captf.io/bootstrap-data":"true"}}}' $ra/secrets)"
        echo "runnerapi-backup-foreign-finalizer=$(code --cacert $ca -H "$auth" -H "$json" -X POST -d '{"metadata":{"name":"${var.own_backup}","labels":{'"$own"'},"finalizers":["example.com/never"]}}' $ra/secrets)"
        echo "runnerapi-backup-immutable=$(code --cacert $ca -H "$auth" -H "$json" -X POST -d '{"metadata":{"name":"${var.own_backup}","labels":{'"$own"'}},"immutable":true}' $ra/secrets)"
        echo "runnerapi-impersonate=$(code --cacert $ca -H "$auth" -H 'Impersonate-User: system:admin' $ra/secrets/${var.captf_cluster_name}-kubeconfig)"
        echo "runnerapi-no-token=$(code --cacert $ca $ra/secrets/${var.own_state})"
      } > "${var.out}"
    EOT
  }
}
`

// TestHostileTenant: a tenant's module code, run by CAPTF, can reach its
// own object's state and nothing else: not the namespace's kubeconfig
// Secret, not another object's state, no Secret of its own making, no API
// server at all.
func TestHostileTenant(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	// What the tenant must not reach: a workload cluster's kubeconfig, and
	// the state of an object of someone else's.
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "evil-kubeconfig"},
		Data: map[string][]byte{"value": []byte("canary-kubeconfig")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Item 2: the tenant may not make CAPTF read a Secret it cannot read.
	steal := e.localCloud("steal", nil, map[string]any{"instances": 0})
	steal.Spec.Variables = append(steal.Spec.Variables, infrav1.Variable{Name: "kubeconfig", ValueFrom: &infrav1.VariableSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "evil-kubeconfig"}, Key: "value"}}})
	_, err := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, steal, metav1.CreateOptions{})
	if want := `may not get Secret "evil-kubeconfig"`; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "spec.variables[") {
		t.Errorf("a variable from an unreadable Secret: %v, want refused with %q", err, want)
	}
	e.create(e.localCloud("victim", e.newCluster("victim", false), map[string]any{"instances": 0}))
	applied := e.waitFor("victim", 2*time.Minute, "Ready", isReady)
	victim := names.Object{Kind: "tfc", Name: "victim"}
	// The manager records the applied code on the state once the apply is
	// in the status (names.AnnotationProtection): the state as it then
	// stays is what the attack must not change.
	var victimState *corev1.Secret
	err = waitUntil(30*time.Second, func() error {
		s, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, victim.State(), metav1.GetOptions{})
		if err == nil && !strings.Contains(s.Annotations[names.AnnotationProtection], applied.Status.AppliedModule) {
			err = fmt.Errorf("the victim's state records %q, not yet the applied code %s", s.Annotations[names.AnnotationProtection], applied.Status.AppliedModule)
		}
		victimState = s
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(e.instances, "attack.txt")
	evil := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "evil", Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "evil"},
			OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(e.newCluster("evil", false))}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: attackModule}}},
	}
	setVariables(&evil.Spec.WorkspaceSpec, map[string]any{"out": out, "apiserver": plane.URL(),
		"own_state": names.Object{Kind: "tfc", Name: "evil"}.State(), "victim_state": victim.State(),
		"own_backup": names.Object{Kind: "tfc", Name: "evil"}.Backup("20261201-000000")})
	if _, err := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, evil, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("evil", 2*time.Minute, "Ready", isReady)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{
		"default-token":                "none", // no token the API server takes
		"apiserver-kubeconfig":         "401",  // the runner token is not the API server's
		"apiserver-own-state":          "401",
		"runnerapi-own-state":          "200", // the token works, for its own state
		"runnerapi-kubeconfig":         "403",
		"runnerapi-victim-state":       "403",
		"runnerapi-victim-state-write": "403",
		"runnerapi-token-secret":       "403",
		"runnerapi-any-secret":         "403",
		"runnerapi-list-secrets":       "403",
		// Its own family, with metadata that would mean something to
		// others (issue 30, item 3).
		"runnerapi-backup-as-bootstrap-data": "403",
		"runnerapi-backup-foreign-finalizer": "403",
		"runnerapi-backup-immutable":         "403",
		"runnerapi-impersonate":              "403",
		"runnerapi-no-token":                 "401",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %s", k, got[k], v)
		}
	}
	for _, name := range []string{"stolen", "mine"} {
		if _, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the module made Secret %s: %v", name, err)
		}
	}
	if now, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, victim.State(), metav1.GetOptions{}); err != nil || now.ResourceVersion != victimState.ResourceVersion {
		t.Errorf("the victim's state changed: %v", err)
	}
}

// TestTenantRunnerPodPolicy: a tenant who may not create pods gets no
// privileged runner pod, and none on a control-plane node, whatever its
// namespace's Pod Security labels say.
func TestTenantRunnerPodPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	// A namespace without Pod Security labels: only CAPTF stands between
	// the tenant and a privileged pod.
	ns, err := plane.Kube.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{}
	if _, err := plane.Kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startManagerWithWebhook()
	tn := e.newTenant()
	root := int64(0)
	tc := e.localCloud("priv", e.newCluster("priv", false), map[string]any{"instances": 0})
	tc.Spec.Jobs.PodSecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
	tc.Spec.Jobs.SecurityContext = &corev1.SecurityContext{Privileged: ptrTo(true), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
	tc.Spec.Jobs.NodeSelector = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	tc.Spec.Jobs.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	_, err = tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, tc, metav1.CreateOptions{})
	for _, want := range []string{"spec.jobs.podSecurityContext.runAsUser", "spec.jobs.securityContext.privileged",
		"spec.jobs.securityContext.capabilities.add[0]", "spec.jobs.nodeSelector", "spec.jobs.tolerations"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("create = %v, want refused naming %s", err, want)
		}
	}
	// Without the policy the same object runs, in a pod that meets
	// "restricted".
	tc.Spec.Jobs = &infrav1.JobPolicy{}
	if _, err := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("priv", 2*time.Minute, "Ready", isReady)
	job := e.jobs("apply")[0]
	if ok, why := meetsRestricted(&job.Spec.Template.Spec); !ok {
		t.Errorf("the runner pod does not meet restricted: %s", why)
	}
}

// meetsRestricted checks what Pod Security "restricted" checks of a pod
// spec CAPTF builds.
func meetsRestricted(p *corev1.PodSpec) (bool, string) {
	c := p.Containers[0]
	switch {
	case p.HostNetwork || p.HostPID || p.HostIPC:
		return false, "host namespaces"
	case p.SecurityContext == nil || p.SecurityContext.RunAsNonRoot == nil || !*p.SecurityContext.RunAsNonRoot:
		return false, "runAsNonRoot"
	case p.SecurityContext.SeccompProfile == nil || p.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		return false, "seccompProfile"
	case c.SecurityContext == nil || c.SecurityContext.AllowPrivilegeEscalation == nil || *c.SecurityContext.AllowPrivilegeEscalation:
		return false, "allowPrivilegeEscalation"
	case c.SecurityContext.Capabilities == nil || !slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL"):
		return false, "capabilities.drop ALL"
	case c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged:
		return false, "privileged"
	}
	for _, v := range p.Volumes {
		if v.HostPath != nil {
			return false, "hostPath volume " + v.Name
		}
	}
	return true, ""
}
func ptrTo[T any](v T) *T { return &v }

// TestTenantProviderIDs: a tenant cannot take another team's instance: not
// by creating a machine with its provider ID under a paused Cluster of its
// own or one that does not exist yet (the clusterctl move and restore
// exceptions need the move verb), not by moving a machine that holds one to
// another cluster.
func TestTenantProviderIDs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	e.newCluster("intruder", true) // paused: the move exception's condition
	machine := func(name, cluster, providerID string) *infrav1.TerraformMachine {
		tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": cluster}}}
		tm.Spec.Module.Inline = "# none"
		tm.Spec.ProviderID = providerID
		return tm
	}
	_, err := tn.captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Create(ctx, machine("forged", "intruder", "local:///victim-0"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `with the "move" verb on terraformmachines`) {
		t.Errorf("a tenant's machine with another's provider ID: %v, want refused", err)
	}
	// Nor before its Cluster exists: a restore's exception needs the move
	// verb too.
	_, err = tn.captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Create(ctx, machine("forged-early", "restored-later", "local:///victim-1"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `with the "move" verb on terraformmachines`) {
		t.Errorf("a tenant's machine with another's provider ID before its Cluster exists: %v, want refused", err)
	}
	// What clusterctl move does, as a cluster admin: allowed.
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Create(ctx, machine("moved", "intruder", "local:///moved-0"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a move as cluster admin: %v", err)
	}
	err = waitAPI(func() error {
		tm, err := tn.captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Get(ctx, "moved", metav1.GetOptions{})
		if err != nil {
			return err
		}
		tm.Labels["cluster.x-k8s.io/cluster-name"] = "victim"
		_, err = tn.captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Update(ctx, tm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return err
		}
		if err == nil || !strings.Contains(err.Error(), "the object holds provider IDs") {
			t.Errorf("relabelling a machine with a provider ID: %v, want refused", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sensitiveModule shows its inputs every way terraform can: in a plan (an
// attribute), in a provisioner's output, in an output not marked sensitive,
// and in the error of a failing command.
const sensitiveModule = `
variable "captf_cluster_name" { type = string }
variable "captf_name" { type = string }
variable "db" { type = string }
variable "marked" { type = string }
variable "fail" {
  type    = bool
  default = false
}

resource "terraform_data" "shown" {
  input = { db = var.db, marked = var.marked }
  provisioner "local-exec" {
    command = "echo db=${var.db} marked=${var.marked}"
  }
}

resource "terraform_data" "failing" {
  count = var.fail ? 1 : 0
  provisioner "local-exec" {
    command = "echo cannot connect with ${var.db} >&2; exit 1"
  }
}

output "leak" { value = var.db }
output "fine" { value = "nothing to hide" }
`

// TestSensitiveValuesStayHidden: a value from a Secret, and one marked
// sensitive, appear in no pod log, event, condition or status field, even
// when the module prints them, outputs them and fails quoting them.
func TestSensitiveValuesStayHidden(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	const fromSecret, marked = "canary-from-secret-7d1e", "canary-marked-39b2"
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data: map[string][]byte{"password": []byte(fromSecret)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "hush", Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "hush"},
			OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(e.newCluster("hush", false))}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: sensitiveModule}}},
	}
	markedValue, _ := json.Marshal(marked)
	tc.Spec.Variables = []infrav1.Variable{
		{Name: "db", ValueFrom: &infrav1.VariableSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
		{Name: "marked", Value: &runtime.RawExtension{Raw: markedValue}, Sensitive: true},
	}
	e.create(tc)
	got := e.waitFor("hush", 2*time.Minute, "Ready", isReady)
	if string(got.Status.Outputs["fine"].Raw) != `"nothing to hide"` {
		t.Errorf("outputs %v: the ordinary one is missing", got.Status.Outputs)
	}
	e.update("hush", func(tc *infrav1.TerraformCluster) {
		tc.Spec.Variables = append(tc.Spec.Variables, infrav1.Variable{Name: "fail", Value: &runtime.RawExtension{Raw: []byte("true")}})
	})
	e.waitFor("hush", 2*time.Minute, "ApplyFailed", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "ApplyFailed"
	})

	seen := e.everythingSeen(m, "hush")
	if log := seen["record apply Failed "+run.KeyLog]; !strings.Contains(log, "cannot connect with "+runner.Redacted) {
		t.Errorf("the failed run's record keeps no log of what it printed: %q", log)
	}
	printed := false
	for where, text := range seen {
		for _, canary := range []string{fromSecret, marked} {
			if strings.Contains(text, canary) {
				t.Errorf("%s shows %s", where, canary)
			}
		}
		printed = printed || strings.Contains(text, "echo db=")
	}
	if !printed || !strings.Contains(seen["status"], "cannot connect with") {
		t.Errorf("the module's output is not where the test looks: the test proves nothing:\n%v", seen)
	}
}

// TestCustomRunnerServiceAccount: spec.jobs.serviceAccountName (cloud
// workload identity) runs the Job as that account, which needs no RBAC of
// its own: the runner API knows its pods. An account its namespace's owner
// did not label for CAPTF is refused.
func TestCustomRunnerServiceAccount(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	runner := map[string]string{infrav1.LabelRunnerServiceAccount: "true"}
	for name, labels := range map[string]map[string]string{"cloud-runner": runner, "cloud-reader": runner, "unlabelled": nil} {
		if _, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc := e.localCloud("wi", e.newCluster("wi", false), map[string]any{"instances": 1})
	tc.Spec.Jobs.ServiceAccountName = "cloud-runner"
	tc.Spec.Jobs.PlanServiceAccountName = "cloud-reader"
	keep := int32(3) // the clean drift check's Job, to read its account
	tc.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	// The shortest interval the webhook takes: the test waits for one check.
	tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 20 * time.Second}}
	e.create(tc)
	// Under Manual an apply that holds no approval only plans: it runs as
	// the plan account, and the apply an approval starts as the runner's.
	gated := e.localCloud("gated", e.newCluster("gated", false), map[string]any{"instances": 1})
	gated.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	gated.Spec.Jobs.ServiceAccountName, gated.Spec.Jobs.PlanServiceAccountName = "cloud-runner", "cloud-reader"
	gated.Spec.Jobs.SuccessfulJobsHistoryLimit = &keep
	e.create(gated)
	e.waitFor("wi", 2*time.Minute, "Ready", isReady)
	job := e.jobsOf("wi", "apply")[0]
	if sa := job.Spec.Template.Spec.ServiceAccountName; sa != "cloud-runner" {
		t.Errorf("the Job runs as %q", sa)
	}
	waiting := waitCondition(e, "gated", infrav1.ConditionPlanAwaitingApproval, "the plan waiting", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue && c.Reason == workspace.ReasonAwaitingApproval
	})
	for _, j := range e.jobsOf("gated", "apply") {
		if sa := j.Spec.Template.Spec.ServiceAccountName; sa != "cloud-reader" {
			t.Errorf("the unapproved apply %s runs as %q, want cloud-reader", j.Name, sa)
		}
	}
	e.annotate("gated", infrav1.AnnotationApprovePlan, waiting.Status.LastPlan.Hash)
	e.waitFor("gated", 2*time.Minute, "Ready", isReady)
	if jobs := e.jobsOf("gated", "apply"); !slices.ContainsFunc(jobs, func(j batchv1.Job) bool {
		return j.Labels[names.LabelApprovedPlan] == waiting.Status.LastPlan.Hash && j.Spec.Template.Spec.ServiceAccountName == "cloud-runner"
	}) {
		t.Errorf("no approved apply ran as cloud-runner: %v", jobAccounts(jobs))
	}
	if n := len(e.instanceFiles()); n != 2 {
		t.Errorf("%d instances, want 2", n)
	}
	// A drift check only plans: it runs as the plan account, and reaches
	// its state through the runner API as any runner does.
	checked := e.waitFor("wi", 2*time.Minute, "a clean drift check", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDrifted)
		return c != nil && c.Reason == workspace.ReasonNoDrift
	})
	if c := condition(checked, infrav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v after the drift check", c)
	}
	drifts := e.jobsOf("wi", "drift")
	if len(drifts) == 0 {
		t.Error("no drift check Job kept")
	}
	for _, j := range drifts {
		if sa := j.Spec.Template.Spec.ServiceAccountName; sa != "cloud-reader" {
			t.Errorf("drift check %s runs as %q, want cloud-reader", j.Name, sa)
		}
	}

	tc = e.localCloud("nope", e.newCluster("nope", false), map[string]any{"instances": 1})
	tc.Spec.Jobs.ServiceAccountName = "unlabelled"
	e.create(tc)
	got := e.waitFor("nope", time.Minute, "RunnerServiceAccountNotAllowed", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "RunnerServiceAccountNotAllowed"
	})
	if msg := condition(got, infrav1.ConditionReady).Message; !strings.Contains(msg, infrav1.LabelRunnerServiceAccount+"=true") {
		t.Errorf("message %q does not say how to allow it", msg)
	}
}

// TestApproverWriterSplit: with the shipped approval policy installed, a
// writer cannot approve a plan; a user granted the verb approve can.
func TestApproverWriterSplit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	tn := e.newTenant()
	e.create(e.localCloud("gated", nil, map[string]any{}))
	attempt := 0
	approve := func() error { // a new hash each time: an unchanged one is no approval
		attempt++
		tc, err := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, "gated", metav1.GetOptions{})
		if err != nil {
			return err
		}
		tc.Annotations = map[string]string{infrav1.AnnotationApprovePlan: fmt.Sprintf("%016x", attempt)}
		_, err = tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Update(ctx, tc, metav1.UpdateOptions{})
		return err
	}
	// The policy takes effect a moment after it is created.
	err := waitAPI(func() error {
		if err := approve(); err == nil || !strings.Contains(err.Error(), "needs the verb approve on terraformclusters") {
			return fmt.Errorf("a writer approves: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A writer may still change everything else.
	e.update("gated", func(tc *infrav1.TerraformCluster) { tc.Labels["team"] = "a" })
	e.grantApprove("terraformclusters")
	if err := waitAPI(approve); err != nil {
		t.Errorf("an approver approves: %v", err)
	}
}

// installApprovalPolicy installs manifests/approval-policy for the test.
// Tests that install it run one at a time: it is cluster-wide.
func installApprovalPolicy(t *testing.T) {
	ctx := context.Background()
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "approval-policy"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		resource := map[string]string{"ValidatingAdmissionPolicy": "validatingadmissionpolicies", "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[o.GetKind()]
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}
		if _, err := plane.Dynamic.Resource(gvr).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = plane.Dynamic.Resource(gvr).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		})
	}
}

// grantApprove gives the tenant the verb approve on resources.
func (e *env) grantApprove(resources ...string) {
	e.grant("approver", rbacv1.PolicyRule{APIGroups: []string{infrav1.SchemeGroupVersion.Group}, Resources: resources, Verbs: []string{"approve"}})
}

// grant binds the tenant to a Role name of rules.
func (e *env) grant(name string, rules ...rbacv1.PolicyRule) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := plane.Kube.RbacV1().Roles(e.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: e.ns}}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestApprovalPolicyGuardsThePolicy (issue 30, item 4): with the approval
// policy installed, a writer without the verb approve switched
// spec.approvalPolicy from Manual to Auto and the next plan applied
// unapproved; and restore-state and abandon-infrastructure, which roll a
// state back and leave infrastructure unmanaged, were open to any writer.
// Each needs an approver now; removing them does not.
func TestApprovalPolicyGuardsThePolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	tn := e.newTenant()
	tc := e.localCloud("guarded", nil, map[string]any{})
	tc.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	tc.Spec.Protect = []string{"db.*", "net.gw"}
	e.create(tc)
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: e.ns},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "# nothing"}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Create(ctx, tm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tcs, tms := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns), tn.captf.InfrastructureV1alpha1().TerraformMachines(e.ns)
	patch := func(kind, name, body string) error {
		var err error
		if kind == "cluster" {
			_, err = tcs.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		} else {
			_, err = tms.Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		}
		return err
	}
	annotate := func(key, value string) string {
		return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	}
	writes := []struct{ what, kind, name, body, refusal string }{
		{"approvalPolicy Manual to Auto", "cluster", "guarded", `{"spec":{"approvalPolicy":null}}`, "changing spec.approvalPolicy needs the verb approve on terraformclusters"},
		{"approvalPolicy Manual to Destructive", "cluster", "guarded", `{"spec":{"approvalPolicy":"Destructive"}}`, "changing spec.approvalPolicy needs the verb approve"},
		{"a cluster's restore", "cluster", "guarded", annotate(infrav1.AnnotationRestoreState, "tfc-guarded-backup-20261201-000000"), "setting captf.io/restore-state needs the verb approve on terraformclusters"},
		{"a cluster's abandon", "cluster", "guarded", annotate(infrav1.AnnotationAbandonInfrastructure, "true"), "setting captf.io/abandon-infrastructure needs the verb approve on terraformclusters"},
		{"a machine's restore", "machine", "worker", annotate(infrav1.AnnotationRestoreState, "tfm-worker-backup-20261201-000000"), "setting captf.io/restore-state needs the verb approve on terraformmachines"},
		{"a machine's abandon", "machine", "worker", annotate(infrav1.AnnotationAbandonInfrastructure, "true"), "setting captf.io/abandon-infrastructure needs the verb approve on terraformmachines"},
		{"a protect pattern removed", "cluster", "guarded", `{"spec":{"protect":["net.gw","dns.*"]}}`, "removing or changing a pattern of spec.protect needs the verb approve on terraformclusters"},
		{"every protect pattern removed", "cluster", "guarded", `{"spec":{"protect":null}}`, "removing or changing a pattern of spec.protect needs the verb approve"},
	}
	// The policy takes effect a moment after it is created.
	err := waitAPI(func() error {
		if err := patch("cluster", "guarded", `{"spec":{"approvalPolicy":null}}`); err == nil || !strings.Contains(err.Error(), "needs the verb approve") {
			return fmt.Errorf("a writer changes the approval policy: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if err := patch(w.kind, w.name, w.body); err == nil || !strings.Contains(err.Error(), w.refusal) {
			t.Errorf("a writer sets %s: %v, want %q", w.what, err, w.refusal)
		}
	}
	// Everything else stays a writer's.
	if err := patch("cluster", "guarded", `{"metadata":{"labels":{"team":"a"}}}`); err != nil {
		t.Errorf("a writer labels the cluster: %v", err)
	}
	// Protecting more grants nothing either.
	if err := patch("cluster", "guarded", `{"spec":{"protect":["db.*","net.gw","dns.*"]}}`); err != nil {
		t.Errorf("a writer adds a protect pattern: %v", err)
	}
	e.grantApprove("terraformclusters", "terraformmachines")
	for _, w := range writes {
		if err := waitAPI(func() error { return patch(w.kind, w.name, w.body) }); err != nil {
			t.Errorf("an approver sets %s: %v", w.what, err)
		}
	}
	// Taking an annotation away grants nothing: open to writers (and to
	// the manager, which removes a restore once done).
	if err := plane.Kube.RbacV1().RoleBindings(e.ns).Delete(ctx, "approver", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	value := "false"
	err = waitAPI(func() error {
		// Each try a change: setting the value it already has needs no
		// approver, and a try before the right went lands.
		if err := patch("machine", "worker", annotate(infrav1.AnnotationAbandonInfrastructure, value)); err == nil {
			value = map[string]string{"false": "true", "true": "false"}[value]
			return errors.New("the approver's right has not gone yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := patch("machine", "worker", fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:null}}}`, infrav1.AnnotationRestoreState, infrav1.AnnotationAbandonInfrastructure)); err != nil {
		t.Errorf("a writer removes a machine's restore and abandon: %v", err)
	}
}

// TestLongNameThroughRunnerAPI: an object whose name is too long for its
// Secrets' names in full (they end in a hash) still reaches its own state
// through the runner API, and only its own.
func TestLongNameThroughRunnerAPI(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	name := "long-" + strings.Repeat("n", 235)
	tc := e.localCloud(name, e.newClusterOf("long", name, false), map[string]any{"instances": 1})
	tc.Labels["cluster.x-k8s.io/cluster-name"] = "long"
	e.create(tc)
	e.waitFor(name, 2*time.Minute, "Ready", isReady)
	state := names.Object{Kind: "tfc", Name: name}.State()
	if len(state) > 253 || !strings.HasPrefix(state, "tfc-long-nnn") {
		t.Fatalf("state name %q", state)
	}
	if n := e.stateOf(name).instances(); n != 1 {
		t.Errorf("%d instances in the state, want 1", n)
	}
}

// lateSensitiveModule prints its input when it is destroyed: a destroy runs
// with the durable inputs, the last apply's.
const lateSensitiveModule = `
variable "captf_cluster_name" { type = string }
variable "captf_name" { type = string }
variable "token" { type = string }

resource "terraform_data" "uses" {
  input = var.token
  provisioner "local-exec" {
    when    = destroy
    command = "echo destroying with ${self.input}"
  }
}
`

// TestLateSensitiveFlag (issue 30, item 9): a variable marked sensitive
// after its object was applied changed no inputs hash, so no run carried
// the new list to the durable inputs, and the destroy printed the value.
// What is sensitive is part of the inputs: marking one applies again, and
// every later run hides it.
func TestLateSensitiveFlag(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	const canary = "canary-late-5a3c"
	value, _ := json.Marshal(canary)
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "late"},
			// Held after CAPTF's finalizer goes: its destroy Job and pod stay to be read.
			Finalizers:      []string{"example.com/hold"},
			OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(e.newCluster("late", false))}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: lateSensitiveModule},
			Variables: []infrav1.Variable{{Name: "token", Value: &runtime.RawExtension{Raw: value}}}}},
	}
	e.create(tc)
	first := e.waitFor("late", 2*time.Minute, "Ready", isReady).Status.AppliedInputsHash
	e.update("late", func(tc *infrav1.TerraformCluster) { tc.Spec.Variables[0].Sensitive = true })
	e.waitFor("late", 2*time.Minute, "applied with the sensitive flag", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedInputsHash != first
	})
	e.deleteTC("late", metav1.DeletePropagationBackground)
	e.waitFor("late", 2*time.Minute, "destroyed", func(tc *infrav1.TerraformCluster) bool {
		return tc != nil && !slices.Contains(tc.Finalizers, infrav1.TerraformClusterFinalizer)
	})
	destroys := e.jobs("destroy")
	if len(destroys) != 1 {
		t.Fatalf("%d destroy Jobs, want 1", len(destroys))
	}
	pods, err := plane.Kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + destroys[0].Name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the destroy Job's pods: %v (%d)", err, len(pods.Items))
	}
	logs, err := executor.Logs(e.ns, pods.Items[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "destroying with") {
		t.Fatalf("the destroy did not print where the test looks: the test proves nothing:\n%s", tail(logs, 2000))
	}
	if strings.Contains(logs, canary) {
		t.Errorf("the destroy's log shows the value marked sensitive after the apply:\n%s", tail(logs, 2000))
	}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Patch(ctx, "late", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestReferenceKeysAreChecked (issue 30, item 5): a reference the object
// already had was not checked again, keyed by the Secret alone, so a
// tenant who may not read a Secret added a variable reading another key of
// it. Each new (Secret, key) is checked; a kept one is not.
func TestReferenceKeysAreChecked(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data: map[string][]byte{"user": []byte("app"), "admin-password": []byte("canary-admin-9f2a")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fromDB := func(name, key string) infrav1.Variable {
		return infrav1.Variable{Name: name, ValueFrom: &infrav1.VariableSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: key}}}
	}
	// The namespace's admin gives the cluster the user name; paused, it runs nothing.
	tc := e.localCloud("keys", e.newCluster("keys", true), map[string]any{})
	tc.Spec.Variables = append(tc.Spec.Variables, fromDB("db_user", "user"))
	e.create(tc)
	tcs := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	update := func(change func(*infrav1.TerraformCluster)) error {
		// The manager writes the object too (its finalizer, Paused).
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := tcs.Get(ctx, "keys", metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(cur)
			_, err = tcs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	err := update(func(tc *infrav1.TerraformCluster) {
		tc.Spec.Variables = append(tc.Spec.Variables, fromDB("db_admin", "admin-password"))
	})
	if err == nil || !strings.Contains(err.Error(), `may not get Secret "db"`) {
		t.Errorf("the tenant adds another key of a Secret the object reads: %v, want refused", err)
	}
	// Every key of it at once, through envFrom: refused as well.
	err = update(func(tc *infrav1.TerraformCluster) {
		tc.Spec.Jobs.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	})
	if err == nil || !strings.Contains(err.Error(), `may not get Secret "db"`) {
		t.Errorf("the tenant adds every key of it through envFrom: %v, want refused", err)
	}
	// What the object had stays writable for the tenant.
	if err := update(func(tc *infrav1.TerraformCluster) { tc.Labels["team"] = "a" }); err != nil {
		t.Errorf("an update that keeps the reference: %v", err)
	}
}

// runRecords is what the run records of namespace ns hold, by
// "record <operation> <outcome> <key>", the plan's JSON unzipped.
func runRecords(t *testing.T, ns string) map[string]string {
	t.Helper()
	list, err := plane.Kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: names.LabelRunRecord + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		prefix := "record " + cm.Labels[names.LabelOperation] + " " + cm.Labels[names.LabelOutcome] + " "
		for k, v := range cm.Data {
			out[prefix+k] += v
		}
		for k, v := range cm.BinaryData {
			zr, err := gzip.NewReader(bytes.NewReader(v))
			if err != nil {
				t.Fatalf("%s of %s: %v", k, cm.Name, err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("%s of %s: %v", k, cm.Name, err)
			}
			out[prefix+k] += string(b)
		}
	}
	return out
}

// everythingSeen is what a user or an operator sees of object name's runs:
// its status, the namespace's events, pod logs and termination messages,
// the manager's log and the run records.
func (e *env) everythingSeen(m *framework.Manager, name string) map[string]string {
	t := e.t
	t.Helper()
	ctx := context.Background()
	seen := map[string]string{}
	obj, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status, _ := json.Marshal(obj.Status)
	seen["status"] = string(status)
	events, err := plane.Kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events.Items {
		seen["event "+ev.Reason] += ev.Message + "\n"
	}
	pods, err := plane.Kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		logs, err := executor.Logs(e.ns, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		seen["log of "+p.Name] = logs
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				seen["termination message of "+p.Name] = cs.State.Terminated.Message
			}
		}
	}
	mlog, _ := os.ReadFile(m.LogFile)
	seen["manager log"] = string(mlog)
	for k, v := range runRecords(t, e.ns) {
		seen[k] = v
	}
	return seen
}

// TestRedactsMultilineAndEnvSecrets (issue 50, item 6): a multi-line value
// from a Secret (a PEM key, a cloud-config), which terraform prints as an
// indented heredoc a line at a time, and the values of Secrets given to the
// runner through spec.jobs.env and envFrom, passed the redactor into logs,
// run records and statuses. Each line is redacted now, and so is each
// value the runner's environment took from a Secret.
func TestRedactsMultilineAndEnvSecrets(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	const line1, line2, token, bulk = "MIIEcanaryLineOne4c1f", "MIIEcanaryLineTwo9a7e", "canary-env-token-51c3", "canary-envfrom-8e02"
	pem := "-----BEGIN PRIVATE KEY-----\n" + line1 + "\n" + line2 + "\n-----END PRIVATE KEY-----\n"
	for name, data := range map[string]map[string][]byte{"tls": {"key": []byte(pem)}, "creds": {"token": []byte(token)}, "bulk": {"secret": []byte(bulk)}} {
		if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "pem", Namespace: e.ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "pem"},
			OwnerReferences: []metav1.OwnerReference{clusterOwnerRef(e.newCluster("pem", false))}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: `
variable "key" { type = string }
resource "terraform_data" "key" {
  input = var.key
  provisioner "local-exec" {
    command = "echo token=$API_TOKEN bulk=$BULK_secret"
  }
}
`},
			Jobs: &infrav1.JobPolicy{
				Env:     []corev1.EnvVar{{Name: "API_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}},
				EnvFrom: []corev1.EnvFromSource{{Prefix: "BULK_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "bulk"}}}},
			}}},
	}
	tc.Spec.Variables = []infrav1.Variable{
		{Name: "key", ValueFrom: &infrav1.VariableSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}, Key: "key"}}},
	}
	e.create(tc)
	e.waitFor("pem", 2*time.Minute, "Ready", isReady)
	seen := e.everythingSeen(m, "pem")
	printed, planned := false, false
	for where, text := range seen {
		for _, canary := range []string{line1, line2, token, bulk} {
			if strings.Contains(text, canary) {
				t.Errorf("%s shows %s", where, canary)
			}
		}
		printed = printed || strings.Contains(text, "token="+runner.Redacted+" bulk="+runner.Redacted)
		planned = planned || strings.Contains(text, "<<-EOT")
	}
	if !printed || !planned {
		t.Errorf("the module's echo (%v) or the plan's heredoc (%v) is not where the test looks: the test proves nothing:\n%v", printed, planned, seen)
	}
}

func jobAccounts(jobs []batchv1.Job) map[string]string {
	out := map[string]string{}
	for _, j := range jobs {
		out[j.Name] = j.Spec.Template.Spec.ServiceAccountName
	}
	return out
}
