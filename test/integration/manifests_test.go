package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/webhook"
	"github.com/captf/captf/test/framework"
)

// TestShippedManifests: the API server takes every object of the default
// kustomize base, built as users build it (dry run; cert-manager's kinds are
// not served here), and the Deployment wires what
// the webhook needs: the certificate volume (not optional), the downward-API
// identity and the webhook port the Service targets.
func TestShippedManifests(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatal(err)
	}
	// Cluster API's conventions: the provider label on every component.
	for _, o := range objs {
		if o.GetLabels()["cluster.x-k8s.io/provider"] != "infrastructure-terraform" {
			t.Errorf("%s %s lacks the label cluster.x-k8s.io/provider=infrastructure-terraform", o.GetKind(), o.GetName())
		}
	}
	var deployment appsv1.Deployment
	services := map[string]corev1.Service{}
	var dnsNames []string
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		switch gvk.Kind {
		case "Deployment":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &deployment); err != nil {
				t.Fatal(err)
			}
		case "Service":
			var service corev1.Service
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &service); err != nil {
				t.Fatal(err)
			}
			services[service.Name] = service
		case "Certificate":
			names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			dnsNames = append(dnsNames, names...)
		}
	}
	dryRun(t, objs, func(gvk schema.GroupVersionKind) bool { return gvk.Group == "cert-manager.io" })

	pod := deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment containers = %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Name != "manager" || c.ImagePullPolicy == "" {
		t.Errorf("container %q, imagePullPolicy %q: want manager, and a policy set", c.Name, c.ImagePullPolicy)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "node-role.kubernetes.io/control-plane" && tol.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("the manager does not tolerate control-plane nodes: %v", pod.Tolerations)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAMESPACE"] != "metadata.namespace" || env["SERVICE_ACCOUNT_NAME"] != "spec.serviceAccountName" {
		t.Errorf("downward-API env = %v, want POD_NAMESPACE and SERVICE_ACCOUNT_NAME", env)
	}
	var certDir string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--webhook-cert-dir="); ok {
			certDir = v
		}
	}
	var mounted string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == certDir {
			mounted = vm.Name
		}
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mounted })
	if certDir == "" || i < 0 || pod.Volumes[i].Secret == nil || pod.Volumes[i].Secret.SecretName != "captf-webhook-server-cert" ||
		(pod.Volumes[i].Secret.Optional != nil && *pod.Volumes[i].Secret.Optional) {
		t.Errorf("the webhook certificate Secret is not mounted (non-optional) at --webhook-cert-dir %q", certDir)
	}
	// The webhook, the runner API and metrics: each Service reaches the container
	// port the manager serves on, with a certificate valid for its name.
	for name, port := range map[string]int32{"captf-webhook-service": 9443, "captf-runner-api": 9445, "captf-metrics": 8443} {
		service, ok := services[name]
		if !ok {
			t.Errorf("no Service %s", name)
			continue
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return p.Name == service.Spec.Ports[0].TargetPort.StrVal && p.ContainerPort == port
		}) {
			t.Errorf("Service %s targets port %q, which the container does not name as %d", name, service.Spec.Ports[0].TargetPort.StrVal, port)
		}
		for k, v := range service.Spec.Selector {
			if deployment.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, which the manager pods do not carry", name, k, v)
			}
		}
		if dns := name + "." + service.Namespace + ".svc"; !slices.Contains(dnsNames, dns) {
			t.Errorf("the serving certificate is not valid for %s", dns)
		}
	}
	// Every kind has its path in the shipped configuration.
	i = slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ValidatingWebhookConfiguration" })
	if i < 0 {
		t.Fatal("the default base has no ValidatingWebhookConfiguration")
	}
	webhooks, _, _ := unstructured.NestedSlice(objs[i].Object, "webhooks")
	for _, kind := range webhook.Kinds {
		if !slices.ContainsFunc(webhooks, func(w any) bool {
			p, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "path")
			fp, _, _ := unstructured.NestedString(w.(map[string]any), "failurePolicy")
			return p == webhook.Path(kind) && fp == "Fail"
		}) {
			t.Errorf("no fail-closed webhook for %s at %s", kind, webhook.Path(kind))
		}
	}
}

// dryRun has the API server take every object but those skip names (dry
// run, in namespace captf-system).
func dryRun(t *testing.T, objs []*unstructured.Unstructured, skip func(schema.GroupVersionKind) bool) {
	t.Helper()
	ctx := context.Background()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(plane.Kube.Discovery()))
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "captf-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if skip(gvk) {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		ri := plane.Dynamic.Resource(m.Resource)
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			_, err = ri.Namespace(o.GetNamespace()).Create(ctx, o, dry)
		} else {
			_, err = ri.Create(ctx, o, dry)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s %s refused by the API server: %v", gvk.Kind, o.GetName(), err)
		}
	}
}

// TestPrometheusManifests: the API server takes every object of the opt-in
// Prometheus component against the Prometheus Operator's own CRDs, and the
// ServiceMonitor reaches the default base's metrics Service by its labels
// and port name, over HTTPS, trusting the serving certificate's CA for a
// name that certificate holds, as the user the shipped binding lets read.
func TestPrometheusManifests(t *testing.T) {
	crds, err := framework.BinPath("prometheus-operator-crds")
	if err != nil {
		t.Fatal(err)
	}
	if err := plane.InstallCRDs(context.Background(), crds); err != nil {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	dryRun(t, objs, func(schema.GroupVersionKind) bool { return false })
	base, err := framework.Kustomize(filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatal(err)
	}
	find := func(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && (name == "" || o.GetName() == name) {
				return o
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return nil
	}
	var service corev1.Service
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(base, "Service", "captf-metrics").Object, &service); err != nil {
		t.Fatal(err)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(find(base, "Certificate", "captf-serving-cert").Object, "spec", "dnsNames")
	certSecret, _, _ := unstructured.NestedString(find(base, "Certificate", "captf-serving-cert").Object, "spec", "secretName")

	sm := find(objs, "ServiceMonitor", "")
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	for k, v := range selector {
		if service.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s, which Service captf-metrics does not carry (%v)", k, v, service.Labels)
		}
	}
	if sm.GetNamespace() != service.Namespace {
		t.Errorf("the ServiceMonitor is in %s, the Service in %s", sm.GetNamespace(), service.Namespace)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints = %d", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	port, _, _ := unstructured.NestedString(ep, "port")
	scheme, _, _ := unstructured.NestedString(ep, "scheme")
	honor, _, _ := unstructured.NestedBool(ep, "honorLabels")
	server, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	caSecret, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
	tokenFile, _, _ := unstructured.NestedString(ep, "bearerTokenFile")
	if port != service.Spec.Ports[0].Name || scheme != "https" || !honor {
		t.Errorf("endpoint port %q scheme %q honorLabels %v, want %q, https, true", port, scheme, honor, service.Spec.Ports[0].Name)
	}
	if !slices.Contains(dnsNames, server) || caSecret != certSecret {
		t.Errorf("TLS: serverName %q (certificate names %v), CA from %q (certificate Secret %q)", server, dnsNames, caSecret, certSecret)
	}
	if tokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("bearerTokenFile %q: Prometheus must scrape with its ServiceAccount's token", tokenFile)
	}
	crb := find(objs, "ClusterRoleBinding", "")
	role, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name")
	find(base, "ClusterRole", role) // the binding names a role the default base ships
	subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
	if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != "prometheus-k8s" || subjects[0].(map[string]any)["namespace"] != "monitoring" {
		t.Errorf("the binding's subjects are %v, want ServiceAccount monitoring/prometheus-k8s", subjects)
	}
}

// TestNetworkPolicy: the API server takes the opt-in policy and the sample;
// the policy opens exactly the ports the manager's container serves, and the
// sample lets runner pods (as CAPTF builds them) reach the runner API's
// port on the manager pods.
func TestNetworkPolicy(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "network-policy"))
	if err != nil {
		t.Fatal(err)
	}
	sample, err := framework.ReadObjects(filepath.Join(root, "manifests", "network-policy", "job-egress-sample.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range sample {
		o.SetNamespace("captf-system") // the sample names a namespace of yours
	}
	dryRun(t, append(objs, sample...), func(schema.GroupVersionKind) bool { return false })
	if slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetName() == "captf-runner-egress" }) {
		t.Error("the kustomization applies the sample")
	}

	base, err := framework.Kustomize(filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatal(err)
	}
	var deployment appsv1.Deployment
	for _, o := range base {
		if o.GetKind() == "Deployment" {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &deployment); err != nil {
				t.Fatal(err)
			}
		}
	}
	served := map[int32]string{}
	for _, p := range deployment.Spec.Template.Spec.Containers[0].Ports {
		served[p.ContainerPort] = p.Name
	}
	var policy, egress networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, &policy); err != nil {
		t.Fatal(err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sample[0].Object, &egress); err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(deployment.Spec.Template.Labels)) {
		t.Errorf("the policy selects %v, not the manager pods (%v)", policy.Spec.PodSelector, deployment.Spec.Template.Labels)
	}
	opened := map[int32]bool{}
	for _, rule := range policy.Spec.Ingress {
		for _, p := range rule.Ports {
			opened[p.Port.IntVal] = true
		}
	}
	for port, name := range served {
		if !opened[port] {
			t.Errorf("the manager serves %s on %d, which the policy closes", name, port)
		}
	}
	for port := range opened {
		if _, ok := served[port]; !ok {
			t.Errorf("the policy opens %d, which the manager does not serve", port)
		}
	}

	job := runnerjob.Build(runnerjob.Spec{Owner: &metav1.ObjectMeta{Name: "prod", Namespace: "team-a", UID: "uid"},
		OwnerGVK: infrav1.SchemeGroupVersion.WithKind("TerraformCluster"), Operation: infrav1.OperationApply, InputsHash: "h",
		Policy: runnerjob.EffectivePolicy(nil, nil)})
	if sel, err := metav1.LabelSelectorAsSelector(&egress.Spec.PodSelector); err != nil || !sel.Matches(labels.Set(job.Spec.Template.Labels)) {
		t.Errorf("the sample selects %v, not runner pods (%v)", egress.Spec.PodSelector, job.Spec.Template.Labels)
	}
	reachesAPI := slices.ContainsFunc(egress.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
		return slices.ContainsFunc(r.Ports, func(p networkingv1.NetworkPolicyPort) bool { return served[p.Port.IntVal] == "runner-api" })
	})
	if !reachesAPI {
		t.Error("the sample does not let runner pods reach the runner API")
	}
}

// overlayOfDefault writes a kustomization of manifests/default with the
// fields of rest, as a user's overlay is, and returns its directory.
func overlayOfDefault(t *testing.T, rest string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: ["+base+"]\n"+rest), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageOverride: an overlay's `images:` override of the two images
// reaches the manager's container and the runner image its Jobs run.
func TestImageOverride(t *testing.T) {
	objs, err := framework.Kustomize(overlayOfDefault(t, `images:
- {name: ghcr.io/captf/captf, newName: registry.local/captf, newTag: v9.9.9}
- {name: ghcr.io/captf/captf-runner, newName: registry.local/captf-runner, newTag: v9.9.9}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.Image != "registry.local/captf:v9.9.9" {
			t.Errorf("manager image %s", c.Image)
		}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "CAPTF_MANAGER_IMAGE" })
		if i < 0 || c.Env[i].Value != "registry.local/captf-runner:v9.9.9" {
			t.Errorf("runner image env %+v, want the override", c.Env)
		}
		return
	}
	t.Fatal("no Deployment")
}

// TestOverlayNames: the default base, and an overlay of it with another
// namespace and a name prefix, wire their names together: the
// certificate holds every Service's name, cert-manager injects the CA of
// that Certificate into the webhook configuration, which calls the
// webhook Service; the Certificate names its Issuer; the manager mounts the
// Certificate's Secret, tells runners the runner API Service, and is bound
// to its role. The API server takes the overlay.
func TestOverlayNames(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := overlayOfDefault(t, "namespace: tenant-x\nnamePrefix: acme-\n")
	for name, path := range map[string]string{"default": filepath.Join(root, "manifests", "default"), "overlay": dir} {
		t.Run(name, func(t *testing.T) {
			objs, err := framework.Kustomize(path)
			if err != nil {
				t.Fatal(err)
			}
			checkWiring(t, objs)
			if name == "overlay" {
				if _, err := plane.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-x"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
				dryRun(t, objs, func(gvk schema.GroupVersionKind) bool { return gvk.Group == "cert-manager.io" })
			}
		})
	}
}

func checkWiring(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	byKind := map[string][]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = append(byKind[o.GetKind()], o)
		if b, _ := o.MarshalJSON(); strings.Contains(string(b), "$(") && o.GetKind() != "CustomResourceDefinition" {
			t.Errorf("%s %s holds an unresolved $(VAR)", o.GetKind(), o.GetName())
		}
	}
	one := func(kind string) *unstructured.Unstructured {
		if len(byKind[kind]) != 1 {
			t.Fatalf("%d %s objects, want 1", len(byKind[kind]), kind)
		}
		return byKind[kind][0]
	}
	vwc := one("ValidatingWebhookConfiguration")
	// The serving Certificate, issued by CAPTF's CA: a ca Issuer whose
	// Secret is the CA Certificate's, which a selfSigned Issuer issues.
	named := func(kind, name string) *unstructured.Unstructured {
		for _, o := range byKind[kind] {
			if o.GetName() == name {
				return o
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return nil
	}
	var cert, ca *unstructured.Unstructured
	for _, c := range byKind["Certificate"] {
		if isCA, _, _ := unstructured.NestedBool(c.Object, "spec", "isCA"); isCA {
			ca = c
		} else {
			cert = c
		}
	}
	if cert == nil || ca == nil || len(byKind["Certificate"]) != 2 {
		t.Fatalf("%d Certificates, want the serving one and the CA", len(byKind["Certificate"]))
	}
	issuerName, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	issuer := named("Issuer", issuerName)
	caSecret, _, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName")
	if want, _, _ := unstructured.NestedString(ca.Object, "spec", "secretName"); caSecret == "" || caSecret != want {
		t.Errorf("the serving Certificate's Issuer %s signs with Secret %q, the CA's Secret is %q", issuer.GetName(), caSecret, want)
	}
	caIssuerName, _, _ := unstructured.NestedString(ca.Object, "spec", "issuerRef", "name")
	if _, ok, _ := unstructured.NestedMap(named("Issuer", caIssuerName).Object, "spec", "selfSigned"); !ok {
		t.Errorf("the CA is issued by %s, not a selfSigned Issuer", caIssuerName)
	}
	var deployment appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(one("Deployment").Object, &deployment); err != nil {
		t.Fatal(err)
	}
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	services := map[string]corev1.Service{}
	for _, o := range byKind["Service"] {
		var s corev1.Service
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &s); err != nil {
			t.Fatal(err)
		}
		services[s.Name] = s
		if dns := s.Name + "." + s.Namespace + ".svc"; !slices.Contains(dnsNames, dns) {
			t.Errorf("the certificate (%v) does not hold %s", dnsNames, dns)
		}
	}
	if want := cert.GetNamespace() + "/" + cert.GetName(); vwc.GetAnnotations()["cert-manager.io/inject-ca-from"] != want {
		t.Errorf("inject-ca-from %q, want %q", vwc.GetAnnotations()["cert-manager.io/inject-ca-from"], want)
	}
	webhooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
	for _, w := range webhooks {
		name, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "name")
		ns, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "namespace")
		if s, ok := services[name]; !ok || s.Namespace != ns {
			t.Errorf("a webhook calls Service %s/%s, which is not shipped", ns, name)
		}
	}
	if ref, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); ref != issuer.GetName() || issuer.GetNamespace() != cert.GetNamespace() {
		t.Errorf("the Certificate names Issuer %s; the Issuer is %s/%s", ref, issuer.GetNamespace(), issuer.GetName())
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	pod := deployment.Spec.Template.Spec
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == secret }) ||
		deployment.Namespace != cert.GetNamespace() {
		t.Errorf("the manager (in %s) does not mount the Certificate's Secret %s/%s", deployment.Namespace, cert.GetNamespace(), secret)
	}
	var url string
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--runner-api-url="); ok {
			url = v
		}
	}
	found := false
	for _, s := range services {
		for _, p := range s.Spec.Ports {
			found = found || (url == fmt.Sprintf("https://%s.%s.svc:%d", s.Name, s.Namespace, p.Port) && p.Name == "runner-api")
		}
	}
	if !found {
		t.Errorf("--runner-api-url %q is not the runner API Service", url)
	}
	for _, o := range byKind["ClusterRoleBinding"] {
		var crb rbacv1.ClusterRoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &crb); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(byKind["ClusterRole"], func(r *unstructured.Unstructured) bool { return r.GetName() == crb.RoleRef.Name }) {
			t.Errorf("ClusterRoleBinding %s binds %s, which is not shipped", crb.Name, crb.RoleRef.Name)
		}
		for _, s := range crb.Subjects {
			if s.Name != pod.ServiceAccountName || s.Namespace != deployment.Namespace {
				t.Errorf("ClusterRoleBinding %s binds %s/%s, the manager runs as %s/%s", crb.Name, s.Namespace, s.Name, deployment.Namespace, pod.ServiceAccountName)
			}
		}
	}
}
