package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// QuickstartAccount is the local cloud account the quickstart's objects
// use.
const QuickstartAccount = "demo"

// ApplyQuickstart creates namespace demo, the module ConfigMaps (each
// module with the lock file of the local cloud's provider) and the objects
// of examples/quickstart, on the local cloud at cloudURL; Cluster API's
// controllers and CAPTF do the rest. make local-up runs it, and so do the
// CAPI and install suites.
func (cp *ControlPlane) ApplyQuickstart(ctx context.Context, root, cloudURL string) error {
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	lock, err := LocalCloudLockFile()
	if err != nil {
		return err
	}
	for _, m := range []string{"localcloud-cluster", "localcloud-machine"} {
		module, err := os.ReadFile(filepath.Join(root, "examples", m, "main.tf"))
		if err != nil {
			return err
		}
		if _, err := cp.Kube.CoreV1().ConfigMaps("demo").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m},
			Data: map[string]string{"main.tf": string(module), ".terraform.lock.hcl": lock}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "quickstart", "cluster.yaml"))
	if err != nil {
		return err
	}
	tmp := filepath.Join(cp.Dir, "quickstart.yaml")
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(raw), "${CLOUD_ENDPOINT}", cloudURL)), 0o600); err != nil {
		return err
	}
	objs, err := ReadObjects(tmp)
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

// WaitQuickstartReady waits until the quickstart's TerraformCluster is
// Ready, printing its Ready condition as it changes.
func (cp *ControlPlane) WaitQuickstartReady(ctx context.Context) (*infrav1.TerraformCluster, error) {
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

// QuickstartMachines are the quickstart's Machines: the control plane and
// two workers.
const QuickstartMachines = 3

// WaitQuickstartRunning waits until n Machines of the quickstart are Running
// with the Nodes of their instances in the workload cluster, and returns
// "name=node".
func (cp *ControlPlane) WaitQuickstartRunning(ctx context.Context, n int) ([]string, error) {
	return cp.waitQuickstartMachines(ctx, n, "are Running with their Nodes", func(m unstructured.Unstructured) string {
		phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		if phase != "Running" {
			return ""
		}
		return node
	})
}

// WaitQuickstartMachines waits until n Machines of the quickstart have the
// provider ID their TerraformMachine's module reported, and returns
// "name=providerID".
func (cp *ControlPlane) WaitQuickstartMachines(ctx context.Context, n int) ([]string, error) {
	return cp.waitQuickstartMachines(ctx, n, "have their provider IDs", func(m unstructured.Unstructured) string {
		id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
		return id
	})
}

// waitQuickstartMachines waits until value gives n Machines of the
// quickstart a value, and returns "name=value".
func (cp *ControlPlane) waitQuickstartMachines(ctx context.Context, n int, what string, value func(unstructured.Unstructured) string) ([]string, error) {
	var out []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Dynamic.Resource(capi.Machine.Resource).Namespace("demo").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		out = nil
		for _, m := range list.Items {
			if v := value(m); v != "" {
				out = append(out, m.GetName()+"="+v)
			}
		}
		return len(out) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d Machines %s: %w", len(out), n, what, err)
	}
	fmt.Printf("    %d Machines %s\n", n, what)
	return out, nil
}

// InstanceFiles maps each instance file the example modules made in dir
// to its content and modification time, to tell whether an instance was
// made or replaced; their hidden bookkeeping files are left out.
func InstanceFiles(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out[e.Name()] = fmt.Sprintf("%q@%s", b, info.ModTime().Format(time.RFC3339Nano))
	}
	return out, nil
}

// Local is the plane make local-up runs: the control plane, the local
// cloud, the executor running Job pods as processes (the runner from
// binary, terraform from PATH or root/bin, the cloud's provider mirror
// image), Cluster API's core controllers and the CAPTF manager.
type Local struct {
	*ControlPlane
	Cloud    *LocalCloud
	Executor *Executor
	CAPI     *CAPIManager
	Manager  *Manager
}

// StartLocal starts a Local plane with opts; Stop stops all of it.
func StartLocal(ctx context.Context, root, binary string, opts Options) (_ *Local, rErr error) {
	cp, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	l := &Local{ControlPlane: cp}
	defer func() {
		if rErr != nil {
			l.Stop()
		}
	}()
	if l.Cloud, err = StartLocalCloud(cp.Dir); err != nil {
		return l, err
	}
	mirror, err := ProviderMirrorImage()
	if err != nil {
		return l, err
	}
	images, err := ImageArchives()
	if err != nil {
		return l, err
	}
	env := []string{PathEnv()}
	if opts.RunnerTerraform != "" {
		env = append(env, "CAPTF_TERRAFORM="+opts.RunnerTerraform)
	}
	if l.Executor, err = cp.StartExecutor(ctx, ExecutorOptions{
		Commands: map[string]string{"/captf": binary},
		Env:      env,
		Images:   map[string]string{mirror: images[mirror]},
	}); err != nil {
		return l, err
	}
	if l.CAPI, err = cp.StartCAPI(ctx, "MachinePool=true"); err != nil {
		return l, err
	}
	if err := cp.InstallRBAC(ctx, "captf-system"); err != nil {
		return l, err
	}
	if l.Manager, err = cp.StartManager(ctx, ManagerOptions{Binary: binary, Namespace: "captf-system", Dir: cp.Dir,
		Args: []string{"--provider-mirror-image=" + mirror}}); err != nil {
		return l, err
	}
	return l, l.Manager.WaitReady(ctx)
}

// Stop stops the manager, Cluster API, the executor and the control plane.
func (l *Local) Stop() {
	if l.Manager != nil {
		l.Manager.Stop()
	}
	if l.CAPI != nil {
		l.CAPI.Stop()
	}
	if l.Executor != nil {
		l.Executor.Stop()
	}
	if l.Cloud != nil {
		l.Cloud.Stop()
	}
	l.ControlPlane.Stop()
}
