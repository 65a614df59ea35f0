package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// TestRecreatedObjectKeepsProtection (issue 50, item 1): a writer deleted a
// protected TerraformCluster, stripped its finalizer and made it again
// without spec.protect or the approval policy; the new object took the old
// state up and its delete destroyed what spec.protect covered, no approver
// involved. Now only the manager, an approver or a mover removes CAPTF's
// finalizers (the approval policy guards the state's), and a state holds an
// object of another UID to the protection it was kept under until an
// approver lets it go.
func TestRecreatedObjectKeepsProtection(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	e.startManagerWithWebhook()
	tn := e.newTenant()
	tcs := tn.captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	cluster := e.newCluster("kept", false)
	tc := e.localCloud("kept", cluster, map[string]any{"instances": 1})
	tc.Spec.Protect = []string{"terraform_data.instance"}
	e.create(tc)
	first := e.waitFor("kept", 2*time.Minute, "Ready", isReady)
	e.update("kept", func(tc *infrav1.TerraformCluster) { tc.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual })
	head := tfcNames("kept").State()
	if first.Status.AppliedModule == "" {
		t.Errorf("status.appliedModule is empty after the first apply")
	}
	wantRecord := fmt.Sprintf(`{"uid":%q,"policy":"Manual","protect":["terraform_data.instance"],"module":%q}`, first.UID, first.Status.AppliedModule)
	if err := waitUntil(30*time.Second, func() error {
		s, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, head, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := s.Annotations[names.AnnotationProtection]; got != wantRecord {
			return fmt.Errorf("state head records %q, want %q", got, wantRecord)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	// The writer deletes it: the destroy is refused, the object stays.
	if err := tcs.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("kept", 2*time.Minute, "the destroy refused", readyReason(run.ReasonProtectedResourceChange))
	// Stripping the finalizer is refused to the writer, with the way out.
	_, err := tcs.Patch(ctx, "kept", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "kubectl annotate terraformcluster -n "+e.ns+" kept captf.io/abandon-infrastructure=true") {
		t.Errorf("a writer strips the finalizer of a protected cluster: %v, want the webhook's refusal naming the abandon", err)
	}
	// So is the state's, to a writer who may edit Secrets.
	e.grantSecrets()
	err = waitAPI(func() error {
		_, err := tn.kube.CoreV1().Secrets(e.ns).Patch(ctx, head, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), "removing captf.io/state-protection releases a state") {
			return fmt.Errorf("a writer who may edit Secrets strips the state's finalizer: %v, want the approval policy's refusal", err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// An operator with every right takes the object away (as a restore
	// into another plane brings a state without its object), and a writer
	// makes it again, unprotected, ungated.
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Patch(ctx, "kept", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("kept", 30*time.Second, "gone", gone)
	again := e.localCloud("kept", cluster, map[string]any{"instances": 1})
	if _, err := tcs.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Not fatal: on a manager that records no protection, the delete below
	// shows what the writer got.
	if err := waitUntil(time.Minute, func() error {
		c := condition(e.get("kept"), infrav1.ConditionProtectionInherited)
		switch {
		case c == nil || c.Status != metav1.ConditionTrue:
			return fmt.Errorf("%s: %+v, want True", infrav1.ConditionProtectionInherited, c)
		case !strings.Contains(c.Message, "approvalPolicy Manual, spec.protect [terraform_data.instance] and module code "+first.Status.AppliedModule) || !strings.Contains(c.Message, "captf.io/adopt-state="+string(first.UID)):
			return fmt.Errorf("%s message %q: want the policy, the patterns, the module code and the way out", infrav1.ConditionProtectionInherited, c.Message)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	destroys := len(e.jobs("destroy"))
	if err := tcs.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("kept", 2*time.Minute, "the destroy refused, or done", func(tc *infrav1.TerraformCluster) bool {
		return tc == nil || readyReason(run.ReasonProtectedResourceChange)(tc)
	})
	if files := e.instanceFiles(); len(files) != 1 {
		t.Fatalf("instances %v after the re-created object's delete: the protected instance was destroyed", files)
	}
	for _, j := range e.jobs("destroy")[destroys:] {
		if j.Labels[names.LabelProtect] != names.ProtectHash([]string{"terraform_data.instance"}) {
			t.Errorf("destroy Job %s ran under %s=%q, want the earlier object's patterns", j.Name, names.LabelProtect, j.Labels[names.LabelProtect])
		}
	}

	// The writer may not let it go; an approver may, and the destroy runs.
	adopt := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, infrav1.AnnotationAdoptState, first.UID)
	if _, err := tcs.Patch(ctx, "kept", types.MergePatchType, []byte(adopt), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "needs the verb approve") {
		t.Errorf("a writer sets %s: %v, want the approval policy's refusal", infrav1.AnnotationAdoptState, err)
	}
	e.grantApprove("terraformclusters")
	if err := waitAPI(func() error {
		_, err := tcs.Patch(ctx, "kept", types.MergePatchType, []byte(adopt), metav1.PatchOptions{})
		return err
	}); err != nil {
		t.Fatalf("an approver sets %s: %v", infrav1.AnnotationAdoptState, err)
	}
	e.waitFor("kept", 2*time.Minute, "destroyed once an approver let the protection go", gone)
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instances %v after the approved destroy", files)
	}
}

// grantSecrets lets the tenant read and edit the namespace's Secrets, as
// some teams' Roles do.
func (e *env) grantSecrets() {
	e.grant("secret-editor", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "update", "patch"}})
}

// waitUntil retries check until it passes or d is over.
func waitUntil(d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
