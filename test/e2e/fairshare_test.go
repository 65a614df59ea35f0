package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/webhook"
	"github.com/captf/captf/test/framework"
)

// attackerSource is the address the attacker sends from: all of
// 127.0.0.0/8 is this host, and a pod has an address of its own.
const attackerSource = "127.0.0.2"

// startAttack runs the attack command with args until the test ends.
func startAttack(t *testing.T, args ...string) {
	t.Helper()
	bin, err := framework.BuildCommand("./test/cmd/attack", "attack")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "attack.log")
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	// A hostile pod runs on its own node, or within its CPU limit; here it
	// shares the test machine's two cores with the manager, the API server
	// and the victim's runners. One core at the lowest priority keeps its
	// flood from measuring the machine's CPU instead of the manager's
	// fairness (it still sends thousands of requests a second).
	cmd := exec.Command("nice", append([]string{"-n", "19", bin, "-source=" + attackerSource}, args...)...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		out.Close()
		b, _ := os.ReadFile(log)
		t.Logf("attacker: %s", tail(string(b), 1))
	})
	// Its connections are open and its flood answered.
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "attacking"), nil
	})
	if err != nil {
		t.Fatal("the attack never got going")
	}
}

// applyTimes creates n small TerraformClusters one after another and
// returns how long each took from create to Ready, sorted.
func (e *env) applyTimes(prefix string, n int) []time.Duration {
	e.t.Helper()
	var took []time.Duration
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		start := time.Now()
		tc := e.localCloud(name, e.newCluster(name, false), map[string]any{})
		if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(context.Background(), tc, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating %s: %v", name, err)
		}
		e.waitFor(name, 3*time.Minute, "Ready", isReady)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took
}

// checkFairShare compares the median apply time with and without an attack.
func checkFairShare(t *testing.T, calm, attacked []time.Duration) {
	t.Helper()
	calmMedian, attackedMedian := calm[len(calm)/2], attacked[len(attacked)/2]
	t.Logf("another namespace's apply: median %s without the attack %v, %s with it %v (%.2fx)", calmMedian.Round(10*time.Millisecond), calm,
		attackedMedian.Round(10*time.Millisecond), attacked, float64(attackedMedian)/float64(calmMedian))
	if attackedMedian > 2*calmMedian {
		t.Errorf("with the attack the apply's median took %s, over twice the %s without", attackedMedian, calmMedian)
	}
}

// TestRunnerAPIFairShare (issue 31, item 4): a tenant attacks the runner
// API from its pods' address: a flood of made-up tokens (each a
// TokenReview the manager would make), and its four runner pods (with their
// valid tokens) holding connections open with bodies sent a byte a second.
// Another namespace's apply takes no more than twice as long as without the
// attack. The old API took a slot before reading a body, so 16 such
// connections held all of them; and one global limit of new tokens let the
// flood refuse other pods'.
func TestRunnerAPIFairShare(t *testing.T) {
	ctx := context.Background()
	victim := newEnv(t)
	m := victim.startManager()
	hostile := newEnv(t)
	// Once the hostile manager has stopped (cleanups run last first): its
	// runs take no later test's Job slot.
	t.Cleanup(func() {
		_ = plane.Kube.BatchV1().Jobs(hostile.ns).DeleteCollection(context.Background(),
			metav1.DeleteOptions{PropagationPolicy: ptrTo(metav1.DeletePropagationBackground)}, metav1.ListOptions{})
	})
	hostile.startManager()
	for i := range 4 {
		name := fmt.Sprintf("hog-%d", i)
		hostile.create(hostile.localCloud(name, hostile.newCluster(name, false), map[string]any{"sleep_seconds": 600}))
	}
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := plane.Kube.CoreV1().Pods(hostile.ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelOperation + "=apply"})
		if err != nil {
			return false, nil
		}
		pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning })
		return len(pods) == 4, nil
	})
	if err != nil {
		t.Fatalf("%d hostile runner pods run, want 4", len(pods))
	}
	var tokens []string
	for _, p := range pods {
		tr, err := plane.Kube.CoreV1().ServiceAccounts(hostile.ns).CreateToken(ctx, names.RunnerServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{names.RunnerTokenAudience},
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tr.Status.Token)
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokenFile, []byte(strings.Join(tokens, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}

	calm := victim.applyTimes("calm", 5)
	state := fmt.Sprintf("/api/v1/namespaces/%s/secrets/%s", hostile.ns, tfcNames("hog-0").State())
	startAttack(t, "-target="+m.RunnerAPIAddr, "-junk-tokens=8", "-trickle=4", "-token-file="+tokenFile, "-path="+state)
	checkFairShare(t, calm, victim.applyTimes("storm", 5))
}

// TestWebhookFairShare (issue 31, item 4): a pod that reaches the webhook's
// port sends admission requests whose bodies come a byte a second, 64
// connections at once. Another namespace's writes are admitted and its
// apply takes no more than twice as long as without the attack. The old
// webhook took one of its 8 slots before reading a body: a few slow
// senders blocked every Terraform* write in the cluster.
func TestWebhookFairShare(t *testing.T) {
	victim := newEnv(t)
	m := victim.startManagerWithWebhook()
	calm := victim.applyTimes("calm", 3)
	startAttack(t, "-target="+m.WebhookAddr, "-trickle=64", "-method=POST", "-path="+webhook.Path("TerraformCluster"))
	checkFairShare(t, calm, victim.applyTimes("storm", 3))
}
