package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// certificateExpiry reports, at each scrape, when the certificate each TLS
// server serves expires: cert-manager renews the files in place, and a
// renewal that fails shows as an expiry that comes closer
// (CAPTFCertificateExpiring).
var certificateExpiry = &certificates{desc: prometheus.NewDesc("captf_certificate_expiry_timestamp_seconds",
	"When the certificate a server of this replica serves expires (Unix seconds), by server: webhook, runner-api, metrics.", []string{"server"}, nil)}

func init() { register(certificateExpiry) }

// WatchCertificate makes the scrape report notAfter's answer for server;
// a server without a certificate reports nothing.
func WatchCertificate(server string, notAfter func() (time.Time, error)) {
	certificateExpiry.mu.Lock()
	defer certificateExpiry.mu.Unlock()
	if certificateExpiry.servers == nil {
		certificateExpiry.servers = map[string]func() (time.Time, error){}
	}
	certificateExpiry.servers[server] = notAfter
}

type certificates struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	servers map[string]func() (time.Time, error)
}

func (c *certificates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *certificates) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for server, notAfter := range c.servers {
		if t, err := notAfter(); err == nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(t.Unix()), server)
		}
	}
}
