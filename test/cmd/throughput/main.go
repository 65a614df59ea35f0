// Command throughput measures CAPTF end to end against the machine's limit:
// it brings up the quickstart (Cluster API's controllers, the executor
// running runner pods as processes with real terraform, the manager),
// scales its MachineDeployment to N and times N TerraformMachines from the
// scale to all their Machines holding provider IDs; then it runs the same
// module N times back to back with bare terraform (init, apply, output, as
// the runner does) and prints the ratio, and the runner's own time per Job
// (its pod's run less the bare terraform run).
//
//	go run ./test/cmd/throughput -n 200
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/test/framework"
)

func main() {
	n := flag.Int("n", 200, "machines")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	binary, err := framework.BuildCAPTF("captf")
	if err != nil {
		return err
	}
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
	capiMgr, err := cp.StartCAPI(ctx, "MachinePool=true")
	if err != nil {
		return err
	}
	defer capiMgr.Stop()
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
	instances := filepath.Join(cp.Dir, "instances")
	if err := cp.ApplyQuickstart(ctx, root, instances); err != nil {
		return err
	}
	if _, err := cp.WaitQuickstartReady(ctx); err != nil {
		return err
	}
	if _, err := cp.WaitQuickstartMachines(ctx, 2); err != nil {
		return err
	}
	before := len(ex.Runs())

	md := schema.GroupVersionResource{Group: capi.Machine.Resource.Group, Version: capi.Machine.Resource.Version, Resource: "machinedeployments"}
	start := time.Now()
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n+2)
	if _, err := cp.Dynamic.Resource(md).Namespace("demo").Patch(ctx, "demo-workers", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	if _, err := cp.WaitQuickstartMachines(ctx, n+2); err != nil {
		return err
	}
	captf := time.Since(start)
	var pods []time.Duration
	for _, r := range ex.Runs()[before:] {
		if strings.HasPrefix(r.Name, "tfm-") && strings.Contains(r.Name, "-apply-") && r.ExitCode == 0 {
			pods = append(pods, r.Finished.Sub(r.Started))
		}
	}

	tf, err := exec.LookPath("terraform")
	if err != nil {
		return err
	}
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-machine", "main.tf"))
	if err != nil {
		return err
	}
	bareDir := filepath.Join(cp.Dir, "bare")
	var bare []time.Duration
	bareStart := time.Now()
	for i := range n {
		dir := filepath.Join(bareDir, fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), module, 0o644); err != nil {
			return err
		}
		vars := fmt.Sprintf(`{"captf_name":"bare-%d","captf_bootstrap_data":"data","instance_dir":%q}`, i, filepath.Join(bareDir, "instances"))
		if err := os.WriteFile(filepath.Join(dir, "terraform.tfvars.json"), []byte(vars), 0o644); err != nil {
			return err
		}
		t0 := time.Now()
		for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-auto-approve", "-input=false"}, {"output", "-json"}} {
			cmd := exec.Command(tf, args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("terraform %s: %v\n%s", args[0], err, out)
			}
		}
		bare = append(bare, time.Since(t0))
	}
	bareTotal := time.Since(bareStart)

	slices.Sort(pods)
	slices.Sort(bare)
	fmt.Printf("CAPTF: %d machines from the scale to every Machine with its provider ID: %s (%.3f s per machine)\n", n, captf.Round(time.Millisecond), captf.Seconds()/float64(n))
	fmt.Printf("bare terraform: %d init+apply+output runs back to back: %s (%.3f s per run; median %s)\n", n, bareTotal.Round(time.Millisecond), bareTotal.Seconds()/float64(n), median(bare))
	fmt.Printf("ratio: %.2f×\n", captf.Seconds()/bareTotal.Seconds())
	if len(pods) > 0 {
		fmt.Printf("runner pods (%d apply Jobs): median %s, p90 %s; the runner's own time per Job: %s (median pod less median bare run)\n",
			len(pods), median(pods), pods[len(pods)*9/10], (median(pods) - median(bare)).Round(time.Millisecond))
	}
	return nil
}

func median(sorted []time.Duration) time.Duration {
	return sorted[len(sorted)/2].Round(time.Millisecond)
}
