package capi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// topologyClasses are two ClusterClasses of one TerraformClusterTemplate:
// "honest" as its author wrote it, "hostile" with a patch that makes the
// cluster's runner read the workload cluster's admin kubeconfig, which the
// class's author could not name in a template of theirs.
const topologyClasses = `
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformClusterTemplate
metadata: {name: plain, namespace: %[1]s}
spec:
  template:
    spec:
      module: {source: %[2]s}
      variables:
      - {name: instances, value: 0}
      - {name: instance_dir, value: %[3]q}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata: {name: cp, namespace: %[1]s}
spec:
  template:
    spec:
      kubeadmConfigSpec: {format: cloud-config}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: TerraformMachineTemplate
metadata: {name: cp-machines, namespace: %[1]s}
spec:
  template:
    spec:
      module: {source: %[2]s}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata: {name: honest, namespace: %[1]s}
spec:
  infrastructure:
    templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: TerraformClusterTemplate, name: plain}
  controlPlane:
    templateRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, name: cp}
    machineInfrastructure:
      templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: TerraformMachineTemplate, name: cp-machines}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata: {name: hostile, namespace: %[1]s}
spec:
  infrastructure:
    templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: TerraformClusterTemplate, name: plain}
  controlPlane:
    templateRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, name: cp}
    machineInfrastructure:
      templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: TerraformMachineTemplate, name: cp-machines}
  patches:
  - name: steal
    definitions:
    - selector:
        apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
        kind: TerraformClusterTemplate
        matchResources: {infrastructureCluster: true}
      jsonPatches:
      - op: add
        path: /spec/template/spec/jobs
        value:
          envFrom:
          - secretRef: {name: honest-kubeconfig}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: honest, namespace: %[1]s}
spec:
  topology:
    classRef: {name: honest}
    version: v1.34.0
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: thief, namespace: %[1]s}
spec:
  topology:
    classRef: {name: hostile}
    version: v1.34.0
`

// TestTopologyPatchCannotAddReferences (issue 30, item 2): Cluster API's
// topology controller writes a cluster's TerraformCluster from its class's
// template with the class's patches applied, with its own identity, which
// may read every Secret. A patch that adds a Secret reference is refused
// to it, whoever wrote the class: an object cloned from a template reads
// only what the template holds. The same class without the patch gives a
// cluster whose infrastructure CAPTF provisions.
func TestTopologyPatchCannotAddReferences(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	const ns = "topology"
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "honest-kubeconfig"},
		Data: map[string][]byte{"value": []byte("admin kubeconfig")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	installKubeadmCRDs(t)
	manifest := filepath.Join(t.TempDir(), "classes.yaml")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, topologyClasses, ns, filepath.Join(root, "examples", "local-cloud"), t.TempDir()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := plane.Kubectl(ctx, "apply", "--server-side", "-f", manifest); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	infraOf := func(cluster string) []infrav1.TerraformCluster {
		list, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).List(ctx, metav1.ListOptions{LabelSelector: "cluster.x-k8s.io/cluster-name=" + cluster})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}
	// The honest class: the topology controller's TerraformCluster passes
	// the webhook and is applied.
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		items := infraOf("honest")
		if len(items) != 1 {
			last = fmt.Sprintf("%d TerraformClusters", len(items))
			return false, nil
		}
		last = fmt.Sprintf("TerraformCluster %s: conditions %+v", items[0].Name, items[0].Status.Conditions)
		return items[0].Status.Ready, nil
	})
	if err != nil {
		t.Fatalf("the honest class's cluster: %v (%s)\ncapi log:\n%s", err, last, capiMgr.Logs(40))
	}

	// The hostile class: the topology controller is refused, and says so
	// on the Cluster.
	want := `Secret "honest-kubeconfig" is not in TerraformClusterTemplate plain`
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, tc := range infraOf("thief") {
			if tc.Spec.Jobs != nil && len(tc.Spec.Jobs.EnvFrom) > 0 {
				return false, fmt.Errorf("the topology controller wrote TerraformCluster %s reading Secret %s, which the class's template does not name",
					tc.Name, tc.Spec.Jobs.EnvFrom[0].SecretRef.Name)
			}
		}
		cluster, err := plane.Dynamic.Resource(clustersGVR).Namespace(ns).Get(ctx, "thief", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		last = fmt.Sprint(conds)
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "TopologyReconciled" && m["status"] == "False" && strings.Contains(fmt.Sprint(m["message"]), want) {
				return true, nil
			}
		}
		return strings.Contains(capiMgr.Logs(200), want), nil
	})
	if err != nil {
		t.Fatalf("the hostile class's cluster: %v\nconditions: %s\ncapi log:\n%s", err, last, capiMgr.Logs(40))
	}
	if items := infraOf("thief"); len(items) != 0 {
		t.Errorf("TerraformClusters of the hostile class: %d, want none", len(items))
	}
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		if strings.Contains(fmt.Sprint(j.Spec.Template.Spec.Containers), "honest-kubeconfig") {
			t.Errorf("Job %s reads the kubeconfig", j.Name)
		}
	}
}

// installKubeadmCRDs installs, once, the CRDs of kubeadm's bootstrap and
// control-plane providers (a ClusterClass needs a control-plane kind, a
// Machine may name a bootstrap config; nothing here runs kubeadm's
// controllers), labelled with their contract as kubeadm's release labels
// them.
func installKubeadmCRDs(t *testing.T) {
	t.Helper()
	kubeadmCRDsOnce.Do(func() { kubeadmCRDsErr = doInstallKubeadmCRDs(t.TempDir()) })
	if kubeadmCRDsErr != nil {
		t.Fatal(kubeadmCRDsErr)
	}
}

var (
	kubeadmCRDsOnce sync.Once
	kubeadmCRDsErr  error
)

func doInstallKubeadmCRDs(labelled string) error {
	dir, err := framework.CAPICRDDir()
	if err != nil {
		return err
	}
	module := filepath.Join(dir, "..", "..", "..", "..")
	for _, provider := range []string{filepath.Join("controlplane", "kubeadm"), filepath.Join("bootstrap", "kubeadm")} {
		files, err := filepath.Glob(filepath.Join(module, provider, "config", "crd", "bases", "*.yaml"))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("kubeadm's CRDs in %s: %v", provider, err)
		}
		for _, f := range files {
			crds, err := framework.ReadObjects(f)
			if err != nil {
				return err
			}
			for i, crd := range crds {
				labels := crd.GetLabels()
				if labels == nil {
					labels = map[string]string{}
				}
				labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
				crd.SetLabels(labels)
				b, err := crd.MarshalJSON()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(labelled, fmt.Sprintf("%s-%d.yaml", filepath.Base(f), i)), b, 0o600); err != nil {
					return err
				}
			}
		}
	}
	return plane.InstallCRDs(context.Background(), labelled)
}
