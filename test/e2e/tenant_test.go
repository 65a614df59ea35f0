package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/names"
)

// tenant is a user with what a team gets in a shared management cluster:
// every verb on Cluster API and CAPTF objects of its namespace, nothing on
// Secrets, pods or Jobs.
type tenant struct {
	kube  kubernetes.Interface
	captf versioned.Interface
}

func (e *env) newTenant() *tenant {
	t := e.t
	t.Helper()
	ctx := context.Background()
	if _, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"cluster.x-k8s.io", infrav1.SchemeGroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := plane.Kube.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: e.ns}}}
	if _, err := plane.Kube.RbacV1().RoleBindings(e.ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := plane.ServiceAccountConfig(ctx, e.ns, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	tn := &tenant{kube: kubernetes.NewForConfigOrDie(cfg), captf: versioned.NewForConfigOrDie(cfg)}
	// A real tenant: its own rights do not reach Secrets.
	err = waitAPI(func() error {
		_, err := tn.kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			return fmt.Errorf("tenant lists Secrets: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tn
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
        echo "runnerapi-list-secrets=$(code --cacert $ca -H "$auth" $ra/secrets)"
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
	m := e.startManager()
	if _, err := plane.RegisterWebhook(ctx, "captf-"+e.ns, m.WebhookAddr, m.WebhookCert.CA.CertPEM, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "captf-"+e.ns, metav1.DeleteOptions{})
	})
	waitReady(t, m)
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
	e.waitFor("victim", 2*time.Minute, "Ready", isReady)
	victim := names.Object{Kind: "tfc", Name: "victim"}
	victimState, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, victim.State(), metav1.GetOptions{})
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
		"own_state": names.Object{Kind: "tfc", Name: "evil"}.State(), "victim_state": victim.State()})
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
		"runnerapi-list-secrets":       "403",
		"runnerapi-impersonate":        "403",
		"runnerapi-no-token":           "401",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %s", k, got[k], v)
		}
	}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, "stolen", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the module made a Secret: %v", err)
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
	m := e.startManager()
	if _, err := plane.RegisterWebhook(ctx, "captf-"+e.ns, m.WebhookAddr, m.WebhookCert.CA.CertPEM, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "captf-"+e.ns, metav1.DeleteOptions{})
	})
	waitReady(t, m)
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
