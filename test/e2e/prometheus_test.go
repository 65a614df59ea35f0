package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/test/framework"
)

// TestPrometheusAlerts: a real Prometheus scrapes a running manager as the
// shipped ServiceMonitor tells the Prometheus Operator to (HTTPS, the
// serving certificate's CA and name, honorLabels, the token of ServiceAccount
// monitoring/prometheus-k8s that the shipped ClusterRoleBinding lets read),
// and the API server as kube-prometheus does, and evaluates the shipped
// rules, with their `for` cut to seconds. It sees CAPTFJobFailing fire for a
// module that keeps failing, CAPTFClusterDrift for a drifted cluster,
// CAPTFNotReadyTooLong for a plan left unapproved, and no alert for a
// healthy one nor for the plane while it is healthy; then
// CAPTFCertificateExpiring once the serving certificate is one a renewal
// failed to replace, and CAPTFNoLeader and CAPTFWebhookFailing once the
// manager is gone and writes fail on its webhook.
// Scrapes without a token get 401, with a token lacking the permission 403.
// Every series the rules, the dashboard and the docs name is in what
// Prometheus scraped.
func TestPrometheusAlerts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.startManagerWithWebhook("--leader-elect")
	dir := t.TempDir()

	// Refused scrapes, straight to the manager.
	if code, body, err := m.Scrape(""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a scrape without a token: %d %v %s, want 401", code, err, body)
	}
	if code, body, err := m.Scrape("not-a-token"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("a scrape with a forged token: %d %v %s, want 401", code, err, body)
	}
	if _, err := plane.Kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody, err := plane.Token(ctx, e.ns, "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := m.Scrape(nobody); err != nil || code != http.StatusForbidden {
		t.Errorf("a scrape by a user without get on /metrics: %d %v %s, want 403", code, err, body)
	}
	// Profiles need their own permission: a metrics reader has none.
	reader, err := plane.MetricsReaderToken(ctx, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := m.GetMetricsPath("/debug/pprof/heap", reader); err != nil || code != http.StatusForbidden {
		t.Errorf("a heap profile for a metrics reader: %d %v, want 403", code, err)
	}
	profiler, err := plane.ProfilerToken(ctx, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := m.GetMetricsPath("/debug/pprof/heap?debug=1", profiler); err != nil || code != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("a heap profile for a user who may get /debug/pprof/*: %d %v %.200s", code, err, body)
	}

	// Prometheus' own identity, bound by the shipped binding.
	prometheusToken := shippedPrometheusIdentity(t)
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	var sm, rule *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceMonitor":
			sm = o
		case "PrometheusRule":
			rule = o
		}
	}
	files := map[string]string{"token": prometheusToken, "nobody-token": nobody, "ca.crt": string(m.WebhookCert.CA.CertPEM),
		"apiserver-ca.crt": string(plane.Config.CAData), "apiserver-client.crt": string(plane.Config.CertData), "apiserver-client.key": string(plane.Config.KeyData)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), shortRules(t, rule), 0o600); err != nil {
		t.Fatal(err)
	}
	prom, err := framework.StartPrometheus(ctx, dir, prometheusConfig(t, sm, dir, m.MetricsAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Stop)

	// A healthy cluster, one that will drift, a module that keeps failing,
	// and a plan nobody approves.
	e.gated("waiting", infrav1.ApprovalPolicyManual, map[string]any{"instances": 1})
	for _, name := range []string{"healthy", "drifty"} {
		tc := e.localCloud(name, e.newCluster(name, false), map[string]any{"instances": 1})
		tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: 20 * time.Second}}
		e.create(tc)
	}
	broken := e.localCloud("broken", e.newCluster("broken", false), map[string]any{})
	broken.Spec.Module.Inline = `resource "terraform_data" "a" { input = file("/nonexistent/input") }`
	e.create(broken)
	e.waitFor("drifty", 2*time.Minute, "a clean drift check", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionDrifted)
		return isReady(tc) && c != nil && c.Reason == workspace.ReasonNoDrift
	})
	if err := os.WriteFile(filepath.Join(e.instances, "drifty-0"), []byte("zone=elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The unapproved plan has waited two days, as far as its status says
	// (the alert counts from the condition's transition, which the manager
	// keeps while the plan waits); a day is more than a test can wait.
	waitCondition(e, "waiting", infrav1.ConditionPlanAwaitingApproval, "a plan waiting", func(c *metav1.Condition, _ *infrav1.TerraformCluster) bool {
		return c.Status == metav1.ConditionTrue
	})
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, "waiting", metav1.GetOptions{})
		if err != nil {
			return err
		}
		meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionPlanAwaitingApproval).LastTransitionTime = metav1.NewTime(time.Now().Add(-48 * time.Hour))
		_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).UpdateStatus(ctx, tc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	var alerts []framework.PromAlert
	firing := func(alert, name string) bool {
		return slices.ContainsFunc(alerts, func(a framework.PromAlert) bool {
			return a.Labels["alertname"] == alert && a.Labels["name"] == name && a.Labels["namespace"] == e.ns && a.State == "firing"
		})
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		if alerts, err = prom.Alerts(); err != nil {
			return false, err
		}
		return firing("CAPTFJobFailing", "broken") && firing("CAPTFClusterDrift", "drifty") && firing("CAPTFNotReadyTooLong", "waiting"), nil
	})
	t.Logf("alerts seen by Prometheus:\n%s", formatAlerts(alerts))
	if err != nil {
		t.Fatalf("CAPTFJobFailing for broken, CAPTFClusterDrift for drifty and CAPTFNotReadyTooLong for waiting are not all firing: %v", err)
	}
	for _, a := range alerts {
		if a.Labels["name"] == "healthy" {
			t.Errorf("alert %s (%s) for the healthy cluster", a.Labels["alertname"], a.State)
		}
		// The plane is healthy: its certificate is fresh, a manager
		// leads, the webhook answers.
		if a.Labels["name"] == "" || strings.HasPrefix(a.Labels["name"], "captf-manager") || strings.HasPrefix(a.Labels["name"], "validation.") {
			t.Errorf("alert %s (%s) on a healthy plane: %v", a.Labels["alertname"], a.State, a.Labels)
		}
		if a.Labels["alertname"] == "CAPTFNotReadyTooLong" && a.Labels["reason"] != infrav1.ConditionPlanAwaitingApproval {
			t.Errorf("CAPTFNotReadyTooLong labels %v, want reason PlanAwaitingApproval", a.Labels)
		}
	}
	if a := alerts[slices.IndexFunc(alerts, func(a framework.PromAlert) bool { return a.Labels["alertname"] == "CAPTFJobFailing" })]; a.Labels["operation"] != "apply" || a.Labels["kind"] != "TerraformCluster" {
		t.Errorf("CAPTFJobFailing labels %v", a.Labels)
	}

	// Targets: the ServiceMonitor's scrape is up; one without a token is
	// refused with 401, one whose user may not get /metrics with 403.
	targets, err := prom.Targets()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{scrapeJob(sm): "", "no-token": "401", "not-allowed": "403"}
	for _, tg := range targets {
		code, ok := want[tg.ScrapePool]
		if !ok {
			continue
		}
		delete(want, tg.ScrapePool)
		if code == "" && tg.Health != "up" {
			t.Errorf("the ServiceMonitor's scrape is %s: %s", tg.Health, tg.LastError)
		}
		if code != "" && (tg.Health != "down" || !strings.Contains(tg.LastError, code)) {
			t.Errorf("scrape %s is %s (%q), want down with %s", tg.ScrapePool, tg.Health, tg.LastError, code)
		}
	}
	if len(want) > 0 {
		t.Errorf("no targets for %v", want)
	}
	// honorLabels: the series keep the object's namespace, not the target's.
	ready, err := prom.Query(`captf_ready{name="healthy"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ready) != 1 || ready[0].Labels["namespace"] != e.ns || ready[0].Labels["exported_namespace"] != "" || ready[0].Value != "1" {
		t.Errorf("captf_ready of the healthy cluster: %+v, want 1 with namespace %s", ready, e.ns)
	}

	// An object held in deletion has its deletion series; then every
	// series the rules, the dashboard and the docs name is there.
	e.update("healthy", func(tc *infrav1.TerraformCluster) { tc.Finalizers = append(tc.Finalizers, "e2e.captf.io/hold") })
	t.Cleanup(func() {
		e.update("healthy", func(tc *infrav1.TerraformCluster) {
			tc.Finalizers = slices.DeleteFunc(tc.Finalizers, func(f string) bool { return f == "e2e.captf.io/hold" })
		})
	})
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(ctx, "healthy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var missing []string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(context.Context) (bool, error) {
		missing = nil
		for _, name := range namedSeries(t) {
			found := false
			for _, n := range []string{name, name + "_count"} { // a histogram's name alone is no series
				res, err := prom.Query(fmt.Sprintf(`count({__name__=%q})`, n))
				if err != nil {
					return false, err
				}
				found = found || len(res) > 0
			}
			if !found {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Errorf("series named in the rules, dashboard or docs that Prometheus never scraped: %v", missing)
	}
	_, body, _ := m.Scrape(prometheusToken)
	t.Logf("scrape excerpt:\n%s", grepLines(body, `name="broken"`)+"\n"+grepLines(body, "captf_jobs_failed_total{kind=\"TerraformCluster\",operation=\"apply\""))

	// A renewal that failed: the certificate served has a week left.
	if err := m.WebhookCert.Reissue(7 * 24 * time.Hour); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, prom, "an expiring certificate", func(alerts []framework.PromAlert) bool {
		return slices.ContainsFunc(alerts, func(a framework.PromAlert) bool {
			return a.Labels["alertname"] == "CAPTFCertificateExpiring" && a.Labels["server"] == "webhook" && a.State == "firing"
		})
	})

	// The manager is gone: nobody leads, and writes fail on its webhook
	// (the shipped configuration fails closed).
	m.Stop()
	waitAlerts(t, prom, "no leader and a failing webhook", func(alerts []framework.PromAlert) bool {
		tc, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Get(ctx, "waiting", metav1.GetOptions{})
		if err == nil {
			tc.Labels = map[string]string{"touched": strconv.FormatInt(time.Now().UnixNano(), 10)}
			_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Update(ctx, tc, metav1.UpdateOptions{})
		}
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Errorf("a write with the webhook gone: %v, want it refused for the webhook", err)
		}
		return slices.ContainsFunc(alerts, func(a framework.PromAlert) bool {
			return a.Labels["alertname"] == "CAPTFNoLeader" && a.State == "firing"
		}) &&
			slices.ContainsFunc(alerts, func(a framework.PromAlert) bool {
				return a.Labels["alertname"] == "CAPTFWebhookFailing" && a.Labels["name"] == "validation.terraformcluster.infrastructure.cluster.x-k8s.io" && a.State == "firing"
			})
	})
	// Writes work again for the cleanup (the finalizer held above).
	if err := plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "captf-"+e.ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAlerts polls Prometheus' alerts until ok says they are there.
func waitAlerts(t *testing.T, prom *framework.Prometheus, what string, ok func([]framework.PromAlert) bool) {
	t.Helper()
	var alerts []framework.PromAlert
	err := wait.PollUntilContextTimeout(context.Background(), 2*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		var err error
		if alerts, err = prom.Alerts(); err != nil {
			return false, err
		}
		return ok(alerts), nil
	})
	if err != nil {
		t.Fatalf("no alerts for %s: %v; alerts:\n%s", what, err, formatAlerts(alerts))
	}
	t.Logf("alerts for %s:\n%s", what, formatAlerts(alerts))
}

// shippedPrometheusIdentity creates ServiceAccount monitoring/prometheus-k8s
// and the shipped ClusterRoleBinding, and returns a token of it.
func shippedPrometheusIdentity(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	objs, err := framework.ReadObjects(filepath.Join(root, "manifests", "prometheus", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crb rbacv1.ClusterRoleBinding
	if err := framework.FromUnstructured(objs[0], &crb); err != nil {
		t.Fatal(err)
	}
	subject := crb.Subjects[0]
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: subject.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().ServiceAccounts(subject.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: subject.Name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := plane.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	token, err := plane.Token(ctx, subject.Namespace, subject.Name)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// scrapeJob is the job name the Prometheus Operator gives a ServiceMonitor's
// first endpoint.
func scrapeJob(sm *unstructured.Unstructured) string {
	return fmt.Sprintf("serviceMonitor/%s/%s/0", sm.GetNamespace(), sm.GetName())
}

// prometheusConfig is the scrape configuration the Prometheus Operator
// generates from the ServiceMonitor, with the target on loopback (no
// endpoints here) carrying the labels the operator's relabelling adds, and
// a 2s interval; plus two scrapes a Prometheus without the right identity
// would make.
func prometheusConfig(t *testing.T, sm *unstructured.Unstructured, dir, target string) []byte {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ep := endpoints[0].(map[string]any)
	scheme, _, _ := unstructured.NestedString(ep, "scheme")
	path, _, _ := unstructured.NestedString(ep, "path")
	honor, _, _ := unstructured.NestedBool(ep, "honorLabels")
	serverName, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	tls := map[string]any{"ca_file": filepath.Join(dir, "ca.crt"), "server_name": serverName}
	static := []any{map[string]any{"targets": []any{target},
		"labels": map[string]any{"namespace": sm.GetNamespace(), "service": "captf-metrics", "endpoint": "metrics"}}}
	job := func(name string, auth map[string]any) map[string]any {
		j := map[string]any{"job_name": name, "scheme": scheme, "metrics_path": path, "honor_labels": honor, "tls_config": tls, "static_configs": static}
		if auth != nil {
			j["authorization"] = auth
		}
		return j
	}
	// The API server, as kube-prometheus scrapes it (its admission webhook
	// series only: the rest is large and not CAPTF's).
	apiserver := map[string]any{"job_name": "apiserver", "scheme": "https", "scrape_interval": "4s",
		"tls_config": map[string]any{"ca_file": filepath.Join(dir, "apiserver-ca.crt"), "cert_file": filepath.Join(dir, "apiserver-client.crt"),
			"key_file": filepath.Join(dir, "apiserver-client.key")},
		"static_configs":         []any{map[string]any{"targets": []any{net.JoinHostPort(plane.APIServerHost, strconv.Itoa(plane.APIServerPort))}}},
		"metric_relabel_configs": []any{map[string]any{"source_labels": []any{"__name__"}, "regex": "apiserver_admission_webhook_.*", "action": "keep"}},
	}
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": "2s", "evaluation_interval": "2s"},
		"rule_files": []any{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []any{
			job(scrapeJob(sm), map[string]any{"credentials_file": filepath.Join(dir, "token")}),
			job("no-token", nil),
			job("not-allowed", map[string]any{"credentials_file": filepath.Join(dir, "nobody-token")}),
			apiserver,
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// shortRules is the rule file of the shipped PrometheusRule with every
// `for` cut to 4s: the expressions are the shipped ones.
func shortRules(t *testing.T, rule *unstructured.Unstructured) []byte {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			if _, ok := r.(map[string]any)["for"]; ok {
				r.(map[string]any)["for"] = "4s"
			}
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// namedSeries are the series names the shipped rules, the dashboard and
// docs/observability.md use, histograms by their base name.
func namedSeries(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, f := range []string{"manifests/prometheus/rules.yaml", "manifests/prometheus/dashboard.json", "docs/observability.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range framework.SeriesName.FindAllStringSubmatch(string(b), -1) {
			name := m[1]
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func formatAlerts(alerts []framework.PromAlert) string {
	var lines []string
	for _, a := range alerts {
		lines = append(lines, fmt.Sprintf("  %s %s %s/%s %s (%s)", a.Labels["alertname"], a.Labels["kind"], a.Labels["namespace"], a.Labels["name"], a.Labels["operation"], a.State))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
