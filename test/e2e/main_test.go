// Package e2e runs CAPTF's manager and runner against the real local control
// plane: the executor runs runner Jobs as processes, terraform is real.
package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

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
	if framework.Listing() {
		os.Exit(m.Run())
	}
	if captfBinary, err = framework.BuildCAPTF("captf-e2e"); err != nil {
		fmt.Fprintln(os.Stderr, err)
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
	// bin/ holds tofu on machines without terraform.
	images, err := framework.ImageArchives()
	if err != nil {
		return err
	}
	// Jobs of the runner image `make images` built run from it; the rest
	// (image captf:local) as processes of the binary built here.
	executor, err = plane.StartExecutor(context.Background(), framework.ExecutorOptions{
		Images:   images,
		Commands: map[string]string{"/captf": captfBinary},
		// CAPTF_TERRAFORM=tofu runs the suite with OpenTofu.
		Env: []string{framework.PathEnv(), "CAPTF_TERRAFORM=" + os.Getenv("CAPTF_TERRAFORM")},
	})
	return err
}
