// Package e2e runs CAPTF's manager and runner against the real local control
// plane: the executor runs runner Jobs as processes, terraform is real.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/test/framework"
)

var (
	plane *framework.ControlPlane
	// captfBinary is the captf binary built for this run.
	captfBinary string
	root        string
)

func TestMain(m *testing.M) {
	var err error
	if root, err = framework.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	captfBinary = filepath.Join(root, "bin", "captf-e2e")
	build := exec.Command("go", "build", "-o", captfBinary, "./cmd/captf")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building captf:", err)
		os.Exit(1)
	}
	framework.Main(m, framework.Options{}, &plane)
}

var (
	setupOnce sync.Once
	executor  *framework.Executor
	setupErr  error
)

// setup installs CAPTF's RBAC and starts the executor, once per package.
func setup(t *testing.T) {
	t.Helper()
	setupOnce.Do(func() { setupErr = doSetup() })
	if setupErr != nil {
		t.Fatal(setupErr)
	}
}

func doSetup() error {
	ctx := context.Background()
	for _, f := range []string{"manifests/rbac/runner_role.yaml", "manifests/rbac/manager_role.yaml"} {
		if err := applyClusterRole(ctx, filepath.Join(root, f)); err != nil {
			return err
		}
	}
	path := os.Getenv("PATH")
	var err error
	// bin/ holds tofu on machines without terraform.
	executor, err = plane.StartExecutor(ctx, framework.ExecutorOptions{
		Commands: map[string]string{"/captf": captfBinary},
		Env:      []string{"PATH=" + path + ":" + filepath.Join(root, "bin")},
	})
	return err
}

func applyClusterRole(ctx context.Context, path string) error {
	objs, err := framework.ReadObjects(path)
	if err != nil {
		return err
	}
	for _, o := range objs {
		var role rbacv1.ClusterRole
		if err := framework.FromUnstructured(o, &role); err != nil {
			return err
		}
		if _, err := plane.Kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

func sanitize(s string) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(s))
}
