package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/webhook"
	"github.com/captf/captf/test/framework"
)

// attackerSource is the address the attacker sends from: all of
// 127.0.0.0/8 is this host, and a pod has an address of its own.
const attackerSource = "127.0.0.2"

// startAttack runs the attack command with args, sending from source,
// until the test ends or the returned func is called.
func startAttack(t *testing.T, source string, args ...string) (stop func()) {
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
	cmd := exec.Command("nice", append([]string{"-n", "19", bin, "-source=" + source}, args...)...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			out.Close()
			b, _ := os.ReadFile(log)
			t.Logf("attacker: %s", tail(string(b), 1))
		})
	}
	t.Cleanup(stop)
	// Its connections are open and its flood answered.
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "attacking"), nil
	})
	if err != nil {
		t.Fatal("the attack never got going")
	}
	return stop
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

// logFairShare prints the median apply time with and without an attack: a
// measurement (docs/security.md quotes it), not an assertion, for on a busy
// machine the ratio measures the machine's CPU, not the manager's fairness.
func logFairShare(t *testing.T, calm, attacked []time.Duration) {
	t.Helper()
	calmMedian, attackedMedian := calm[len(calm)/2], attacked[len(attacked)/2]
	t.Logf("another namespace's apply: median %s without the attack %v, %s with it %v (%.2fx)", calmMedian.Round(10*time.Millisecond), calm,
		attackedMedian.Round(10*time.Millisecond), attacked, float64(attackedMedian)/float64(calmMedian))
}

// sample is the value of one series in a scrape: name and its labels, in
// any order; 0 when the scrape has no such series (a counter never
// incremented).
func sample(t *testing.T, scrape, name string, labels map[string]string) float64 {
	t.Helper()
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	series := name
	if len(pairs) > 0 {
		series += "{" + strings.Join(pairs, ",") + "}"
	}
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// series names one series of a scrape.
type series struct {
	name   string
	labels map[string]string
}

// checkShares asserts what the server counted while the attack ran, which
// a busy machine cannot fake: no request waited for a slot within its
// share (that is, behind slots other peers held beyond theirs), and the
// attack reached its limits (requests that waited beyond their share, or
// were refused, by the names in want).
func checkShares(t *testing.T, scrape, server string, slots []string, attacked ...series) {
	t.Helper()
	for _, sl := range slots {
		if n := sample(t, scrape, "captf_slot_waits_total", map[string]string{"server": server, "slots": sl, "share": "within"}); n != 0 {
			t.Errorf("%v requests to the %s waited for a %s slot within their share, behind the attacker's: want none\n%s", n, server, sl,
				grepLines(scrape, "captf_slot_waits_total"))
		}
	}
	for _, a := range attacked {
		if n := sample(t, scrape, a.name, a.labels); n == 0 {
			t.Errorf("%s %v is 0: the attack never reached that limit, and the test shows nothing\n%s", a.name, a.labels, grepLines(scrape, a.name))
		} else {
			t.Logf("%s %v: %v", a.name, a.labels, n)
		}
	}
}

// TestRunnerAPIFairShare (issue 31, item 4; issue 49): a tenant attacks
// the runner API from its pods' address: a flood of made-up tokens (each a
// TokenReview the manager would make), and its four runner pods (with
// their valid tokens) holding connections open with bodies sent a byte a
// second, twice as many as a pod may. Another namespace's applies go on:
// the manager counts none of their requests refused, and none waiting for
// a slot behind the attacker's, while it counts the attacker's refused
// (tokens that cannot be a runner's, its pods' share). The old API took a slot
// before reading a body, so 16 such connections held all of them; and one
// global limit of new tokens let the flood refuse other pods'. The apply
// times with and without the attack are printed, not compared: on a busy
// machine their ratio measures the CPU.
func TestRunnerAPIFairShare(t *testing.T) {
	ctx := context.Background()
	victim := newEnv(t)
	m := victim.startManager()
	hostile := newEnv(t)
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
	startAttack(t, attackerSource, "-target="+m.RunnerAPIAddr, "-junk-tokens=8", "-trickle=8", "-token-file="+tokenFile, "-path="+state)
	storm := victim.applyTimes("storm", 5)
	logFairShare(t, calm, storm)
	scrape := victim.scrape(m)
	checkShares(t, scrape, "runner_api", []string{"reading", "forwarding"},
		series{"captf_runner_api_refused_total", map[string]string{"namespace": "", "reason": "not_a_runner_token"}},
		series{"captf_runner_api_refused_total", map[string]string{"namespace": hostile.ns, "reason": "pod_share"}})
	// The flood cost no TokenReview (its tokens cannot be a runner's), so
	// nobody was refused for the shared budget of new tokens, nor a request
	// of the victim's pods.
	for _, labels := range []map[string]string{{"namespace": "", "reason": "new_tokens_shared"}, {"namespace": victim.ns, "reason": "pod_share"}} {
		if n := sample(t, scrape, "captf_runner_api_refused_total", labels); n != 0 {
			t.Errorf("captf_runner_api_refused_total %v: %v, want 0\n%s", labels, n, grepLines(scrape, "captf_runner_api_refused_total"))
		}
	}
}

// TestWebhookFairShare (issue 31, item 4; issue 49): a pod that reaches
// the webhook's port sends admission requests whose bodies come a byte a
// second, 64 connections at once. Another namespace's writes are admitted,
// and the manager counts none of the API server's requests waiting behind
// the attacker's, while it counts the attacker's beyond its share. The old
// webhook took one of its 8 slots before reading a body: a few slow
// senders blocked every Terraform* write in the cluster.
func TestWebhookFairShare(t *testing.T) {
	victim := newEnv(t)
	m := victim.startManagerWithWebhook()
	calm := victim.applyTimes("calm", 3)
	startAttack(t, attackerSource, "-target="+m.WebhookAddr, "-trickle=64", "-method=POST", "-path="+webhook.Path("TerraformCluster"))
	logFairShare(t, calm, victim.applyTimes("storm", 3))
	checkShares(t, victim.scrape(m), "webhook", []string{"reading", "deciding"},
		series{"captf_slot_waits_total", map[string]string{"server": "webhook", "slots": "reading", "share": "beyond"}})
}

// TestRunnerWaitsOutABusyRunnerAPI (issue 49, item 3): a runner's first
// request, the read of its inputs, meets a runner API that refuses it with
// 429: the budget of new tokens of its address and namespace spent, here
// by a flood of a real runner token of the namespace, bound to a decoy pod
// that runs no Job (each costs a TokenReview, then is refused), from the
// address runner pods share in this plane, for 3 s from the Job's
// creation; a manager restarting answers alike. The runner waits and asks
// again, as it does for every later request: one apply Job, which
// succeeds. The old runner failed its run on it, and the manager made a
// second Job 13 to 18 s later. (The flood leaves a new token a few chances
// in a hundred to pass at once: the unit test TestReadInputsRetries shows
// every retry deterministically.)
func TestRunnerWaitsOutABusyRunnerAPI(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManager()
	// A first apply: the manager makes the namespace's runner
	// ServiceAccount, whose token the flood sends.
	e.create(e.localCloud("first", e.newCluster("first", false), map[string]any{"instances": 1}))
	e.waitFor("first", 2*time.Minute, "Ready", isReady)
	decoy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decoy"}, Spec: corev1.PodSpec{ServiceAccountName: names.RunnerServiceAccount, AutomountServiceAccountToken: ptrTo(false),
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), RunAsUser: ptrTo(int64(1000)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "decoy", SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	decoy, err := plane.Kube.CoreV1().Pods(e.ns).Create(ctx, decoy, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, names.RunnerServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{names.RunnerTokenAudience},
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: decoy.Name, UID: decoy.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	// From 127.0.0.1: the front that plays the runner API's Service here
	// connects from there, so its budget is the runners'.
	stop := startAttack(t, "127.0.0.1", "-target="+m.RunnerAPIAddr, "-junk-tokens=8", "-junk-token-file="+tokenFile)
	e.create(e.localCloud("busy", e.newCluster("busy", false), map[string]any{"instances": 1}))
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, j := range e.jobs("apply") {
			if j.Labels[names.LabelObjectName] == "busy" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("no apply Job")
	}
	time.Sleep(3 * time.Second)
	stop()
	e.waitFor("busy", 3*time.Minute, "Ready", isReady)
	var busy []batchv1.Job
	for _, j := range e.jobs("apply") {
		if j.Labels[names.LabelObjectName] == "busy" {
			busy = append(busy, j)
		}
	}
	if len(busy) != 1 {
		for _, j := range busy {
			res, err := plane.Kube.CoreV1().Secrets(e.ns).Get(ctx, j.Name+"-result", metav1.GetOptions{})
			if err == nil {
				t.Logf("Job %s: %s", j.Name, res.Data[run.KeyResult])
			}
		}
		t.Errorf("%d apply Jobs of busy, want the one whose runner waited out the 429s", len(busy))
	}
	// The flood did take the budget: refused for its address's.
	scrape := e.scrape(m)
	if n := sample(t, scrape, "captf_runner_api_refused_total", map[string]string{"namespace": "", "reason": "new_tokens_source"}); n == 0 {
		t.Errorf("the flood was never refused for its address's budget: the runner met no 429\n%s", grepLines(scrape, "captf_runner_api_refused_total"))
	}
}

// TestRunnerAPIJunkTokensFromManyPods (issue 50, item 7): a tenant's pods,
// eight addresses, flood the runner API with tokens shaped as runner tokens
// of another namespace (the victim's), signed by nobody. Each is refused
// before it costs a TokenReview: the victim's new runs are not refused
// for a budget spent by the flood, and each apply takes one Job. The old
// API reviewed each such token within a budget per address and one for
// all: eight addresses spent all of it, and the victim's runs failed on
// their first request ("too many new tokens to check").
func TestRunnerAPIJunkTokensFromManyPods(t *testing.T) {
	victim := newEnv(t)
	m := victim.startManager()
	var sources []string
	for i := 2; i <= 9; i++ {
		sources = append(sources, fmt.Sprintf("127.0.0.%d", i))
	}
	startAttack(t, strings.Join(sources, ","), "-target="+m.RunnerAPIAddr, "-junk-tokens=16", "-forge-namespace="+victim.ns)
	time.Sleep(5 * time.Second) // past the bursts of the budgets: the flood at its rate
	victim.applyTimes("storm", 5)
	if jobs := victim.jobs("apply"); len(jobs) != 5 {
		t.Errorf("%d apply Jobs for 5 applies, want one each: a run failed on the flood", len(jobs))
	}
	scrape := victim.scrape(m)
	checkShares(t, scrape, "runner_api", []string{"reading", "forwarding"},
		series{"captf_runner_api_refused_total", map[string]string{"namespace": "", "reason": "not_a_runner_token"}})
	for _, labels := range []map[string]string{{"namespace": "", "reason": "new_tokens_shared"}, {"namespace": "", "reason": "new_tokens_namespace"},
		{"namespace": victim.ns, "reason": "new_tokens_namespace"}, {"namespace": victim.ns, "reason": "new_tokens_shared"}} {
		if n := sample(t, scrape, "captf_runner_api_refused_total", labels); n != 0 {
			t.Errorf("captf_runner_api_refused_total %v: %v, want 0: the flood spent a budget the victim needs\n%s", labels, n, grepLines(scrape, "captf_runner_api_refused_total"))
		}
	}
}

// TestWebhookBoundsExpensiveReviews (issue 50, item 7): a pod posted forged
// AdmissionReviews with tens of thousands of references straight to port
// 9443, no client certificate needed. Each reference cost an access review
// through the manager's one client, one source held every decision slot,
// and with failurePolicy Fail every TerraformCluster write failed
// (context deadline exceeded) while the manager grew past its memory limit.
// Now a review holds what the CRD admits, a source has its budget of access
// reviews and half the slots, and decisions stop at the API server's
// deadline: another namespace's creates and updates go through, and the
// manager's memory stays within its limit. Apply times are printed, not
// compared (logFairShare).
func TestWebhookBoundsExpensiveReviews(t *testing.T) {
	ctx := context.Background()
	victim := newEnv(t)
	m := victim.startManagerWithWebhook()
	calm := victim.applyTimes("calm", 2)
	startAttack(t, attackerSource, "-target="+m.WebhookAddr, "-forged-reviews=8", "-namespace="+victim.ns, "-path="+webhook.Path("TerraformCluster"))
	logFairShare(t, calm, victim.applyTimes("storm", 2))
	for _, name := range []string{"storm-0", "storm-1"} {
		tc := victim.get(name)
		tc.Labels["touched"] = "during-the-attack"
		if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(victim.ns).Update(ctx, tc, metav1.UpdateOptions{}); err != nil {
			t.Errorf("updating %s during the attack: %v", name, err)
		}
	}
	scrape := victim.scrape(m)
	checkShares(t, scrape, "webhook", []string{"deciding"},
		series{"captf_webhook_refused_total", map[string]string{"reason": "over_bounds"}},
		series{"captf_webhook_refused_total", map[string]string{"reason": "access_review_budget"}})
	// The shipped limit is 256Mi (manifests/manager); the old webhook grew
	// to 363 MiB under 8 forged reviews.
	if rss := sample(t, scrape, "process_resident_memory_bytes", nil); rss == 0 || rss > 200<<20 {
		t.Errorf("the manager's RSS under forged reviews: %.0f MiB, want it well within its 256Mi limit", rss/(1<<20))
	} else {
		t.Logf("the manager's RSS under forged reviews: %.0f MiB", rss/(1<<20))
	}
}
