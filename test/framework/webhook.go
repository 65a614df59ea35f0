package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/captf/captf/pkg/names"
)

// WebhookCert is the webhook's serving certificate for 127.0.0.1, signed by
// its own CA, as files in Dir named as the manager's flags default them.
type WebhookCert struct {
	Dir string
	CA  *CA
}

// NewWebhookCert writes a fresh CA-signed serving certificate into dir.
func NewWebhookCert(dir string) (*WebhookCert, error) {
	w := &WebhookCert{Dir: dir}
	return w, w.Rotate()
}

// ServingValidity is how long the webhook's serving certificate is valid:
// cert-manager's default, as the shipped Certificate gets it.
const ServingValidity = 90 * 24 * time.Hour

// Rotate writes a certificate of a new CA in place, each file replaced by a
// rename as a Secret volume update does, and returns once both are there.
func (w *WebhookCert) Rotate() error {
	ca, err := NewCA("captf-webhook-ca")
	if err != nil {
		return err
	}
	if err := w.write(ca, ServingValidity); err != nil {
		return err
	}
	w.CA = ca
	return nil
}

// Reissue writes a certificate of the same CA valid for validity from now,
// as a renewal does (or, short, as one that failed leaves it).
func (w *WebhookCert) Reissue(validity time.Duration) error {
	return w.write(w.CA, validity)
}

func (w *WebhookCert) write(ca *CA, validity time.Duration) error {
	if err := os.MkdirAll(w.Dir, 0o700); err != nil {
		return err
	}
	// Loopback, where the tests reach the managers, and the names of the
	// shipped Services the shipped Certificate holds (a scraper checks the
	// name the ServiceMonitor gives).
	kp, err := ca.IssueValid(validity, "captf-webhook", nil, []string{"127.0.0.1", "localhost",
		names.MetricsService + ".captf-system.svc", names.RunnerAPIService + ".captf-system.svc", "captf-webhook-service.captf-system.svc"})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": ca.CertPEM} {
		tmp := filepath.Join(w.Dir, "."+name+".new")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(w.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// RegisterWebhook creates the shipped ValidatingWebhookConfiguration
// (manifests/webhook) under name, calling the webhook at addr on loopback
// with caBundle, for the given namespaces only (other tests' namespaces
// stay free of it).
func (cp *ControlPlane) RegisterWebhook(ctx context.Context, name, addr string, caBundle []byte, namespaces ...string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	objs, err := ReadObjects(filepath.Join(root, "manifests", "webhook", "validating_webhook.yaml"))
	if err != nil {
		return nil, err
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &vwc); err != nil {
		return nil, err
	}
	vwc.Name = name
	vwc.Annotations = nil // no cert-manager here: the bundle is set below
	for i := range vwc.Webhooks {
		wh := &vwc.Webhooks[i]
		if wh.ClientConfig.Service == nil || wh.ClientConfig.Service.Path == nil {
			return nil, fmt.Errorf("webhook %s has no service path", wh.Name)
		}
		url := "https://" + addr + *wh.ClientConfig.Service.Path
		wh.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
		wh.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}}}
	}
	created, err := cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &vwc, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cp.onStop(func() {
		_ = cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return created, nil
}

// SetWebhookCABundle replaces the CA bundle of every webhook of name.
func (cp *ControlPlane) SetWebhookCABundle(ctx context.Context, name string, caBundle []byte) error {
	vwc, err := cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = caBundle
	}
	_, err = cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
	return err
}
