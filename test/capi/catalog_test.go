package capi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// TestCatalogPrivateGitModuleMachines (issue 52): a private git repository
// publishes the local cloud's cluster and machine modules in the catalog;
// a Cluster's TerraformCluster and the TerraformMachines Cluster API clones
// from a TerraformMachineTemplate run them, each the digest the catalog
// pinned, with the credentials only the platform's namespace holds; the
// Cluster's delete destroys through the same catalog. A MachinePool of the
// catalog's pool module runs beside them.
func TestCatalogPrivateGitModuleMachines(t *testing.T) {
	ctx := context.Background()
	root, _ := setup(t)
	ns := "catalog"
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "catalog"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.RegisterWebhook(ctx, "captf-catalog", captfMgr.WebhookAddr, captfMgr.WebhookCert.CA.CertPEM, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), "captf-catalog", metav1.DeleteOptions{})
	})
	git, err := framework.StartGitServer(t.TempDir(), "platform", "catalog-s3cr3t-password")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(git.Close)
	files := map[string]string{}
	for dir, example := range map[string]string{"cloud": "local-cloud", "machine": "local-machine", "pool": "local-pool"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", example, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		files["modules/"+dir+"/main.tf"] = string(b)
	}
	if _, err := git.Commit("platform", "main", files); err != nil {
		t.Fatal(err)
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "catalog-git", Namespace: "captf-system", Labels: map[string]string{infrav1.LabelCatalogCredentials: "true"}},
		StringData: map[string]string{".git-credentials": strings.Replace(git.URL, "http://", "http://platform:catalog-s3cr3t-password@", 1) + "\n"}}
	if _, err := plane.Kube.CoreV1().Secrets("captf-system").Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = plane.Kube.CoreV1().Secrets("captf-system").Delete(context.Background(), creds.Name, metav1.DeleteOptions{})
	})
	digests := map[string]string{}
	for _, name := range []string{"cloud", "machine", "pool"} {
		entry := &infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "catalog-" + name},
			Spec: infrav1.TerraformModuleSpec{
				Source:                infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/platform.git", Path: "modules/" + name}},
				Versions:              []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
				NamespaceSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"team": "catalog"}},
				CredentialsSecretName: creds.Name,
			}}
		if _, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Create(ctx, entry, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Its finalizer too: the test's templates outlive it.
			_ = plane.Captf.InfrastructureV1alpha1().TerraformModules().Delete(context.Background(), entry.Name, metav1.DeleteOptions{})
			_, _ = plane.Captf.InfrastructureV1alpha1().TerraformModules().Patch(context.Background(), entry.Name, types.MergePatchType,
				[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		})
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, entry.Name, metav1.GetOptions{})
			if err != nil || len(got.Status.Versions) != 1 {
				return false, nil
			}
			if e := got.Status.Versions[0].Error; e != "" {
				return false, fmt.Errorf("resolving %s: %s", entry.Name, e)
			}
			digests[name] = got.Status.Versions[0].Digest
			return digests[name] != "", nil
		})
		if err != nil {
			t.Fatalf("catalog module %s: %v", entry.Name, err)
		}
	}
	instances := t.TempDir()
	instanceDir := []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}}
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module: infrav1.Module{CatalogRef: &infrav1.CatalogRef{Name: "catalog-cloud", Version: "v1"}}, Variables: instanceDir}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": "cat", "namespace": ns},
		"spec": map[string]any{"infrastructureRef": map[string]any{
			"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": "cat"}},
	}}
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Create(ctx, cluster, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bootstrapSecret(t, ns, "worker-bootstrap")
	tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{CatalogRef: &infrav1.CatalogRef{Name: "catalog-machine", Version: "v1"}}, Variables: instanceDir}}}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]any{"pool": "workers", "cluster.x-k8s.io/cluster-name": "cat"}
	md := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
		"metadata": map[string]any{"name": "workers", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "cat"}},
		"spec": map[string]any{
			"clusterName": "cat", "replicas": int64(2),
			"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"clusterName":       "cat",
					"bootstrap":         map[string]any{"dataSecretName": "worker-bootstrap"},
					"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachineTemplate", "name": "workers"},
				},
			},
		},
	}}
	if _, err := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Create(ctx, md, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A MachinePool of the catalog's pool module, beside.
	pool := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "cat"}},
		Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module: infrav1.Module{CatalogRef: &infrav1.CatalogRef{Name: "catalog-pool", Version: "v1"}}, Variables: instanceDir}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
		"metadata": map[string]any{"name": "pool", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "cat"}},
		"spec": map[string]any{
			"clusterName": "cat", "replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{
				"clusterName":       "cat",
				"bootstrap":         map[string]any{"dataSecretName": "worker-bootstrap"},
				"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachinePool", "name": "pool"},
			}},
		},
	}}
	if _, err := plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Create(ctx, mp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var applied []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		tms, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		applied = nil
		for _, tm := range tms.Items {
			if tm.Spec.ProviderID != "" {
				applied = append(applied, tm.Status.AppliedModule)
			}
		}
		return len(applied) == 2, nil
	})
	if err != nil {
		tms, _ := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		for _, tm := range tms.Items {
			t.Logf("TerraformMachine %s: %+v", tm.Name, tm.Status.Conditions)
		}
		t.Fatalf("two machines of the catalog's module never got their instances: %v\ncapi log:\n%s", err, plane.Logs("capi-manager", 30))
	}
	for _, d := range applied {
		if d != digests["machine"] {
			t.Errorf("a machine applied %s, want the catalog's %s", d, digests["machine"])
		}
	}
	var gotPool *infrav1.TerraformMachinePool
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		gotPool, err = plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Get(ctx, "pool", metav1.GetOptions{})
		return err == nil && len(gotPool.Spec.ProviderIDList) == 2, nil
	})
	if err != nil {
		t.Fatalf("the pool of the catalog's module never got its two instances: %v; %+v", err, gotPool)
	}
	if gotPool.Status.AppliedModule != digests["pool"] {
		t.Errorf("the pool applied %s, want the catalog's %s", gotPool.Status.AppliedModule, digests["pool"])
	}
	got, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "cat", metav1.GetOptions{})
	if err != nil || got.Status.AppliedModule != digests["cloud"] {
		t.Errorf("the cluster applied %v (%v), want the catalog's %s", got.Status.AppliedModule, err, digests["cloud"])
	}
	// The delete destroys through the catalog too (it fetches the module
	// with the credentials); nothing is left in the cloud.
	if err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Delete(ctx, "cat", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the catalog cluster was never deleted: %v", err)
	}
	if left := instanceFiles(instances, ""); len(left) != 0 {
		t.Errorf("instances left in the cloud after the delete: %v", left)
	}
}
