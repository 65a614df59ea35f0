package capi

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

var (
	machineSetsGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinesets"}
	configMapsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// restoreOrder is what docs/disaster-recovery.md backs up, in the order it
// restores by hand: Secrets, the Clusters (paused), then everything else.
var restoreOrder = []schema.GroupVersionResource{
	{Version: "v1", Resource: "secrets"},
	clustersGVR,
	infrav1.SchemeGroupVersion.WithResource("terraformclusters"),
	infrav1.SchemeGroupVersion.WithResource("terraformmachinetemplates"),
	infrav1.SchemeGroupVersion.WithResource("terraformmachines"),
	machineDeploymentsGVR,
	machineSetsGVR,
	machinesGVR,
}

// veleroOrder is the order Velero's server restores restoreOrder in by
// default: its high priorities first (Secrets, ConfigMaps), then every other kind
// sorted by resource and group, Clusters among its low priorities, last.
// Nothing is paused: Velero restores what it backed up.
func veleroOrder() []schema.GroupVersionResource {
	var middle []schema.GroupVersionResource
	for _, gvr := range restoreOrder {
		if gvr.Resource != "secrets" && gvr.Resource != "configmaps" && gvr != clustersGVR {
			middle = append(middle, gvr)
		}
	}
	slices.SortFunc(middle, func(a, b schema.GroupVersionResource) int {
		return strings.Compare(a.GroupResource().String(), b.GroupResource().String())
	})
	return append(append([]schema.GroupVersionResource{{Version: "v1", Resource: "secrets"}, configMapsGVR}, middle...), clustersGVR)
}

// TestRestoreOnFreshPlane does what the disaster-recovery page tells an
// operator: back up a cluster's Cluster API and CAPTF objects and CAPTF's
// Secrets the way a backup tool does (metadata reset; status dropped, or
// kept), bring up a fresh control plane with Cluster API and CAPTF, and
// restore: in Velero's default order (Clusters last, not paused) with the
// status dropped, as Velero restores by default; in the hand-made order
// (the Cluster first, paused, unpaused at the end) with the status kept.
// Nothing is created or destroyed, every object is Ready, and deleting the
// restored cluster afterwards destroys everything and leaves no Secret of
// CAPTF's.
func TestRestoreOnFreshPlane(t *testing.T) {
	root, _ := setup(t)
	for _, keepStatus := range []bool{false, true} {
		t.Run(map[bool]string{false: "Velero's order, status dropped", true: "paused Cluster first, status kept"}[keepStatus], func(t *testing.T) {
			ctx := context.Background()
			ns := map[bool]string{false: "dr", true: "dr-status"}[keepStatus]
			instances := t.TempDir()
			makeRestorableCluster(t, plane, root, ns, instances)
			before, err := framework.InstanceFiles(instances)
			if err != nil {
				t.Fatal(err)
			}
			if len(before) != 4 {
				t.Fatalf("instances %v, want the cluster's 2 and 2 workers", before)
			}

			// Velero backs up every Secret and ConfigMap of the namespace
			// (runs' inputs, results and records too); by hand, only what
			// the page lists.
			backup := backUp(t, plane, ns, !keepStatus, keepStatus)
			// The old plane is lost: its Cluster paused, nothing there runs
			// again.
			pause(t, plane, ns, "dr", true)

			start := time.Now()
			fresh, err := framework.StartLocal(ctx, root, binary, framework.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(fresh.Stop)
			if _, err := fresh.RegisterWebhook(ctx, "captf", fresh.Manager.WebhookAddr, fresh.Manager.WebhookCert.CA.CertPEM, ns); err != nil {
				t.Fatal(err)
			}
			t.Logf("fresh plane with Cluster API and CAPTF up in %s", time.Since(start).Round(100*time.Millisecond))

			if keepStatus {
				restore(t, fresh.ControlPlane, ns, backup, false, true)
				// Before unpausing: every state is there, no object lacks one.
				states, err := fresh.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelSecretType + "=state"})
				if err != nil || len(states.Items) != 3 {
					t.Fatalf("state Secrets after the restore: %v (%v), want 3", states, err)
				}
				pause(t, fresh.ControlPlane, ns, "dr", false)
			} else {
				restore(t, fresh.ControlPlane, ns, backup, true, false)
			}

			waitRestored(t, fresh.ControlPlane, ns, keepStatus)
			if now, _ := framework.InstanceFiles(instances); !maps.Equal(now, before) {
				t.Errorf("instances changed by the restore:\nbefore %v\nafter  %v", before, now)
			}
			jobs, err := fresh.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var ran []string
			for _, j := range jobs.Items {
				ran = append(ran, j.Name)
				if !strings.Contains(j.Name, "-apply-") || keepStatus {
					t.Errorf("Job %s ran after the restore; want %s", j.Name, map[bool]string{false: "one apply per object", true: "none"}[keepStatus])
				}
			}
			t.Logf("Jobs on the fresh plane: %v", ran)
			if !keepStatus && len(jobs.Items) != 3 {
				t.Errorf("%d Jobs on the fresh plane, want one apply per object (3)", len(jobs.Items))
			}

			// Deleting the restored cluster leaves nothing behind.
			if err := fresh.Dynamic.Resource(clustersGVR).Namespace(ns).Delete(ctx, "dr", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			var left []string
			err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
				left = nil
				if _, err := fresh.Dynamic.Resource(clustersGVR).Namespace(ns).Get(ctx, "dr", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					left = append(left, "cluster/dr")
				}
				files, _ := framework.InstanceFiles(instances)
				for f := range files {
					left = append(left, "instance "+f)
				}
				secrets, _ := fresh.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelManagedBy + "=" + names.ManagedByValue})
				for _, s := range secrets.Items {
					left = append(left, "secret/"+s.Name)
				}
				return len(left) == 0, nil
			})
			if err != nil {
				t.Errorf("left after deleting the restored cluster: %v", left)
			}
		})
	}
}

// makeRestorableCluster makes, in a new namespace, a Cluster of
// examples/local-cloud with 2 instances and a MachineDeployment of 2
// TerraformMachines, and waits until they are provisioned.
func makeRestorableCluster(t *testing.T, cp *framework.ControlPlane, root, ns, instances string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	variables := []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}},
		{Name: "instances", Value: &runtime.RawExtension{Raw: []byte("2")}}}
	module := func(name string) infrav1.Module {
		b, err := os.ReadFile(filepath.Join(root, "examples", name, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		return infrav1.Module{Inline: string(b)}
	}
	if _, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "dr"},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-cloud"), Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Create(ctx, &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "dr-md"},
		Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-machine"), Variables: variables[:1]}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dr-boot", Labels: map[string]string{infrav1.LabelBootstrapData: "true"}},
		Data: map[string][]byte{"value": []byte("#cloud-config\n")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	infraRef := func(kind, name string) map[string]any {
		return map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": kind, "name": name}
	}
	workers := map[string]any{"pool": "dr-md", "cluster.x-k8s.io/cluster-name": "dr"}
	for gvr, o := range map[schema.GroupVersionResource]map[string]any{
		clustersGVR: {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": map[string]any{"name": "dr", "namespace": ns},
			"spec": map[string]any{"infrastructureRef": infraRef("TerraformCluster", "dr")}},
		machineDeploymentsGVR: {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
			"metadata": map[string]any{"name": "dr-md", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "dr"}},
			"spec": map[string]any{"clusterName": "dr", "replicas": int64(2),
				"rollout":  map[string]any{"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
				"selector": map[string]any{"matchLabels": workers},
				"template": map[string]any{"metadata": map[string]any{"labels": workers},
					"spec": map[string]any{"clusterName": "dr", "bootstrap": map[string]any{"dataSecretName": "dr-boot"},
						"infrastructureRef": infraRef("TerraformMachineTemplate", "dr-md")}}}},
	} {
		if _, err := cp.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: o}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRestored(t, cp, ns, true)
}

// waitRestored waits until the TerraformCluster and both TerraformMachines
// are Ready (with a plan that changed nothing, unless anyPlan) and both
// Machines have their provider IDs.
func waitRestored(t *testing.T, cp *framework.ControlPlane, ns string, anyPlan bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "dr", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		tms, err := cp.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		machines, err := cp.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ok := func(conds []metav1.Condition) bool {
			c := meta.FindStatusCondition(conds, infrav1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue && (anyPlan || strings.Contains(c.Message, "0 to add, 0 to change, 0 to destroy, 0 to replace"))
		}
		ready := ok(tc.Status.Conditions)
		last = fmt.Sprintf("TerraformCluster %+v", meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionReady))
		for _, tm := range tms.Items {
			ready = ready && ok(tm.Status.Conditions)
			last += fmt.Sprintf("; TerraformMachine %s %+v", tm.Name, meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady))
		}
		withID := 0
		for _, m := range machines.Items {
			if id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); id != "" {
				withID++
			}
		}
		last += fmt.Sprintf("; %d of %d Machines with a provider ID", withID, len(machines.Items))
		return ready && len(tms.Items) == 2 && withID == 2 && len(machines.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("the cluster in %s did not become Ready: %v (%s)", ns, err, last)
	}
}

// backUp exports ns as a backup tool does: the objects of restoreOrder
// (everything, and every ConfigMap too, as Velero takes them; else CAPTF's
// Secrets by the labels the disaster-recovery page gives, and the
// bootstrap Secret the Machines name), metadata reduced to name,
// namespace, labels, annotations and finalizers; status kept or not.
func backUp(t *testing.T, cp *framework.ControlPlane, ns string, everything, keepStatus bool) map[schema.GroupVersionResource][]unstructured.Unstructured {
	t.Helper()
	out := map[schema.GroupVersionResource][]unstructured.Unstructured{}
	kinds := restoreOrder
	if everything {
		kinds = append(slices.Clone(restoreOrder), configMapsGVR)
	}
	for _, gvr := range kinds {
		opts := metav1.ListOptions{}
		if gvr.Resource == "secrets" && !everything {
			opts.LabelSelector = names.LabelManagedBy + "=" + names.ManagedByValue + "," + names.LabelSecretType + " in (state,state-chunk,backup,backup-chunk,durable-inputs)"
		}
		list, err := cp.Dynamic.Resource(gvr).Namespace(ns).List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if gvr.Resource == "secrets" && !everything {
			boot, err := cp.Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), "dr-boot", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			list.Items = append(list.Items, *boot)
		}
		for _, o := range list.Items {
			name, labels, annotations, finalizers := o.GetName(), o.GetLabels(), o.GetAnnotations(), o.GetFinalizers()
			o.Object["metadata"] = map[string]any{}
			o.SetName(name)
			o.SetNamespace(ns)
			o.SetLabels(labels)
			o.SetAnnotations(annotations)
			o.SetFinalizers(finalizers)
			if !keepStatus {
				delete(o.Object, "status")
			}
			out[gvr] = append(out[gvr], o)
		}
	}
	return out
}

// restore creates the backup as Velero does (its order, its labels, nothing
// paused) or by hand (restoreOrder, each Cluster paused); the status
// through the status subresource if keepStatus.
func restore(t *testing.T, cp *framework.ControlPlane, ns string, backup map[schema.GroupVersionResource][]unstructured.Unstructured, velero, keepStatus bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	order := restoreOrder
	if velero {
		order = veleroOrder()
	}
	for _, gvr := range order {
		for _, o := range backup[gvr] {
			o := *o.DeepCopy()
			if velero {
				// What Velero adds to everything it restores.
				labels := o.GetLabels()
				if labels == nil {
					labels = map[string]string{}
				}
				labels["velero.io/backup-name"], labels["velero.io/restore-name"] = "dr", "dr-20261203"
				o.SetLabels(labels)
			}
			if gvr == clustersGVR && !velero {
				if err := unstructured.SetNestedField(o.Object, true, "spec", "paused"); err != nil {
					t.Fatal(err)
				}
			}
			status, hasStatus := o.Object["status"]
			created, err := cp.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &o, metav1.CreateOptions{})
			if velero && apierrors.IsAlreadyExists(err) {
				// Velero skips what is there (kube-root-ca.crt), with a warning.
				continue
			}
			if err != nil {
				t.Fatalf("restoring %s %s: %v", gvr.Resource, o.GetName(), err)
			}
			if keepStatus && hasStatus && gvr.Resource != "secrets" {
				// The controllers may write the new object first: as a backup
				// tool does, try again on the newest.
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					created.Object["status"] = status
					_, err := cp.Dynamic.Resource(gvr).Namespace(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) {
						if latest, getErr := cp.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, o.GetName(), metav1.GetOptions{}); getErr == nil {
							created = latest
						}
					}
					return err
				})
				if err != nil {
					t.Fatalf("restoring the status of %s %s: %v", gvr.Resource, o.GetName(), err)
				}
			}
		}
	}
}

func pause(t *testing.T, cp *framework.ControlPlane, ns, cluster string, paused bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"paused":%t}}`, paused)
	if _, err := cp.Dynamic.Resource(clustersGVR).Namespace(ns).Patch(context.Background(), cluster, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
