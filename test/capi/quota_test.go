package capi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// quotaRuns counts the runs of TestQuotaStallsARollout: each has a
// namespace (and cloud account) of its own.
var quotaRuns int

// TestQuotaStallsARollout (issue 33, item 5): machines on the local cloud,
// whose account holds 3 instances (a control-plane machine and 2 workers),
// in a MachineDeployment of 2 rolled to a new template with maxSurge 1. The surge machine cannot be made: its
// TerraformMachine says so with the cloud's message (CloudQuotaExceeded),
// its retries back off, the rollout stalls with both old machines and
// their instances in place. Raising the quota lets the rollout finish with
// no step by hand: two new machines, the old ones' instances destroyed.
//
// It logs the rollout's timeline, the figures of docs/scaling.md (go test
// ./test/capi -run TestQuotaStallsARollout -count 3 -v): the test asserts
// what happens, not how fast.
func TestQuotaStallsARollout(t *testing.T) {
	ctx := context.Background()
	root, _ := setup(t)
	quotaRuns++
	ns := fmt.Sprintf("quota-%d", quotaRuns) // -count runs it again
	cloud, err := framework.StartLocalCloud(t.TempDir(), "-create-latency=100ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Stop)
	if err := cloud.SetLimits(ns, `{"quotas": {"instances": 3}}`); err != nil {
		t.Fatal(err)
	}
	lock, err := framework.LocalCloudLockFile()
	if err != nil {
		t.Fatal(err)
	}
	moduleConfigMap := func(name, example string) {
		t.Helper()
		module, err := os.ReadFile(filepath.Join(root, "examples", example, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plane.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"main.tf": string(module), ".terraform.lock.hcl": lock}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cloudVars := func(extra ...infrav1.Variable) []infrav1.Variable {
		return append([]infrav1.Variable{{Name: "endpoint", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", cloud.URL)}},
			{Name: "account", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", ns)}}}, extra...)
	}
	workCluster(t, root, ns, func(tc *infrav1.TerraformCluster) {
		moduleConfigMap("cluster-module", "localcloud-cluster")
		tc.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "cluster-module"}}
		tc.Spec.Variables = cloudVars()
	})
	waitClusterReady(t, ns, "work", 2*time.Minute)
	// Nodes for the cloud's instances: a new Machine is available, and
	// the rollout goes on, only once its Node is Ready.
	if _, err := plane.StartWorkloadOf(ctx, ns, "work", cloud.Hosts(ns)); err != nil {
		t.Fatal(err)
	}
	bootstrapSecret(t, ns, "worker-bootstrap")
	moduleConfigMap("machine-module", "localcloud-machine")
	template := func(name, size string) {
		t.Helper()
		tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{
				WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "machine-module"}},
					Variables: cloudVars(infrav1.Variable{Name: "size", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", size)}})}}}}}
		if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The control plane is one Machine (no control-plane provider runs):
	// its Node initializes the cluster for Cluster API.
	cp := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: ns, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "work"}},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "machine-module"}},
			Variables: cloudVars()}}}
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, cp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cpMachine := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "cp", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": "work", "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": "work", "version": "v1.37.0", "bootstrap": map[string]any{"dataSecretName": "worker-bootstrap"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": "cp"}}}}
	if _, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).Create(ctx, cpMachine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	template("small", "small")
	createWorkers(t, ns, "workers", "small", 2)
	// machinesOf lists the deployment's Machines by template, with whether
	// each has its provider ID.
	machinesOf := func() map[string]map[string]bool {
		list, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "pool=workers"})
		if err != nil {
			return nil
		}
		tms, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		clonedFrom := map[string]string{} // TerraformMachine → its template, as Cluster API records it
		for _, tm := range tms.Items {
			clonedFrom[tm.Name] = tm.Annotations["cluster.x-k8s.io/cloned-from-name"]
		}
		out := map[string]map[string]bool{}
		for _, m := range list.Items {
			infra, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
			tmpl := clonedFrom[infra]
			id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
			if out[tmpl] == nil {
				out[tmpl] = map[string]bool{}
			}
			out[tmpl][m.GetName()] = id != ""
		}
		return out
	}
	provisioned := func(machines map[string]bool) int {
		n := 0
		for _, ok := range machines {
			if ok {
				n++
			}
		}
		return n
	}
	waitMachinesOf := func(what string, timeout time.Duration, ok func(map[string]map[string]bool) bool) map[string]map[string]bool {
		t.Helper()
		var got map[string]map[string]bool
		if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
			got = machinesOf()
			return ok(got), nil
		}); err != nil {
			tms, _ := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
			for _, tm := range tms.Items {
				t.Logf("TerraformMachine %s: %+v", tm.Name, tm.Status.Conditions)
			}
			t.Fatalf("Machines never %s: %v\ncapi log:\n%s", what, got, plane.Logs("capi-manager", 30))
		}
		return got
	}
	before := waitMachinesOf("2 small ones provisioned", 3*time.Minute, func(m map[string]map[string]bool) bool {
		return len(m["small"]) == 2 && provisioned(m["small"]) == 2
	})

	// Rolled to a new template: the surge machine meets the quota.
	template("large", "large")
	began := time.Now()
	var timeline []string
	note := func(at time.Time, what string) {
		timeline = append(timeline, fmt.Sprintf("%6.1f s  %s", at.Sub(began).Seconds(), what))
	}
	defer func() { t.Logf("the rollout's timeline:\n%s", strings.Join(timeline, "\n")) }()
	patch := []byte(`{"spec":{"template":{"spec":{"infrastructureRef":{"name":"large"}}}}}`)
	if _, err := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Patch(ctx, "workers", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	note(time.Now(), "the MachineDeployment rolled to the large template (maxSurge 1, quota 3 instances, 3 held)")
	var refused *infrav1.TerraformMachine
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		tms, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i, tm := range tms.Items {
			if c := meta.FindStatusCondition(tm.Status.Conditions, infrav1.ConditionReady); c != nil && c.Reason == "CloudQuotaExceeded" {
				refused = &tms.Items[i]
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no TerraformMachine says CloudQuotaExceeded: %v", err)
	}
	note(time.Now(), "the surge machine "+refused.Name+" says Ready=False CloudQuotaExceeded")
	if c := meta.FindStatusCondition(refused.Status.Conditions, infrav1.ConditionReady); !strings.Contains(c.Message, "QuotaExceeded: instance quota of 3 reached in account "+ns) {
		t.Errorf("the refused machine's Ready message does not quote the cloud: %s", c.Message)
	}
	if !strings.Contains(refused.Name, "workers-") {
		t.Errorf("the machine refused is %s, want the surge machine", refused.Name)
	}
	// Stalled for 40 s: the old machines and their instances stay, and the
	// surge machine's retries back off (10 s, 20 s, 40 s: at most 4 Jobs).
	err = framework.Consistently(40*time.Second, func() error {
		m := machinesOf()
		if provisioned(m["small"]) != 2 {
			return fmt.Errorf("the old machines went before a new one was ready: %v", m)
		}
		if instances, err := cloud.List(ns, "instances"); err == nil && len(instances) != 3 {
			return fmt.Errorf("the cloud holds %d instances, want the control plane's and the old 2", len(instances))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := plane.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "captf.io/object-name=" + refused.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) > 4 {
		t.Errorf("%d apply Jobs for the refused machine in under a minute: its retries do not back off", len(jobs.Items))
	}
	var created []time.Time
	for _, j := range jobs.Items {
		created = append(created, j.CreationTimestamp.Time)
	}
	slices.SortFunc(created, time.Time.Compare)
	for i, at := range created {
		note(at, fmt.Sprintf("apply Job %d of the surge machine (Job creation times are to the second)", i+1))
	}
	note(time.Now(), "stalled: the 2 small machines and their instances still there")

	// Raised: the rollout finishes by itself.
	if err := cloud.SetLimits(ns, `{"quotas": {"instances": 4}}`); err != nil {
		t.Fatal(err)
	}
	note(time.Now(), "quota raised to 4 instances")
	after := waitMachinesOf("rolled to 2 large ones", 5*time.Minute, func(m map[string]map[string]bool) bool {
		return len(m["small"]) == 0 && len(m["large"]) == 2 && provisioned(m["large"]) == 2
	})
	note(time.Now(), "rolled: 2 large machines provisioned, no small one left")
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		instances, err := cloud.List(ns, "instances")
		return err == nil && len(instances) == 3, nil
	})
	note(time.Now(), "the cloud holds the control plane's instance and the 2 new ones")
	if err != nil {
		instances, _ := cloud.List(ns, "instances")
		t.Errorf("the cloud's instances after the rollout: %+v, want the control plane's and the new 2 (before %v, after %v)", instances, before, after)
	}
}
