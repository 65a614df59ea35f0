package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MetricsScraper is the ServiceAccount MetricsReaderToken binds to the
// shipped captf-metrics-reader ClusterRole.
const MetricsScraper = "metrics-scraper"

// MetricsReaderToken returns a token of ServiceAccount MetricsScraper in
// namespace, bound to captf-metrics-reader as a scraper's would be.
func (cp *ControlPlane) MetricsReaderToken(ctx context.Context, namespace string) (string, error) {
	return cp.boundToken(ctx, namespace, MetricsScraper, "captf-metrics-reader")
}

// boundToken returns a token of ServiceAccount sa in namespace, which it
// makes and binds to ClusterRole role.
func (cp *ControlPlane) boundToken(ctx context.Context, namespace, sa, role string) (string, error) {
	if _, err := cp.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return cp.Token(ctx, namespace, sa)
}

// Token is a fresh token of a ServiceAccount.
func (cp *ControlPlane) Token(ctx context.Context, namespace, name string) (string, error) {
	tr, err := cp.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnTokenRequest, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}

// Scrape gets the manager's /metrics over HTTPS, trusting its certificate's
// CA, with token as the bearer token ("" sends none).
func (m *Manager) Scrape(token string) (int, string, error) {
	return m.GetMetricsPath("/metrics", token)
}

// Profiler is the ServiceAccount ProfilerToken lets get the manager's
// /debug/pprof/ profiles.
const Profiler = "profiler"

// ProfilerToken returns a token of ServiceAccount Profiler in namespace,
// bound to a ClusterRole that may get /debug/pprof/*.
func (cp *ControlPlane) ProfilerToken(ctx context.Context, namespace string) (string, error) {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "captf-profiler"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/debug/pprof/*"}, Verbs: []string{"get"}}}}
	if _, err := cp.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return cp.boundToken(ctx, namespace, Profiler, role.Name)
}

// GetMetricsPath gets path (with its query) from the manager's metrics
// server over HTTPS, as Scrape does.
func (m *Manager) GetMetricsPath(path, token string) (int, string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.WebhookCert.CA.CertPEM)
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequest(http.MethodGet, "https://"+m.MetricsAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
