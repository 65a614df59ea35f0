package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// TestLocalCloudFromMirror: a module of a real provider (the local cloud's)
// applies with the provider installed from the mirror image runner pods
// mount (--provider-mirror-image), checked against the module's lock file;
// the cloud assigns the IDs. A quota the cloud refuses with stops the apply
// (CloudQuotaExceeded, with the cloud's message), and a raised quota lets the retry finish with
// no step by hand. A lock file whose hash the mirror's package does not
// match fails init. A delete destroys what the cloud holds.
func TestLocalCloudFromMirror(t *testing.T) {
	cloud, err := framework.StartLocalCloud(t.TempDir(), "-create-latency=200ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Stop)
	e := newEnv(t)
	account := e.ns
	if err := cloud.SetLimits(account, `{"quotas": {"instances": 1}}`); err != nil {
		t.Fatal(err)
	}
	lock := e.startManagerWithProviders()
	module, err := os.ReadFile(filepath.Join(root, "examples", "localcloud-cluster", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	newModule := func(name, lock string) {
		if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"main.tf": string(module), ".terraform.lock.hcl": lock}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newModule("localcloud", lock)
	newCluster := func(name, configMap string, instances int) {
		tc := e.localCloud(name, e.newCluster(name, false), map[string]any{})
		tc.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: configMap}}
		setVariables(&tc.Spec.WorkspaceSpec, map[string]any{"endpoint": cloud.URL, "account": account, "instances": instances})
		e.create(tc)
	}

	// Two instances where the quota is one: the cloud's refusal, word for
	// word, and the network and load balancer made before it are kept.
	newCluster("cloudy", "localcloud", 2)
	e.waitFor("cloudy", 3*time.Minute, "refused by the quota", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "CloudQuotaExceeded" && strings.Contains(c.Message, "QuotaExceeded: instance quota of 1 reached in account "+account)
	})
	stats, err := cloud.Stats()
	if err != nil || stats.Creates["load_balancers"] != 1 || stats.Creates["networks"] != 1 {
		t.Errorf("the cloud's creates before the quota is raised: %+v %v; want one network and one load balancer", stats, err)
	}

	// Raised, and the account throttled to 2 requests a second: the next
	// retry applies, slowed down by 429s, not failed by them.
	if err := cloud.SetLimits(account, `{"quotas": {"instances": 5}, "rate": 2, "burst": 1}`); err != nil {
		t.Fatal(err)
	}
	tc := e.waitFor("cloudy", 3*time.Minute, "Ready", isReady)
	if stats, err := cloud.Stats(); err != nil || stats.Throttled == 0 {
		t.Errorf("the cloud's counts after the throttled apply: %+v %v; want requests answered 429", stats, err)
	}
	if err := cloud.SetLimits(account, `{"quotas": {"instances": 5}}`); err != nil {
		t.Fatal(err)
	}
	instances, err := cloud.List(account, "instances")
	if err != nil || len(instances) != 2 {
		t.Fatalf("the cloud's instances: %+v %v; want 2", instances, err)
	}
	if got := string(tc.Status.Outputs["instances"].Raw); !strings.Contains(got, instances[0].ID) {
		t.Errorf("outputs.instances = %s, want the cloud's IDs %+v", got, instances)
	}
	if tc.Spec.ControlPlaneEndpoint.Host == "" || tc.Spec.ControlPlaneEndpoint.Port != 6443 {
		t.Errorf("controlPlaneEndpoint %+v, want the load balancer's address", tc.Spec.ControlPlaneEndpoint)
	}
	// init installed the provider from the mirror, as the lock file says.
	var applied string
	for _, j := range e.jobs("apply") {
		if j.Status.Succeeded > 0 {
			applied = j.Name
		}
	}
	logs, err := executor.Logs(e.ns, podOf(t, e.ns, applied))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "Installing captf.io/captf/localcloud v0.1.0") || !strings.Contains(logs, "Installed captf.io/captf/localcloud v0.1.0") {
		t.Errorf("the apply's log does not show the provider installed from the mirror:\n%s", tail(logs, 40))
	}

	// A lock file whose hash the mirror's package does not have.
	newModule("forged-lock", strings.Replace(lock, "h1:", "h1:AAAA", 1))
	newCluster("forged", "forged-lock", 0)
	e.waitFor("forged", 3*time.Minute, "failing init", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Reason == "ApplyFailed" && strings.Contains(c.Message, "init") && strings.Contains(c.Message, "checksum")
	})

	// Deleted: the cloud holds nothing of it.
	e.deleteTC("cloudy", metav1.DeletePropagationBackground)
	e.waitFor("cloudy", 3*time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	for _, kind := range []string{"instances", "load_balancers", "networks"} {
		if left, err := cloud.List(account, kind); err != nil || len(left) != 0 {
			t.Errorf("%s left in the cloud: %+v %v", kind, left, err)
		}
	}
}

// podOf names the pod of a Job.
func podOf(t *testing.T, ns, job string) string {
	t.Helper()
	pods, err := plane.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of Job %s: %v (%d)", job, err, len(pods.Items))
	}
	return pods.Items[0].Name
}

// startManagerWithProviders starts a manager whose runner pods run the
// runner image and mount the local cloud's provider mirror image, and
// returns the lock file of the local cloud's modules.
func (e *env) startManagerWithProviders() string {
	e.t.Helper()
	runner, err := framework.RunnerImage()
	if err != nil {
		e.t.Fatal(err)
	}
	mirror, err := framework.ProviderMirrorImage()
	if err != nil {
		e.t.Fatal(err)
	}
	lock, err := framework.LocalCloudLockFile()
	if err != nil {
		e.t.Fatal(err)
	}
	e.startManager("--runner-image="+runner, "--provider-mirror-image="+mirror)
	return lock
}
