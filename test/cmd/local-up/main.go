// Command local-up is CAPTF's quickstart: a local management plane (etcd,
// kube-apiserver, kube-controller-manager with CAPTF's and Cluster API's
// CRDs), the local cloud, Cluster API's core controllers, the local
// executor that runs Job pods as processes, and the CAPTF manager; it
// applies examples/quickstart, waits until the cluster is Ready and shows
// what happened. Ctrl-C stops it all.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

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
	step("starting etcd, kube-apiserver, kube-controller-manager, the local cloud, the executor, Cluster API's core controllers and the CAPTF manager")
	local, err := framework.StartLocal(ctx, root, binary, framework.Options{})
	if err != nil {
		return err
	}
	defer local.Stop()
	cp, mgr := local.ControlPlane, local.Manager
	if _, err := cp.RegisterWebhook(ctx, "captf-validating-webhook-configuration", mgr.WebhookAddr, mgr.WebhookCert.CA.CertPEM, "demo"); err != nil {
		return err
	}

	cloud := local.Cloud
	step("applying examples/quickstart (a Cluster, its TerraformCluster, a control-plane Machine and a MachineDeployment of 2 workers, each a TerraformMachine, on the local cloud at " + cloud.URL + ")")
	if err := cp.ApplyQuickstart(ctx, root, cloud.URL); err != nil {
		return err
	}
	step("starting the workload cluster (its own etcd and kube-apiserver) and a node agent that registers a Node for each instance in the cloud")
	workload, err := cp.StartWorkloadOf(ctx, "demo", "demo", cloud.Hosts(framework.QuickstartAccount))
	if err != nil {
		return err
	}
	tc, err := cp.WaitQuickstartReady(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager log:\n%s\n", tailFile(mgr.LogFile, 30))
		return err
	}
	machines, err := cp.WaitQuickstartMachines(ctx, framework.QuickstartMachines)
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager log:\n%s\n", tailFile(mgr.LogFile, 30))
		return err
	}
	nodes, err := cp.WaitQuickstartRunning(ctx, framework.QuickstartMachines)
	if err != nil {
		fmt.Fprintf(os.Stderr, "capi log:\n%s\n", local.CAPI.Logs(30))
		return err
	}
	made, err := cloud.Resources(framework.QuickstartAccount)
	if err != nil {
		return err
	}
	var resources []string
	for r, id := range made {
		resources = append(resources, r+"="+id)
	}
	slices.Sort(resources)
	var domains []string
	for _, fd := range tc.Status.FailureDomains {
		domains = append(domains, fd.Name)
	}
	fmt.Printf(`
Cluster demo/demo is provisioned, with its control plane and 2 workers
Running with their Nodes (%s from the start).

  endpoint:        %s:%d (from the module's control_plane_endpoint output)
  failure domains: %s
  machines:        %s
  nodes:           %s
  cloud resources: %s
  plan applied:    %s

Look around:

  export KUBECONFIG=%s PATH=%s:$PATH    # kubectl, and kubectl captf (bin/kubectl-captf)
  kubectl captf describe cluster demo -n demo
  kubectl get cluster-api -A
  kubectl -n demo describe cluster demo
  kubectl -n demo describe terraformcluster demo
  kubectl -n demo get jobs,secrets,leases
  kubectl --kubeconfig %s get nodes    # the workload cluster
  curl -H 'Authorization: Bearer demo' %s/v1/instances    # the cloud's API

A dead host is replaced: delete a worker's instance in the cloud (its ID is
its Node's name); its Node turns Unknown, the MachineHealthCheck deletes
the Machine, CAPTF destroys it and applies the replacement the
MachineDeployment makes:

  curl -X DELETE -H 'Authorization: Bearer demo' %s/v1/instances/<a worker's Node>
  kubectl -n demo get machines,jobs -w

A new version rolls the workers one at a time (a new one Ready before an
old one goes):

  kubectl -n demo patch machinedeployment demo-workers --type=merge -p '{"spec":{"template":{"spec":{"version":"v1.37.3"}}}}'

Change it, e.g. three instances beside the cluster's load balancer or
three workers, and watch:

  kubectl -n demo patch terraformcluster demo --type=json -p '[{"op":"replace","path":"/spec/variables/2/value","value":3}]'
  kubectl -n demo scale machinedeployment demo-workers --replicas=3

A change that destroys or replaces the cluster's resources waits for
approval of its exact plan, e.g. going down to one instance:

  kubectl -n demo patch terraformcluster demo --type=json -p '[{"op":"replace","path":"/spec/variables/2/value","value":1}]'
  kubectl captf plan tfc/demo -n demo       # what it would do, as terraform renders it
  kubectl captf approve tfc/demo -n demo    # shows it, asks, approves exactly that plan
  kubectl captf runs tfc/demo -n demo       # every run: its plan, outcome and times

The manager logs to %s. Ctrl-C stops everything and removes %s.
`, time.Since(start).Round(100*time.Millisecond), tc.Spec.ControlPlaneEndpoint.Host, tc.Spec.ControlPlaneEndpoint.Port,
		strings.Join(domains, ", "), strings.Join(machines, ", "), strings.Join(nodes, ", "), strings.Join(resources, ", "), tc.Status.AppliedPlanHash,
		cp.KubeconfigFile, filepath.Join(root, "bin"), workload.KubeconfigFile, cloud.URL, cloud.URL, mgr.LogFile, cp.Dir)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

func step(s string) { fmt.Printf("==> %s\n", s) }

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
