package framework

import (
	"encoding/json"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/metrics"
)

// SeriesName finds the names of the series the manager exports (or might)
// in a text: CAPTF's own, client-go's and controller-runtime's names.
var SeriesName = regexp.MustCompile(`\b((?:captf|workqueue|rest_client|leader_election|controller_runtime)_[a-z0-9_]+)`)

// ExportedSeries is every series name the manager can report, histograms
// with their _bucket, _sum and _count.
func ExportedSeries() map[string]bool {
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		metrics.Describe(ch)
		(&workspace.Collector{}).Describe(ch)
		close(ch)
	}()
	fq := regexp.MustCompile(`fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	return names
}

// AlertRule is one rule of the shipped PrometheusRule.
type AlertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ShippedAlertRules are the rules of the shipped PrometheusRule, every
// group's.
func ShippedAlertRules() ([]AlertRule, error) {
	pr, err := ShippedRules()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(pr.Object["spec"])
	if err != nil {
		return nil, err
	}
	var spec struct {
		Groups []struct {
			Rules []AlertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, err
	}
	var rules []AlertRule
	for _, g := range spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules, nil
}
