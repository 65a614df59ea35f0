package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

const leadingLog = "Leading: starting controllers"

// TestLeaderElection: of two managers one leads; when it is killed the
// other takes over within the lease duration and nothing runs twice.
func TestLeaderElection(t *testing.T) {
	e := newEnv(t)
	a := e.startManager("--leader-elect")
	waitLog(t, a, leadingLog, 30*time.Second)
	b := e.startManager("--leader-elect")
	waitReady(t, b)
	// The standby serves the webhook too.
	bad := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: e.ns}}
	if resp := review(t, b, "TerraformCluster", bad); resp.Allowed || resp.UID != "standby" || !strings.Contains(resp.Result.Message, "spec.module") {
		t.Errorf("the standby's webhook answered %+v, want the refusal of a module-less cluster", resp)
	}
	e.create(e.localCloud("ha", e.newCluster("ha", false), map[string]any{}))
	first := e.waitFor("ha", 2*time.Minute, "Ready", isReady)
	if b.LogContains(leadingLog) {
		t.Fatal("both managers lead")
	}

	a.Kill()
	killed := time.Now()
	waitLog(t, b, leadingLog, 30*time.Second)
	// The standby notices a stale lease one retry period (2s, with jitter)
	// after it expires.
	if took := time.Since(killed); took > 15*time.Second+8*time.Second {
		t.Errorf("the standby took over after %s, want within the 15s lease duration plus a few seconds", took)
	} else {
		t.Logf("the standby took over %s after the leader was killed", took.Round(100*time.Millisecond))
	}
	e.update("ha", func(tc *infrav1.TerraformCluster) {
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"instances": 2, "instance_dir": e.instances})
	})
	e.waitFor("ha", 2*time.Minute, "applied the change", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedInputsHash != first.Status.AppliedInputsHash
	})
	perHash := map[string]int{}
	for _, j := range e.jobs("apply") {
		perHash[j.Labels[names.LabelInputsHash]]++
	}
	if len(perHash) != 2 || perHash[first.Status.AppliedInputsHash] != 1 {
		t.Errorf("apply Jobs per inputs hash = %v, want one for each of the 2 hashes", perHash)
	}
	lease, err := plane.Kube.CoordinationV1().Leases(e.ns).Get(context.Background(), "captf-manager", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("leader Lease: %v", err)
	}
}

func waitLog(t *testing.T, m *framework.Manager, s string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return m.LogContains(s), nil
	})
	if err != nil {
		t.Fatalf("the manager never logged %q", s)
	}
}

func waitReady(t *testing.T, m *framework.Manager) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return m.Ready(), nil
	})
	if err != nil {
		t.Fatal("the manager never became ready")
	}
}

// TestLostLeaseExits: a leader that cannot renew its Lease (another holder
// took it) stops leading and exits non-zero, to be restarted.
func TestLostLeaseExits(t *testing.T) {
	e := newEnv(t)
	m := e.startManager("--leader-elect")
	waitLog(t, m, leadingLog, 30*time.Second)
	leases := plane.Kube.CoordinationV1().Leases(e.ns)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := leases.Get(ctx, "captf-manager", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		thief, now := "thief", metav1.NewMicroTime(time.Now().Add(time.Hour))
		lease.Spec.HolderIdentity, lease.Spec.RenewTime = &thief, &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return m.Exited(), nil
	})
	if err != nil {
		t.Fatal("the manager kept running without its Lease")
	}
	if code := m.ExitCode(); code == 0 {
		t.Errorf("exit code %d, want non-zero", code)
	}
	if !m.LogContains("Lost the leader Lease") {
		t.Error("the manager did not say why it exited")
	}
}

// TestServingBeforeControllersSync: readiness is what the pod serves. A
// manager whose controllers cannot sync (it may not list Cluster API's
// objects, as when their API is not served) is ready and its webhook
// admits writes through the API server; only /readyz/controllers says the
// controllers wait.
func TestServingBeforeControllersSync(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	role, err := plane.Kube.RbacV1().ClusterRoles().Get(ctx, "captf-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	noCAPI := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "captf-manager-no-capi-" + e.ns}}
	for _, r := range role.Rules {
		if !slices.Contains(r.APIGroups, "cluster.x-k8s.io") {
			noCAPI.Rules = append(noCAPI.Rules, r)
		}
	}
	if _, err := plane.Kube.RbacV1().ClusterRoles().Create(ctx, noCAPI, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.RbacV1().ClusterRoles().Delete(context.Background(), noCAPI.Name, metav1.DeleteOptions{})
	})
	crb, err := plane.Kube.RbacV1().ClusterRoleBindings().Get(ctx, "captf-manager-"+e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := plane.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, crb.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	crb.ResourceVersion, crb.RoleRef.Name = "", noCAPI.Name
	if _, err := plane.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	m := e.startManager()
	if _, err := plane.RegisterWebhook(ctx, "captf-"+e.ns, m.WebhookAddr, m.WebhookCert.CA.CertPEM, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "captf-"+e.ns, metav1.DeleteOptions{})
	})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return m.Serving(), nil
	}); err != nil {
		t.Fatal("the manager never became ready while its controllers wait")
	}
	time.Sleep(3 * time.Second) // informers retry listing meanwhile
	if m.Ready() {
		t.Error("/readyz/controllers says synced though Cluster API's objects cannot be listed")
	}
	if !m.Serving() {
		t.Error("/readyz went unready")
	}
	// The webhook answers: a forged provider ID is refused, a valid object
	// admitted.
	ws := infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: `output "x" { value = 1 }`}}
	forged := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: e.ns},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: ws, ProviderID: "local:///stolen"}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(e.ns).Create(ctx, forged, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.providerID: Forbidden") {
		t.Errorf("a forged provider ID: %v, want the webhook's refusal", err)
	}
	good := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: e.ns}, Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: ws}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, good, metav1.CreateOptions{}); err != nil {
		t.Errorf("a valid object was refused while the controllers wait: %v", err)
	}
}
