package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// TestModuleChangeNeedsApproval (issue 50, item 2): a writer changed an
// applied cluster's module and the new code ran at plan time with the run's
// credentials, before any approver saw it: a data source could read or send
// what the run could reach. Now code other than the applied code waits
// before init's plan, and runs only once an approver approves its digest.
func TestModuleChangeNeedsApproval(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	tcs := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns)

	leak, reads := leakServer(t)
	e.create(e.localCloud("code", e.newCluster("code", false), map[string]any{}))
	first := e.waitFor("code", 2*time.Minute, "Ready", isReady)
	if first.Status.AppliedModule == "" {
		t.Error("Ready with no status.appliedModule")
	}

	// The writer adds code that reaches out at plan time.
	waiting := e.addLeak(tcs, first, leak, reads)
	if n := reads.Load(); n != 0 {
		t.Fatalf("the unapproved code ran at plan time, no approver involved: %d reads of the test's server", n)
	}
	if !isReady(waiting) {
		t.Errorf("Ready %+v while new code waits: the infrastructure is still what was applied", condition(waiting, infrav1.ConditionReady))
	}
	if waiting.Status.AppliedModule != first.Status.AppliedModule {
		t.Errorf("appliedModule %q while the new code waits, want %q", waiting.Status.AppliedModule, first.Status.AppliedModule)
	}

	// The writer may not approve the code it wrote.
	forged := fmt.Sprintf(`{"metadata":{"annotations":{%q:"sha256:%064x"}}}`, infrav1.AnnotationApproveModule, 1)
	if _, err := tcs.Patch(ctx, "code", types.MergePatchType, []byte(forged), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "needs the verb approve") {
		t.Errorf("a writer sets %s: %v, want the approval policy's refusal", infrav1.AnnotationApproveModule, err)
	}
	e.never(10*time.Second, func() error {
		if n := reads.Load(); n != 0 {
			return fmt.Errorf("the unapproved code ran: %d reads", n)
		}
		return nil
	})

	// An approver sees which files changed and approves the code.
	approver := e.user("approver", "captf-writer", "captf-approver")
	r := e.kubectlCaptf(pluginBinary(t), approver, "", "approve", "tfc/code", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "changed  main.tf") {
		t.Fatalf("kubectl captf approve: exit %d\nstdout: %s\nstderr: %s\nwant the changed main.tf", r.code, r.out, r.err)
	}
	done := e.waitFor("code", 2*time.Minute, "the approved code applied", func(tc *infrav1.TerraformCluster) bool {
		return isReady(tc) && tc.Status.AppliedModule != "" && tc.Status.AppliedModule != first.Status.AppliedModule
	})
	if n := reads.Load(); n == 0 {
		t.Error("the approved code never read the test's server: the test does not show what it claims")
	}
	if _, ok := done.Annotations[infrav1.AnnotationApproveModule]; ok {
		t.Errorf("%s still set after the approved code applied: an approval is used once", infrav1.AnnotationApproveModule)
	}
}

// leakServer serves what leaking code reads: a remote state over HTTP,
// built into terraform and tofu, so it needs no provider download. It
// returns the module text that reads it at plan time, and the count of
// reads.
func leakServer(t *testing.T) (string, *atomic.Int32) {
	var reads atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		fmt.Fprint(w, `{"version":4,"terraform_version":"1.5.0","serial":1,"lineage":"leak","outputs":{},"resources":[]}`)
	})}
	go srv.Serve(ln) //nolint:errcheck // closed below
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprintf(`
data "terraform_remote_state" "leak" {
  backend = "http"
  config = {
    address = "http://%s/leak"
  }
}
`, ln.Addr()), &reads
}

// addLeak has a writer (tcs) add leak to tc's module, and waits until the
// new code waits for an approver or has read the leak's server.
func (e *env) addLeak(tcs clientTC, tc *infrav1.TerraformCluster, leak string, reads *atomic.Int32) *infrav1.TerraformCluster {
	e.t.Helper()
	// Retried on a conflict: the manager writes the object's status too.
	err := waitUntil(10*time.Second, func() error {
		changed := e.get(tc.Name).DeepCopy()
		changed.Spec.Module.Inline = tc.Spec.Module.Inline + leak
		_, err := tcs.Update(context.Background(), changed, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.waitFor(tc.Name, 2*time.Minute, "the new code waiting, or run", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionPlanAwaitingApproval)
		return reads.Load() != 0 || c != nil && c.Status == metav1.ConditionTrue && c.Reason == run.ReasonModuleAwaitingApproval
	})
}

type clientTC interface {
	Update(context.Context, *infrav1.TerraformCluster, metav1.UpdateOptions) (*infrav1.TerraformCluster, error)
}

// TestCodeAppliedBeforeDigests: an object applied by a release that
// recorded no digest of its code (status.appliedModule empty) ran any code
// its writer put in until its next apply: the upgrade left the fleet
// ungated. Now changed inputs wait for an approver, and a drift check of
// the applied inputs records the applied code's digest.
func TestCodeAppliedBeforeDigests(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	m := e.startManagerWithWebhook()
	tn := e.newTenant()
	leak, reads := leakServer(t)
	e.create(e.localCloud("old", e.newCluster("old", false), map[string]any{}))
	first := e.waitFor("old", 2*time.Minute, "Ready", isReady)

	// What an earlier release left: the object applied, no digest.
	m.Stop()
	err := waitAPI(func() error {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			return err
		}
		tc.Status.AppliedModule = ""
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).UpdateStatus(ctx, tc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, m)

	tcs := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	waiting := e.addLeak(tcs, e.get("old"), leak, reads)
	if n := reads.Load(); n != 0 {
		t.Fatalf("the code of an object applied before digests were recorded ran unapproved: %d reads of the test's server", n)
	}
	if c := condition(waiting, infrav1.ConditionPlanAwaitingApproval); !strings.Contains(c.Message, "before CAPTF recorded the digest") {
		t.Errorf("%s message %q: want why no code is on record", run.ReasonModuleAwaitingApproval, c.Message)
	}

	// The writer takes the change back and asks for drift checks: the
	// first check runs the applied code and records its digest.
	e.update("old", func(tc *infrav1.TerraformCluster) {
		tc.Spec.Module.Inline = first.Spec.Module.Inline
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 10 * time.Second}}
	})
	e.waitFor("old", 2*time.Minute, "the applied code's digest recorded", func(tc *infrav1.TerraformCluster) bool {
		return tc.Status.AppliedModule != ""
	})
	if got := e.get("old").Status.AppliedModule; got != first.Status.AppliedModule {
		t.Errorf("appliedModule %q recorded by the drift check, want the applied code's %q", got, first.Status.AppliedModule)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("%d reads of the test's server: code nobody approved ran", n)
	}
}

// approveModule waits for name's module code to wait for approval and
// approves the digest the condition names, as an approver would.
func (e *env) approveModule(name string) {
	e.t.Helper()
	tc := waitCondition(e, name, infrav1.ConditionPlanAwaitingApproval, "the new module code waiting", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue && c.Reason == run.ReasonModuleAwaitingApproval
	})
	digest := moduleDigest.FindString(condition(tc, infrav1.ConditionPlanAwaitingApproval).Message)
	if digest == "" {
		e.t.Fatalf("%s names no digest: %q", run.ReasonModuleAwaitingApproval, condition(tc, infrav1.ConditionPlanAwaitingApproval).Message)
	}
	e.annotate(name, infrav1.AnnotationApproveModule, digest)
}

var moduleDigest = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// TestModuleCannotReplaceTheBackend: terraform merges override files in
// name order, and a module's zzz_override.tf came after the runner's
// backend override: the module's own backend took the state at init,
// before the code gate, and CAPTF never saw it. The runner refuses such
// a file, and says which.
func TestModuleCannotReplaceTheBackend(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	stolen := filepath.Join(t.TempDir(), "stolen.tfstate")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Namespace: e.ns}, Data: map[string]string{
		"main.tf": `resource "terraform_data" "a" { input = 1 }
output "control_plane_endpoint" { value = { host = "sneaky.local.test", port = 6443 } }
`,
		"zzz_override.tf": fmt.Sprintf("terraform {\n  backend \"local\" {\n    path = %q\n  }\n}\n", stolen),
	}}
	if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := e.localCloud("sneaky", e.newCluster("sneaky", false), map[string]any{})
	tc.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "sneaky"}}
	tc.Spec.Variables = nil
	e.create(tc)
	got := e.waitFor("sneaky", 2*time.Minute, "Ready, or the file refused", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && (c.Status == metav1.ConditionTrue || strings.Contains(c.Message, "zzz_override.tf"))
	})
	if _, err := os.Stat(stolen); err == nil {
		t.Fatalf("the module's backend took the state: %s written, Ready %+v", stolen, condition(got, infrav1.ConditionReady))
	}
	if c := condition(got, infrav1.ConditionReady); c.Status == metav1.ConditionTrue || !strings.Contains(c.Message, "could replace the state backend") {
		t.Errorf("Ready %+v, want the override file refused", c)
	}
}
