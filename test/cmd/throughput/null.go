package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
	"github.com/captf/captf/test/framework"
)

var machineDeployments = schema.GroupVersionResource{Group: capi.Machine.Resource.Group, Version: capi.Machine.Resource.Version, Resource: "machinedeployments"}

// nullPool is the MachineDeployment of the null provider's machines.
const nullPool = "demo-null"

// nullScale measures what Cluster API and the API server take for n
// machines without any infrastructure: a MachineDeployment beside the
// quickstart's whose TerraformMachines carry cluster.x-k8s.io/managed-by
// (CAPTF keeps its hands off them) and a stand-in provider that marks
// each provisioned as soon as it appears, as Cluster API's in-memory
// provider does for its own scale tests (its module is not served for
// v1.14). It returns the time from the scale to n Machines with provider
// IDs and the CPU seconds by process meanwhile, and scales back to nothing.
func nullScale(ctx context.Context, cp *framework.ControlPlane, n int) (time.Duration, map[string]float64, error) {
	err := newPool(ctx, cp, nullPool, func(tmpl *infrav1.TerraformMachineTemplate) {
		tmpl.Spec.Template.ObjectMeta.Annotations = map[string]string{capi.ManagedByAnnotation: "null-provider"}
	})
	if err != nil {
		return 0, nil, err
	}
	stop, err := standIn(ctx, cp)
	if err != nil {
		return 0, nil, err
	}
	defer stop()

	cpu0 := cpuByCommand()
	start := time.Now()
	if err := scale(ctx, cp, nullPool, n); err != nil {
		return 0, nil, err
	}
	if err := waitNullMachines(ctx, cp, n, true); err != nil {
		return 0, nil, err
	}
	took := time.Since(start)
	cpu := cpuSince(cpu0)
	if err := scale(ctx, cp, nullPool, 0); err != nil {
		return 0, nil, err
	}
	return took, cpu, waitNullMachines(ctx, cp, 0, false)
}

// newPool makes a MachineDeployment name of no machines beside the
// quickstart's workers, and its TerraformMachineTemplate name: the
// workers' template changed by edit.
func newPool(ctx context.Context, cp *framework.ControlPlane, name string, edit func(*infrav1.TerraformMachineTemplate)) error {
	tmpl, err := cp.Captf.InfrastructureV1alpha1().TerraformMachineTemplates("demo").Get(ctx, "demo-workers", metav1.GetOptions{})
	if err != nil {
		return err
	}
	pool := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"}, Spec: tmpl.Spec}
	edit(pool)
	if _, err := cp.Captf.InfrastructureV1alpha1().TerraformMachineTemplates("demo").Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return err
	}
	md, err := cp.Dynamic.Resource(machineDeployments).Namespace("demo").Get(ctx, "demo-workers", metav1.GetOptions{})
	if err != nil {
		return err
	}
	md = &unstructured.Unstructured{Object: map[string]any{"apiVersion": md.GetAPIVersion(), "kind": md.GetKind(),
		"metadata": map[string]any{"name": name, "namespace": "demo"}, "spec": md.Object["spec"]}}
	for path, v := range map[string]any{"spec.replicas": int64(0), "spec.selector.matchLabels.pool": name,
		"spec.template.metadata.labels.pool": name, "spec.template.spec.infrastructureRef.name": name} {
		if err := unstructured.SetNestedField(md.Object, v, strings.Split(path, ".")...); err != nil {
			return err
		}
	}
	_, err = cp.Dynamic.Resource(machineDeployments).Namespace("demo").Create(ctx, md, metav1.CreateOptions{})
	return err
}

// scale sets the replicas of MachineDeployment name.
func scale(ctx context.Context, cp *framework.ControlPlane, name string, n int) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
	_, err := cp.Dynamic.Resource(machineDeployments).Namespace("demo").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// waitNullMachines waits for n Machines of the null pool (with provider
// IDs, when withIDs).
func waitNullMachines(ctx context.Context, cp *framework.ControlPlane, n int, withIDs bool) error {
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Dynamic.Resource(capi.Machine.Resource).Namespace("demo").List(ctx, metav1.ListOptions{LabelSelector: "pool=" + nullPool})
		if err != nil {
			return false, nil
		}
		count := 0
		for _, m := range list.Items {
			if id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); id != "" || !withIDs {
				count++
			}
		}
		return count == n, nil
	})
}

// standIn is the null provider: as CAPTF's manager (only it may set a
// provider ID), it marks every TerraformMachine of the null pool
// provisioned when it appears. It returns what stops it.
func standIn(ctx context.Context, cp *framework.ControlPlane) (func(), error) {
	cfg, err := cp.ServiceAccountConfig(ctx, "captf-system", "captf-manager")
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithNamespace("demo"))
	informer := factory.Infrastructure().V1alpha1().TerraformMachines().Informer()
	var mu sync.Mutex
	done := map[string]bool{}
	provision := func(obj any) {
		tm, ok := obj.(*infrav1.TerraformMachine)
		if !ok || tm.Annotations[capi.ManagedByAnnotation] != "null-provider" || tm.Spec.ProviderID != "" {
			return
		}
		mu.Lock()
		if done[tm.Name] {
			mu.Unlock()
			return
		}
		done[tm.Name] = true
		mu.Unlock()
		go func() {
			// Patches: Cluster API writes the object too (its owner).
			machines := client.InfrastructureV1alpha1().TerraformMachines("demo")
			spec := fmt.Appendf(nil, `{"spec":{"providerID":"null:///%s"}}`, tm.Name)
			_, err := machines.Patch(ctx, tm.Name, types.MergePatchType, spec, metav1.PatchOptions{})
			if err == nil {
				status := []byte(`{"status":{"initialization":{"provisioned":true},"ready":true}}`)
				_, err = machines.Patch(ctx, tm.Name, types.MergePatchType, status, metav1.PatchOptions{}, "status")
			}
			if err != nil {
				fmt.Println("null provider:", tm.Name, err)
				mu.Lock()
				delete(done, tm.Name) // the next event tries again
				mu.Unlock()
			}
		}()
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: provision, UpdateFunc: func(_, cur any) { provision(cur) }}); err != nil {
		return nil, err
	}
	stopCh := make(chan struct{})
	factory.Start(stopCh)
	factory.WaitForCacheSync(stopCh)
	return func() { close(stopCh); factory.Shutdown() }, nil
}
