package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ShippedRules is the PrometheusRule of manifests/prometheus, built with
// kustomize as users apply it.
func ShippedRules() (*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	objs, err := Kustomize(filepath.Join(root, "manifests", "prometheus"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" {
			return o, nil
		}
	}
	return nil, fmt.Errorf("manifests/prometheus has no PrometheusRule")
}

// WriteRuleFile writes the spec of a PrometheusRule as the rule file the
// Prometheus Operator gives Prometheus.
func WriteRuleFile(path string, rule *unstructured.Unstructured) error {
	b, err := yaml.Marshal(rule.Object["spec"])
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Prometheus is a Prometheus server on loopback, built by
// hack/build-controlplane.sh.
type Prometheus struct {
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPrometheus runs Prometheus with config (a prometheus.yml) in dir,
// and waits until it is ready.
func StartPrometheus(ctx context.Context, dir string, config []byte) (*Prometheus, error) {
	bin, err := BinPath("prometheus")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, config, 0o600); err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	p := &Prometheus{Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), done: make(chan struct{})}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.Addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		log.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			b, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("prometheus exited:\n%s", b)
		default:
		}
		if resp, err := http.Get("http://" + p.Addr + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.Stop()
	return nil, fmt.Errorf("prometheus not ready in a minute")
}

// Stop ends the server.
func (p *Prometheus) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// PromAlert is an alert as Prometheus' API reports it.
type PromAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
}

// Alerts are the alerts pending or firing now.
func (p *Prometheus) Alerts() ([]PromAlert, error) {
	var out struct {
		Data struct {
			Alerts []PromAlert `json:"alerts"`
		} `json:"data"`
	}
	return out.Data.Alerts, p.get("/api/v1/alerts", &out)
}

// PromTarget is a scrape target's health.
type PromTarget struct {
	ScrapeURL  string `json:"scrapeUrl"`
	Health     string `json:"health"`
	LastError  string `json:"lastError"`
	ScrapePool string `json:"scrapePool"`
}

// Targets are the active scrape targets.
func (p *Prometheus) Targets() ([]PromTarget, error) {
	var out struct {
		Data struct {
			ActiveTargets []PromTarget `json:"activeTargets"`
		} `json:"data"`
	}
	return out.Data.ActiveTargets, p.get("/api/v1/targets", &out)
}

// Query evaluates an instant query and returns its series' labels and
// values.
func (p *Prometheus) Query(q string) ([]PromSample, error) {
	var out struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(q), &out); err != nil {
		return nil, err
	}
	var samples []PromSample
	for _, r := range out.Data.Result {
		v, _ := r.Value[1].(string)
		samples = append(samples, PromSample{Labels: r.Metric, Value: v})
	}
	return samples, nil
}

// PromSample is one series of a query's result.
type PromSample struct {
	Labels map[string]string
	Value  string
}

func (p *Prometheus) get(path string, into any) error {
	resp, err := http.Get("http://" + p.Addr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("prometheus %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
