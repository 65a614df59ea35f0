// Command local-up runs CAPTF's local management plane: etcd, kube-apiserver
// and kube-controller-manager with CAPTF's and Cluster API's CRDs installed,
// and the local executor that runs Job pods as processes. Ctrl-C stops it all.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
	cp, err := framework.Start(ctx, framework.Options{})
	if err != nil {
		return err
	}
	defer cp.Stop()
	ex, err := cp.StartExecutor(ctx, framework.ExecutorOptions{})
	if err != nil {
		return err
	}
	defer ex.Stop()

	fmt.Printf(`CAPTF's local management plane is up (%s).

  API server:  %s
  CRDs:        CAPTF (infrastructure.cluster.x-k8s.io/v1alpha1) and Cluster API %s
  Executor:    Job pods run as local processes on node %q; their files are in %s/pods

Point kubectl at it:

  export KUBECONFIG=%s
  kubectl get crds
  kubectl get cluster-api -A

Ctrl-C stops everything and removes %s.
`, time.Since(start).Round(100*time.Millisecond), cp.URL(), framework.CAPIVersion, framework.NodeName, cp.Dir, cp.KubeconfigFile, cp.Dir)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}
