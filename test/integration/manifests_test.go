package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/captf/captf/pkg/webhook"
	"github.com/captf/captf/test/framework"
)

// TestShippedManifests: the API server takes every object of the default
// kustomize base, built as users build it (dry run; cert-manager's kinds are
// not served here), and the Deployment wires what
// the webhook needs: the certificate volume (not optional), the downward-API
// identity and the webhook port the Service targets.
func TestShippedManifests(t *testing.T) {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.Kustomize(filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(plane.Kube.Discovery()))
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "captf-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
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
		if gvk.Group == "cert-manager.io" {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		ri := plane.Dynamic.Resource(m.Resource)
		var create func() error
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			create = func() error {
				_, err := ri.Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}
		} else {
			create = func() error {
				_, err := ri.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}
		}
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s %s refused by the API server: %v", gvk.Kind, o.GetName(), err)
		}
	}

	pod := deployment.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment containers = %d", len(pod.Containers))
	}
	c := pod.Containers[0]
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
	// The webhook and the runner API: each Service reaches the container
	// port the manager serves on, with a certificate valid for its name.
	for name, port := range map[string]int32{"captf-webhook-service": 9443, "captf-runner-api": 9445} {
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
