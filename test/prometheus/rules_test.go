// Package prometheus tests the shipped alerts with promtool, and that the
// rules, the dashboard and the docs name only series the manager exports.
package prometheus

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/test/framework"
)

// alerts are the alerts the production-readiness checklist names: the
// eleven of the design, and four for the plane itself.
var alerts = []string{"CAPTFJobFailing", "CAPTFDestroyStuck", "CAPTFStateUnreadable", "CAPTFClusterDrift", "CAPTFForceUnlocks",
	"CAPTFReconcileErrors", "CAPTFJobSlow", "CAPTFJobQueueSlow", "CAPTFStateNearSecretLimit", "CAPTFInputsNearLimit", "CAPTFNoRecentSuccess",
	"CAPTFCertificateExpiring", "CAPTFNoLeader", "CAPTFWebhookFailing", "CAPTFNotReadyTooLong"}

const runbookBase = "https://github.com/captf/captf/blob/main/docs/runbooks/"

func shippedRules(t *testing.T) (*unstructured.Unstructured, []framework.AlertRule) {
	t.Helper()
	pr, err := framework.ShippedRules()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := framework.ShippedAlertRules()
	if err != nil {
		t.Fatal(err)
	}
	return pr, rules
}

// TestAlertRules runs promtool's checks and the unit tests of
// alerts_test.yaml on the shipped rules.
func TestAlertRules(t *testing.T) {
	promtool, err := framework.BinPath("promtool")
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := shippedRules(t)
	dir := t.TempDir()
	if err := framework.WriteRuleFile(filepath.Join(dir, "rules.yaml"), pr); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertsComplete: exactly these alerts (CAPTFNotReadyTooLong in two
// rules, one per bound), each with a severity, a
// summary, a runbook that exists, and promtool tests that see it fire and
// stay silent.
func TestAlertsComplete(t *testing.T) {
	_, rules := shippedRules(t)
	var got []string
	for _, r := range rules {
		if !slices.Contains(got, r.Alert) {
			got = append(got, r.Alert)
		}
	}
	want := slices.Clone(alerts)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("alerts = %v, want %v", got, want)
	}
	b, err := os.ReadFile("alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", r.Alert)
		}
		if url := r.Annotations["runbook_url"]; url != runbookBase+r.Alert+".md" {
			t.Errorf("%s: runbook_url %q, want %s%s.md", r.Alert, url, runbookBase, r.Alert)
		}
		page, err := os.ReadFile(filepath.Join(root, "docs", "runbooks", r.Alert+".md"))
		if err != nil {
			t.Errorf("%s: no runbook: %v", r.Alert, err)
		}
		for _, section := range []string{"## Meaning", "## Confirm", "## Act"} {
			if err == nil && !strings.Contains(string(page), section) {
				t.Errorf("docs/runbooks/%s.md has no %q section", r.Alert, section)
			}
		}
		if !fires[r.Alert] || !silent[r.Alert] {
			t.Errorf("%s: alerts_test.yaml must see it fire (%v) and stay silent (%v)", r.Alert, fires[r.Alert], silent[r.Alert])
		}
	}
}

// TestNamedSeriesExist: every series the rules, the dashboard and the docs
// name is one the manager exports, and every CAPTF series is documented.
func TestNamedSeriesExist(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	have := framework.ExportedSeries()
	_, rules := shippedRules(t)
	sources := map[string]string{}
	for _, r := range rules {
		sources["rule "+r.Alert] = r.Expr
	}
	for _, f := range []string{"manifests/prometheus/dashboard.json", "docs/observability.md"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sources[f] = string(b)
	}
	for src, text := range sources {
		for _, m := range framework.SeriesName.FindAllStringSubmatch(text, -1) {
			if !have[m[1]] {
				t.Errorf("%s names %s, which the manager does not export", src, m[1])
			}
		}
	}
	doc := sources["docs/observability.md"]
	for name := range have {
		if strings.HasPrefix(name, "captf_") && !strings.HasSuffix(name, "_bucket") && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") &&
			!strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/observability.md does not document %s", name)
		}
	}
}
