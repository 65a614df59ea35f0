// Command local-up is CAPTF's quickstart: a local management plane (etcd,
// kube-apiserver, kube-controller-manager with CAPTF's and Cluster API's
// CRDs), Cluster API's core controllers, the local executor that runs Job
// pods as processes, and the CAPTF manager; it applies examples/quickstart, waits until the cluster is Ready
// and shows what happened. Ctrl-C stops it all.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "local-up:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	step("building captf")
	binary, err := framework.BuildCAPTF("captf")
	if err != nil {
		return err
	}
	step("starting etcd, kube-apiserver and kube-controller-manager")
	cp, err := framework.Start(ctx, framework.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	ex, err := cp.StartExecutor(ctx, framework.ExecutorOptions{
		Commands: map[string]string{"/captf": binary},
		Env:      []string{"PATH=" + os.Getenv("PATH") + ":" + filepath.Join(root, "bin")},
	})
	if err != nil {
		return err
	}
	defer ex.Stop()
	step("starting Cluster API's core controllers")
	capi, err := cp.StartCAPI(ctx, "MachinePool=true")
	if err != nil {
		return err
	}
	defer capi.Stop()
	step("starting the CAPTF manager")
	if err := cp.InstallRBAC(ctx, "captf-system"); err != nil {
		return err
	}
	mgr, err := cp.StartManager(ctx, framework.ManagerOptions{Binary: binary, Namespace: "captf-system", Dir: cp.Dir})
	if err != nil {
		return err
	}
	defer mgr.Stop()
	if err := mgr.WaitReady(ctx); err != nil {
		return err
	}
	if _, err := cp.RegisterWebhook(ctx, "captf-validating-webhook-configuration", mgr.WebhookAddr, mgr.WebhookCert.CA.CertPEM, "demo"); err != nil {
		return err
	}

	step("applying examples/quickstart (a Cluster, its TerraformCluster and a MachineDeployment of 2 TerraformMachines)")
	instances := filepath.Join(cp.Dir, "instances")
	if err := applyExample(ctx, cp, root, instances); err != nil {
		return err
	}
	tc, err := waitReady(ctx, cp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager log:\n%s\n", tailFile(mgr.LogFile, 30))
		return err
	}
	machines, err := waitMachines(ctx, cp, 2)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager log:\n%s\n", tailFile(mgr.LogFile, 30))
		return err
	}
	files, _ := os.ReadDir(instances)
	var fileNames []string
	for _, f := range files {
		if !strings.HasPrefix(f.Name(), ".") {
			fileNames = append(fileNames, f.Name())
		}
	}
	var domains []string
	for _, fd := range tc.Status.FailureDomains {
		domains = append(domains, fd.Name)
	}
	fmt.Printf(`
Cluster demo/demo is provisioned, with its 2 workers (%s from the start).

  endpoint:        %s:%d (from the module's control_plane_endpoint output)
  failure domains: %s
  machines:        %s
  instances:       %s in %s
  plan applied:    %s

Look around:

  export KUBECONFIG=%s
  kubectl get cluster-api -A
  kubectl -n demo describe cluster demo
  kubectl -n demo describe terraformcluster demo
  kubectl -n demo get jobs,secrets,leases
  ls %s

Change it, e.g. three cluster instances or three workers, and watch:

  kubectl -n demo patch terraformcluster demo --type=json -p '[{"op":"replace","path":"/spec/variables/1/value","value":3}]'
  kubectl -n demo scale machinedeployment demo-workers --replicas=3

A change that destroys or replaces cluster instances waits for approval of
its exact plan, e.g. going down to one instance:

  kubectl -n demo patch terraformcluster demo --type=json -p '[{"op":"replace","path":"/spec/variables/1/value","value":1}]'
  kubectl -n demo get terraformcluster demo -o jsonpath='{.status.conditions[?(@.type=="DestructivePlanBlocked")].message}'
  kubectl -n demo annotate terraformcluster demo captf.io/approve-destructive-plan=<the hash it names> --overwrite

The manager logs to %s. Ctrl-C stops everything and removes %s.
`, time.Since(start).Round(100*time.Millisecond), tc.Spec.ControlPlaneEndpoint.Host, tc.Spec.ControlPlaneEndpoint.Port,
		strings.Join(domains, ", "), strings.Join(machines, ", "), strings.Join(fileNames, ", "), instances, tc.Status.AppliedPlanHash,
		cp.KubeconfigFile, instances, mgr.LogFile, cp.Dir)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

func step(s string) { fmt.Printf("==> %s\n", s) }

// applyExample creates the namespace, the module ConfigMap and the objects
// of examples/quickstart; Cluster API's controllers do the rest.
func applyExample(ctx context.Context, cp *framework.ControlPlane, root, instances string) error {
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, m := range []string{"local-cloud", "local-machine"} {
		module, err := os.ReadFile(filepath.Join(root, "examples", m, "main.tf"))
		if err != nil {
			return err
		}
		if _, err := cp.Kube.CoreV1().ConfigMaps("demo").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m},
			Data: map[string]string{"main.tf": string(module)}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "cluster.yaml"))
	if err != nil {
		return err
	}
	tmp := filepath.Join(cp.Dir, "quickstart.yaml")
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(raw), "${INSTANCE_DIR}", instances)), 0o600); err != nil {
		return err
	}
	objs, err := framework.ReadObjects(tmp)
	if err != nil {
		return err
	}
	for _, o := range objs {
		gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
		if err != nil {
			return err
		}
		resource := strings.ToLower(o.GetKind()) + "s"
		if o.GetKind() == "Secret" {
			gv = schema.GroupVersion{Version: "v1"}
		}
		if _, err := cp.Dynamic.Resource(gv.WithResource(resource)).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

func waitReady(ctx context.Context, cp *framework.ControlPlane) (*infrav1.TerraformCluster, error) {
	var tc *infrav1.TerraformCluster
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		tc, err = cp.Captf.InfrastructureV1alpha1().TerraformClusters("demo").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionReady)
		if c == nil {
			return false, nil
		}
		if line := c.Reason + ": " + c.Message; line != last {
			fmt.Printf("    Ready=%s %s\n", c.Status, line)
			last = line
		}
		return c.Status == metav1.ConditionTrue && c.Reason == "Applied", nil
	})
	if err != nil {
		b, _ := json.MarshalIndent(tc, "", "  ")
		return nil, fmt.Errorf("the TerraformCluster did not become Ready: %w\n%s", err, b)
	}
	return tc, nil
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitMachines waits until n Machines have the provider ID their
// TerraformMachine's module reported, and returns "name=providerID".
func waitMachines(ctx context.Context, cp *framework.ControlPlane, n int) ([]string, error) {
	machines := schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
	var out []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Dynamic.Resource(machines).Namespace("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		out = nil
		for _, m := range list.Items {
			if id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID"); id != "" {
				out = append(out, m.GetName()+"="+id)
			}
		}
		return len(out) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d Machines got a provider ID: %w", len(out), n, err)
	}
	fmt.Printf("    %d Machines have their provider IDs\n", n)
	return out, nil
}
