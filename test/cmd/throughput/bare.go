package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// filesPoolName is the MachineDeployment of -module terraform_data.
const filesPoolName = "demo-files"

// filesPool makes the pool of -module terraform_data: machines of
// examples/local-machine (a file each in instances, no provider).
func filesPool(ctx context.Context, cp *framework.ControlPlane, root, instances string) error {
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-machine", "main.tf"))
	if err != nil {
		return err
	}
	if _, err := cp.Kube.CoreV1().ConfigMaps("demo").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "local-machine"},
		Data: map[string]string{"main.tf": string(module)}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	dir, err := json.Marshal(instances)
	if err != nil {
		return err
	}
	return newPool(ctx, cp, filesPoolName, func(tmpl *infrav1.TerraformMachineTemplate) {
		tmpl.Spec.Template.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "local-machine"}}
		tmpl.Spec.Template.Spec.Variables = []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: dir}}}
	})
}

// bareRuns runs the machines' module n times back to back with bare
// terraform, init, apply and output, as a user would (the local cloud's
// provider from the same mirror the runner pods mount), and returns each
// run's time, sorted, and the whole time.
func bareRuns(cp *framework.ControlPlane, root, module string, cloud *framework.LocalCloud, n int, instances string) ([]time.Duration, time.Duration, error) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		return nil, 0, err
	}
	bareDir := filepath.Join(cp.Dir, "bare")
	files := map[string][]byte{}
	env := append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	vars := func(i int) map[string]any {
		return map[string]any{"captf_name": fmt.Sprintf("bare-%d", i), "captf_bootstrap_data": "data", "instance_dir": instances}
	}
	if module == moduleTerraformData {
		if files["main.tf"], err = os.ReadFile(filepath.Join(root, "examples", "local-machine", "main.tf")); err != nil {
			return nil, 0, err
		}
	} else {
		if files["main.tf"], err = os.ReadFile(filepath.Join(root, "examples", "localcloud-machine", "main.tf")); err != nil {
			return nil, 0, err
		}
		lock, err := framework.LocalCloudLockFile()
		if err != nil {
			return nil, 0, err
		}
		files[".terraform.lock.hcl"] = []byte(lock)
		mirror, err := framework.BinPath("providers")
		if err != nil {
			return nil, 0, err
		}
		config := filepath.Join(bareDir, "cli.tfrc")
		if err := os.MkdirAll(bareDir, 0o755); err != nil {
			return nil, 0, err
		}
		if err := os.WriteFile(config, fmt.Appendf(nil, "provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", mirror), 0o644); err != nil {
			return nil, 0, err
		}
		env = append(env, "TF_CLI_CONFIG_FILE="+config)
		networks, err := cloud.List(framework.QuickstartAccount, "networks")
		if err != nil || len(networks) == 0 {
			return nil, 0, fmt.Errorf("the quickstart's network: %v %v", networks, err)
		}
		vars = func(i int) map[string]any {
			return map[string]any{"captf_name": fmt.Sprintf("bare-%d", i), "captf_bootstrap_data": "data", "endpoint": cloud.URL,
				"account": framework.QuickstartAccount, "captf_cluster_exports": map[string]string{"network_id": networks[0].ID}}
		}
	}
	var took []time.Duration
	start := time.Now()
	for i := range n {
		dir := filepath.Join(bareDir, fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, 0, err
		}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return nil, 0, err
			}
		}
		b, err := json.Marshal(vars(i))
		if err != nil {
			return nil, 0, err
		}
		if err := os.WriteFile(filepath.Join(dir, "terraform.tfvars.json"), b, 0o644); err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-auto-approve", "-input=false"}, {"output", "-json"}} {
			cmd := exec.Command(tf, args...)
			cmd.Dir = dir
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, 0, fmt.Errorf("terraform %s: %v\n%s", args[0], err, out)
			}
		}
		took = append(took, time.Since(t0))
	}
	total := time.Since(start)
	slices.Sort(took)
	return took, total, nil
}
