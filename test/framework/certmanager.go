package framework

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
)

// cert-manager's own Go modules for its controllers are not served by the
// module proxy (only the API module is), so the tests run a stand-in: it
// does for the objects CAPTF ships what cert-manager and its CA injector
// do, with cert-manager's real CRDs (bin/cert-manager-crds).
var (
	certificatesGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	issuersGVR      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
	crdsGVR         = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// injectCAFrom is cert-manager's CA injector annotation: "namespace/certificate".
const injectCAFrom = "cert-manager.io/inject-ca-from"

// StartCertManager installs cert-manager's CRDs and runs, until the plane
// stops, a stand-in that issues each Certificate of a selfSigned Issuer
// into its Secret (tls.crt, tls.key, ca.crt for its dnsNames), marks it
// Ready, and injects the CA of the Certificate named by
// cert-manager.io/inject-ca-from into webhook configurations and CRDs.
// Other issuers get Ready=False; renewal is not done.
func (cp *ControlPlane) StartCertManager(ctx context.Context) error {
	dir, err := BinPath("cert-manager-crds")
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("%s is missing: run hack/build-controlplane.sh (make test does)", dir)
	}
	if err := cp.InstallCRDs(ctx, dir); err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := ""
		injected := map[string]string{} // CRD name → the resourceVersion it had with its CA
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			err := errors.Join(cp.issueCertificates(ctx), cp.injectCAs(ctx, meta, injected))
			if err != nil && ctx.Err() == nil && err.Error() != last {
				fmt.Fprintf(os.Stderr, "cert-manager stand-in: %v\n", err)
			}
			last = fmt.Sprint(err)
		}, 300*time.Millisecond)
	}()
	cp.onStop(func() {
		cancel()
		<-done
	})
	return nil
}

func (cp *ControlPlane) issueCertificates(ctx context.Context) error {
	certs, err := cp.Dynamic.Resource(certificatesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, cert := range certs.Items {
		if err := cp.issue(ctx, &cert); err != nil {
			return fmt.Errorf("certificate %s/%s: %w", cert.GetNamespace(), cert.GetName(), err)
		}
	}
	return nil
}

// issue makes the Certificate's Secret unless it holds a certificate for
// the Certificate's DNS names already, issued by its Issuer as it is now,
// and no renewal was asked for (the condition Issuing=True that `cmctl
// renew` sets). A selfSigned Issuer signs a certificate with its own key
// (a CA, with spec.isCA); a ca Issuer signs it with the CA in its Secret,
// which is the issued Secret's ca.crt. Each issue makes a new key, as
// rotationPolicy: Always does.
func (cp *ControlPlane) issue(ctx context.Context, cert *unstructured.Unstructured) error {
	ns := cert.GetNamespace()
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	isCA, _, _ := unstructured.NestedBool(cert.Object, "spec", "isCA")
	commonName, _, _ := unstructured.NestedString(cert.Object, "spec", "commonName")
	issuerKind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	issuer, err := cp.Dynamic.Resource(issuersGVR).Namespace(ns).Get(ctx, issuerName, metav1.GetOptions{})
	if issuerKind != "" && issuerKind != "Issuer" {
		return cp.setCertificateReady(ctx, cert, false, "UnsupportedIssuer", "the test stand-in for cert-manager issues from namespaced Issuers only")
	}
	if apierrors.IsNotFound(err) {
		return cp.setCertificateReady(ctx, cert, false, "IssuerNotFound", fmt.Sprintf("Issuer %q does not exist", issuerName))
	}
	if err != nil {
		return err
	}
	var ca *keyPair // nil: self-signed
	if caSecret, ok, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName"); ok {
		s, err := cp.Kube.CoreV1().Secrets(ns).Get(ctx, caSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return cp.setCertificateReady(ctx, cert, false, "IssuerNotReady", fmt.Sprintf("the CA Secret %q does not exist yet", caSecret))
		}
		if err != nil {
			return err
		}
		if ca, err = parseKeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]); err != nil {
			return cp.setCertificateReady(ctx, cert, false, "IssuerNotReady", fmt.Sprintf("the CA Secret %q: %v", caSecret, err))
		}
	} else if _, ok, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned"); !ok {
		return cp.setCertificateReady(ctx, cert, false, "UnsupportedIssuer", "the test stand-in for cert-manager issues from selfSigned and ca Issuers only")
	}
	secret, err := cp.Kube.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	exists := err == nil
	if exists && !renewalAsked(cert) && issuedAs(secret.Data[corev1.TLSCertKey], dnsNames, isCA, ca) {
		return cp.setCertificateReady(ctx, cert, true, "Ready", "Certificate is up to date and has not expired")
	}
	certPEM, keyPEM, err := sign(commonName, dnsNames, isCA, ca)
	if err != nil {
		return err
	}
	caPEM := certPEM
	if ca != nil {
		caPEM = ca.certPEM
	}
	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns, Annotations: map[string]string{
			"cert-manager.io/certificate-name": cert.GetName(), "cert-manager.io/issuer-name": issuerName,
			"cert-manager.io/issuer-kind": "Issuer", "cert-manager.io/alt-names": strings.Join(dnsNames, ","),
		}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, "ca.crt": caPEM},
	}
	if !exists {
		_, err = cp.Kube.CoreV1().Secrets(ns).Create(ctx, want, metav1.CreateOptions{})
	} else {
		secret = secret.DeepCopy()
		secret.Annotations, secret.Data = want.Annotations, want.Data
		_, err = cp.Kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	return cp.setCertificateReady(ctx, cert, true, "Ready", "Certificate is up to date and has not expired")
}

// RenewCertificate asks for a Certificate's renewal as `cmctl renew` does:
// the condition Issuing=True.
func (cp *ControlPlane) RenewCertificate(ctx context.Context, namespace, name string) error {
	cert, err := cp.Dynamic.Resource(certificatesGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	conds = append(conds, map[string]any{"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
		"message": "Certificate re-issuance manually triggered", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)})
	_ = unstructured.SetNestedSlice(cert.Object, conds, "status", "conditions")
	_, err = cp.Dynamic.Resource(certificatesGVR).Namespace(namespace).UpdateStatus(ctx, cert, metav1.UpdateOptions{})
	return err
}

func renewalAsked(cert *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Issuing" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// keyPair is a certificate and its key.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("no PEM certificate and key")
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: c, key: k, certPEM: certPEM}, nil
}

// issuedAs says whether pemBytes is a certificate for exactly dnsNames, a CA
// or not as isCA says, signed by ca (or by itself).
func issuedAs(pemBytes []byte, dnsNames []string, isCA bool, ca *keyPair) bool {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return false
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil || c.IsCA != isCA {
		return false
	}
	parent := c
	if ca != nil {
		parent = ca.cert
	}
	if c.CheckSignatureFrom(parent) != nil && (ca != nil || c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) != nil) {
		return false
	}
	return slices.Equal(slices.Sorted(slices.Values(c.DNSNames)), slices.Sorted(slices.Values(dnsNames)))
}

// sign makes a certificate with a new key: a CA if isCA, signed by ca, or
// by its own key when ca is nil (what a selfSigned Issuer makes).
func sign(commonName string, dnsNames []string, isCA bool, ca *keyPair) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: commonName}, DNSNames: dnsNames,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(90 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature, nil
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func (cp *ControlPlane) setCertificateReady(ctx context.Context, cert *unstructured.Unstructured, ready bool, reason, message string) error {
	status := string(metav1.ConditionFalse)
	if ready {
		status = string(metav1.ConditionTrue)
	}
	conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
	if len(conds) == 1 {
		if m, ok := conds[0].(map[string]any); ok && m["type"] == "Ready" && m["status"] == status && m["reason"] == reason {
			return nil // and no Issuing to clear
		}
	}
	cert = cert.DeepCopy()
	_ = unstructured.SetNestedSlice(cert.Object, []any{map[string]any{
		"type": "Ready", "status": status, "reason": reason, "message": message,
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": cert.GetGeneration(),
	}}, "status", "conditions")
	_, err := cp.Dynamic.Resource(certificatesGVR).Namespace(cert.GetNamespace()).UpdateStatus(ctx, cert, metav1.UpdateOptions{})
	return err
}

// injectCAs sets the caBundle of every webhook of a webhook configuration,
// and the conversion webhook of a CRD, that asks for it.
func (cp *ControlPlane) injectCAs(ctx context.Context, meta metadata.Interface, injected map[string]string) error {
	vwcs, err := cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, vwc := range vwcs.Items {
		ca, ok, err := cp.caFor(ctx, vwc.Annotations)
		if err != nil {
			return err
		}
		if ok && setCABundles(vwc.Webhooks, ca, func(w *admissionregistrationv1.ValidatingWebhook) *[]byte { return &w.ClientConfig.CABundle }) {
			if _, err := cp.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, &vwc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	mwcs, err := cp.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, mwc := range mwcs.Items {
		ca, ok, err := cp.caFor(ctx, mwc.Annotations)
		if err != nil {
			return err
		}
		if ok && setCABundles(mwc.Webhooks, ca, func(w *admissionregistrationv1.MutatingWebhook) *[]byte { return &w.ClientConfig.CABundle }) {
			if _, err := cp.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, &mwc, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	// CRDs are big: their metadata tells which ask for a CA, and a CRD
	// is read whole only when it changed since its CA was injected.
	crds, err := meta.Resource(crdsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, m := range crds.Items {
		ca, ok, err := cp.caFor(ctx, m.Annotations)
		if err != nil {
			return err
		}
		stamp := m.ResourceVersion + "/" + base64.StdEncoding.EncodeToString(ca)
		if !ok || injected[m.Name] == stamp {
			continue
		}
		crd, err := cp.Dynamic.Resource(crdsGVR).Get(ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		path := []string{"spec", "conversion", "webhook", "clientConfig", "caBundle"}
		if strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); strategy == "Webhook" {
			if old, _, _ := unstructured.NestedString(crd.Object, path...); old != base64.StdEncoding.EncodeToString(ca) {
				_ = unstructured.SetNestedField(crd.Object, base64.StdEncoding.EncodeToString(ca), path...)
				if crd, err = cp.Dynamic.Resource(crdsGVR).Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
		}
		injected[m.Name] = crd.GetResourceVersion() + "/" + base64.StdEncoding.EncodeToString(ca)
	}
	return nil
}

// setCABundles sets the CA bundle of each webhook to ca, and says whether
// one changed.
func setCABundles[W any](webhooks []W, ca []byte, bundle func(*W) *[]byte) bool {
	changed := false
	for i := range webhooks {
		if b := bundle(&webhooks[i]); !bytes.Equal(*b, ca) {
			*b, changed = ca, true
		}
	}
	return changed
}

// caFor is the ca.crt of the Certificate annotations name for injection;
// false when they name none or it is not issued yet.
func (cp *ControlPlane) caFor(ctx context.Context, annotations map[string]string) ([]byte, bool, error) {
	ref, ok := annotations[injectCAFrom]
	if !ok {
		return nil, false, nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, false, fmt.Errorf("%s %q is not namespace/name", injectCAFrom, ref)
	}
	cert, err := cp.Dynamic.Resource(certificatesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	secret, err := cp.Kube.CoreV1().Secrets(ns).Get(ctx, secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ca := secret.Data["ca.crt"]
	return ca, len(ca) > 0, nil
}
