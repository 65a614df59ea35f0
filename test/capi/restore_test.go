package capi

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
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

var machineSetsGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinesets"}

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

// TestRestoreOnFreshPlane does what the disaster-recovery page tells an
// operator who restores by hand: back up a cluster's Cluster API and CAPTF
// objects and CAPTF's Secrets with their status (metadata reset, as a
// backup tool does), bring up a fresh control plane with Cluster API and
// CAPTF, and restore them in the page's order, the Cluster first and
// paused, unpaused at the end. Nothing is created or destroyed, no Job
// runs, every object is Ready, and deleting the restored cluster
// afterwards destroys everything and leaves no Secret of CAPTF's.
// TestVeleroOrderRestoresClonedMachines restores with Velero instead, in its own
// order, status dropped.
func TestRestoreOnFreshPlane(t *testing.T) {
	root, _ := setup(t)
	ctx := context.Background()
	ns := "dr-status"
	instances := t.TempDir()
	makeRestorableCluster(t, plane, root, ns, instances, false, false)
	before := instanceSet(t, instances, 4)

	backup := backUp(t, plane, ns)
	// The old plane is lost: its Cluster paused, nothing there runs again.
	pause(t, plane, ns, "dr", true)

	// The fresh plane's runners run the other Terraform (OpenTofu where the
	// old plane's ran terraform), as after a CAPTF release that changed
	// its runner image's: the destroy at the end reads a state the other
	// one wrote.
	fresh := startFreshPlane(t, root, ns, framework.Options{RunnerTerraform: otherTerraform(t)})
	restore(t, fresh.ControlPlane, ns, backup)
	// Before unpausing: every state is there, no object lacks one.
	states, err := fresh.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelSecretType + "=state"})
	if err != nil || len(states.Items) != 3 {
		t.Fatalf("state Secrets after the restore: %v (%v), want 3", states, err)
	}
	pause(t, fresh.ControlPlane, ns, "dr", false)

	waitRestored(t, fresh.ControlPlane, ns, true, false)
	// The restored status says Ready already, so "no Job runs" means
	// something only after CAPTF has synced the objects with their owners
	// back (Cluster API sets them once unpaused; the sync that follows
	// would make a Job at once).
	waitOwned(t, fresh.ControlPlane, ns)
	if err := framework.Consistently(5*time.Second, func() error {
		jobs, err := fresh.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(jobs.Items) > 0 {
			return fmt.Errorf("Job %s ran after the restore", jobs.Items[0].Name)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	checkRestored(t, fresh, ns, instances, before, 0)
}

// otherTerraform is the Terraform this suite's runners do not run:
// OpenTofu (bin/tofu, which make images builds) where they run terraform,
// terraform where they run tofu.
func otherTerraform(t *testing.T) string {
	t.Helper()
	used := os.Getenv("CAPTF_TERRAFORM")
	if used == "" {
		if _, err := exec.LookPath("terraform"); err == nil {
			used = "terraform"
		}
	}
	if filepath.Base(used) != "terraform" {
		if _, err := exec.LookPath("terraform"); err != nil {
			t.Skip("no terraform beside OpenTofu to restore with")
		}
		return "terraform"
	}
	tofu, err := framework.BinPath("tofu")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tofu); err != nil {
		t.Fatalf("%v: make images builds it", err)
	}
	return tofu
}

// veleroBackedUp is what the disaster-recovery page tells Velero to back
// up: the Cluster API and CAPTF kinds, Secrets and ConfigMaps.
var veleroBackedUp = []string{
	"clusters.cluster.x-k8s.io", "machinedeployments.cluster.x-k8s.io", "machinesets.cluster.x-k8s.io",
	"machines.cluster.x-k8s.io", "machinepools.cluster.x-k8s.io",
	"terraformclusters.infrastructure.cluster.x-k8s.io", "terraformclustertemplates.infrastructure.cluster.x-k8s.io",
	"terraformmachines.infrastructure.cluster.x-k8s.io", "terraformmachinetemplates.infrastructure.cluster.x-k8s.io",
	"terraformmachinepools.infrastructure.cluster.x-k8s.io", "terraformmachinepooltemplates.infrastructure.cluster.x-k8s.io",
	"secrets", "configmaps",
}

// TestVeleroOrderRestoresClonedMachines is the disaster-recovery page's Velero
// flow, with Velero's own server and AWS plugin backing up into an S3
// stand-in: a provisioned cluster with two machines and a pool is backed
// up with `velero backup create` (Cluster API and CAPTF kinds, Secrets and
// ConfigMaps), its plane is lost, and `velero restore create` brings it
// into a fresh plane with the same versions. Velero restores in its own
// order (Secrets and ConfigMaps, then the kinds by name, Clusters last),
// pauses nothing and drops the status: every object runs one apply whose
// plan changes nothing and is Ready again, no instance is created or
// destroyed, and deleting the restored cluster destroys every instance and
// leaves no Secret of CAPTF's. Every module comes from a ConfigMap and the
// machines are clones of a template: Velero restores terraformmachines
// before terraformmachinetemplates (issue 50, item 8), and every clone was
// refused while its template was not back.
func TestVeleroOrderRestoresClonedMachines(t *testing.T) {
	root, _ := setup(t)
	ctx := context.Background()
	ns := "dr-velero"
	instances := t.TempDir()
	makeRestorableCluster(t, plane, root, ns, instances, true, true)
	before := instanceSet(t, instances, 6)
	store, err := framework.StartObjectStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Stop)
	velero, err := plane.StartVelero(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	out, err := velero.Run(ctx, "backup", "create", "dr", "--include-namespaces", ns,
		"--include-resources", strings.Join(veleroBackedUp, ","), "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, velero.Logs(40))
	}
	t.Logf("velero backup create: %s", lastLine(out))
	if phase := veleroPhase(t, plane, "backups", "dr"); phase != "Completed" {
		out, _ := velero.Run(ctx, "backup", "describe", "dr", "--details")
		t.Fatalf("backup dr is %s, want Completed:\n%s", phase, out)
	}
	// The old plane is lost: Velero and the Cluster stop there.
	velero.Stop()
	pause(t, plane, ns, "dr", true)

	fresh := startFreshPlane(t, root, ns, framework.Options{})
	if velero, err = fresh.StartVelero(ctx, store); err != nil {
		t.Fatal(err)
	}
	// Velero's server finds the backup in the bucket: it looks once a
	// minute (a fixed period), a minute of this test's time.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return veleroPhase(t, fresh.ControlPlane, "backups", "dr") == "Completed", nil
	})
	if err != nil {
		t.Fatalf("the fresh plane's Velero never listed backup dr:\n%s", velero.Logs(40))
	}
	out, err = velero.Run(ctx, "restore", "create", "dr", "--from-backup", "dr", "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, velero.Logs(40))
	}
	t.Logf("velero restore create: %s", lastLine(out))
	if phase := veleroPhase(t, fresh.ControlPlane, "restores", "dr"); phase != "Completed" {
		out, _ := velero.Run(ctx, "restore", "describe", "dr", "--details")
		t.Fatalf("restore dr is %s, want Completed:\n%s", phase, out)
	}
	// Warnings are expected (the fresh plane's own kube-root-ca.crt is
	// there already): shown, not failed on.
	if restored, err := fresh.Dynamic.Resource(framework.VeleroResource("restores")).Namespace("velero").Get(ctx, "dr", metav1.GetOptions{}); err == nil {
		if warnings, _, _ := unstructured.NestedInt64(restored.Object, "status", "warnings"); warnings > 0 {
			out, _ := velero.Run(ctx, "restore", "describe", "dr")
			t.Logf("restore dr: %d warnings:\n%s", warnings, out)
		}
	}

	waitRestored(t, fresh.ControlPlane, ns, false, true)
	checkRestored(t, fresh, ns, instances, before, 4)
}

// waitOwned waits until Cluster API has set the owner of the
// TerraformCluster and of both TerraformMachines of ns.
func waitOwned(t *testing.T, cp *framework.ControlPlane, ns string) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = nil
		tc, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Get(ctx, "dr", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		tms, err := cp.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(tms.Items) != 2 {
			return false, nil
		}
		for _, o := range []metav1.Object{tc, &tms.Items[0], &tms.Items[1]} {
			if len(o.GetOwnerReferences()) == 0 {
				last = append(last, o.GetName())
			}
		}
		return len(last) == 0, nil
	})
	if err != nil {
		t.Fatalf("no owner on %v in %s", last, ns)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// veleroPhase is the phase of a Backup or Restore, "" while there is none.
func veleroPhase(t *testing.T, cp *framework.ControlPlane, resource, name string) string {
	t.Helper()
	got, err := cp.Dynamic.Resource(framework.VeleroResource(resource)).Namespace("velero").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	return phase
}

// instanceSet is the local cloud's instances, want of them.
func instanceSet(t *testing.T, dir string, want int) map[string]string {
	t.Helper()
	files, err := framework.InstanceFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != want {
		t.Fatalf("instances %v, want %d", files, want)
	}
	return files
}

// startFreshPlane starts a plane with Cluster API and CAPTF, its webhook
// guarding ns, stopped at the end of the test.
func startFreshPlane(t *testing.T, root, ns string, opts framework.Options) *framework.Local {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	fresh, err := framework.StartLocal(ctx, root, binary, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Stop)
	if _, err := fresh.RegisterWebhook(ctx, "captf", fresh.Manager.WebhookAddr, fresh.Manager.WebhookCert.CA.CertPEM, ns); err != nil {
		t.Fatal(err)
	}
	t.Logf("fresh plane with Cluster API and CAPTF up in %s", time.Since(start).Round(100*time.Millisecond))
	return fresh
}

// checkRestored checks a restored cluster: the instances are those before,
// applies Jobs ran (one per object, each with the plan waitRestored saw),
// and deleting the Cluster destroys every instance and leaves no Secret of
// CAPTF's.
func checkRestored(t *testing.T, fresh *framework.Local, ns, instances string, before map[string]string, applies int) {
	t.Helper()
	ctx := context.Background()
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
		if !strings.Contains(j.Name, "-apply-") {
			t.Errorf("Job %s ran after the restore; want only applies", j.Name)
		}
	}
	t.Logf("Jobs on the fresh plane: %v", ran)
	if len(jobs.Items) != applies {
		t.Errorf("%d Jobs on the fresh plane, want %d (one apply per object without its status)", len(jobs.Items), applies)
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
}

// makeRestorableCluster makes, in a new namespace, a Cluster of
// examples/local-cloud with 2 instances and a MachineDeployment of 2
// TerraformMachines (and withPool a MachinePool of 2 with a
// TerraformMachinePool), and waits until they are provisioned.
//
// configMapModules: each module comes from a ConfigMap, which the webhook
// checks the writer (the restorer) may read; the machines are clones of a
// template that names one, which a restore brings back after them.
func makeRestorableCluster(t *testing.T, cp *framework.ControlPlane, root, ns, instances string, withPool, configMapModules bool) {
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
		if !configMapModules {
			return infrav1.Module{Inline: string(b)}
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-module"}, Data: map[string]string{"main.tf": string(b)}}
		if _, err := cp.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: cm.Name}}
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
	clusterLabel := map[string]any{"cluster.x-k8s.io/cluster-name": "dr"}
	workers := map[string]any{"pool": "dr-md", "cluster.x-k8s.io/cluster-name": "dr"}
	objects := map[schema.GroupVersionResource]map[string]any{
		clustersGVR: {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": map[string]any{"name": "dr", "namespace": ns},
			"spec": map[string]any{"infrastructureRef": infraRef("TerraformCluster", "dr")}},
		machineDeploymentsGVR: {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
			"metadata": map[string]any{"name": "dr-md", "namespace": ns, "labels": clusterLabel},
			"spec": map[string]any{"clusterName": "dr", "replicas": int64(2),
				"rollout":  map[string]any{"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
				"selector": map[string]any{"matchLabels": workers},
				"template": map[string]any{"metadata": map[string]any{"labels": workers},
					"spec": map[string]any{"clusterName": "dr", "bootstrap": map[string]any{"dataSecretName": "dr-boot"},
						"infrastructureRef": infraRef("TerraformMachineTemplate", "dr-md")}}}},
	}
	if withPool {
		if _, err := cp.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Create(ctx, &infrav1.TerraformMachinePool{
			ObjectMeta: metav1.ObjectMeta{Name: "dr-pool", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "dr"}},
			Spec:       infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-pool"), Variables: variables[:1]}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		objects[machinePoolsGVR] = map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
			"metadata": map[string]any{"name": "dr-pool", "namespace": ns, "labels": clusterLabel},
			"spec": map[string]any{"clusterName": "dr", "replicas": int64(2),
				"template": map[string]any{"spec": map[string]any{"clusterName": "dr", "bootstrap": map[string]any{"dataSecretName": "dr-boot"},
					"infrastructureRef": infraRef("TerraformMachinePool", "dr-pool")}}}}
	}
	for gvr, o := range objects {
		if _, err := cp.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: o}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitRestored(t, cp, ns, true, withPool)
}

// waitRestored waits until the TerraformCluster, both TerraformMachines
// (and withPool the TerraformMachinePool) are Ready (with a plan that
// changed nothing, unless anyPlan) and both Machines (and the pool) have
// their provider IDs.
func waitRestored(t *testing.T, cp *framework.ControlPlane, ns string, anyPlan, withPool bool) {
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
		if withPool {
			pool, err := cp.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Get(ctx, "dr-pool", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ready = ready && ok(pool.Status.Conditions) && len(pool.Spec.ProviderIDList) == 2
			last += fmt.Sprintf("; TerraformMachinePool %v %+v", pool.Spec.ProviderIDList, meta.FindStatusCondition(pool.Status.Conditions, infrav1.ConditionReady))
		}
		return ready && len(tms.Items) == 2 && withID == 2 && len(machines.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("the cluster in %s did not become Ready: %v (%s)", ns, err, last)
	}
}

// backUp exports ns as the disaster-recovery page's hand-made backup does:
// the objects of restoreOrder, CAPTF's Secrets by the labels the page
// gives and the bootstrap Secret the Machines name, with their status,
// metadata reduced to name, namespace, labels, annotations and finalizers
// (a backup tool's reset).
func backUp(t *testing.T, cp *framework.ControlPlane, ns string) map[schema.GroupVersionResource][]unstructured.Unstructured {
	t.Helper()
	out := map[schema.GroupVersionResource][]unstructured.Unstructured{}
	for _, gvr := range restoreOrder {
		opts := metav1.ListOptions{}
		if gvr.Resource == "secrets" {
			opts.LabelSelector = names.LabelManagedBy + "=" + names.ManagedByValue + "," + names.LabelSecretType + " in (state,state-chunk,backup,backup-chunk,durable-inputs)"
		}
		list, err := cp.Dynamic.Resource(gvr).Namespace(ns).List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if gvr.Resource == "secrets" {
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
			out[gvr] = append(out[gvr], o)
		}
	}
	return out
}

// restore creates the backup in restoreOrder, each Cluster paused, with
// the status through the status subresource.
func restore(t *testing.T, cp *framework.ControlPlane, ns string, backup map[schema.GroupVersionResource][]unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, gvr := range restoreOrder {
		for _, o := range backup[gvr] {
			o := *o.DeepCopy()
			if gvr == clustersGVR {
				if err := unstructured.SetNestedField(o.Object, true, "spec", "paused"); err != nil {
					t.Fatal(err)
				}
			}
			status, hasStatus := o.Object["status"]
			created, err := cp.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &o, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("restoring %s %s: %v", gvr.Resource, o.GetName(), err)
			}
			if hasStatus && gvr.Resource != "secrets" {
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
