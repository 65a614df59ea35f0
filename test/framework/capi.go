package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// CAPIManager is Cluster API's core manager (bin/capi-manager, built by
// hack/build-capi.sh) running against the plane with the v1beta2 API only.
type CAPIManager struct {
	proc *process
}

// StartCAPI starts Cluster API's core controllers. Their webhook server gets a
// self-signed certificate: the CRD bases carry no conversion webhook, and
// nothing calls it, but it must start.
func (cp *ControlPlane) StartCAPI(ctx context.Context, featureGates string) (*CAPIManager, error) {
	binary, err := BinPath("capi-manager")
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(cp.Dir, "capi-webhook")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	kp, err := cp.CA.Issue("capi-webhook", nil, []string{"127.0.0.1", "localhost"})
	if err != nil {
		return nil, err
	}
	if _, _, err := kp.Write(certDir, "tls"); err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--kubeconfig=" + cp.KubeconfigFile,
		"--leader-elect=false",
		fmt.Sprintf("--webhook-port=%d", ports[0]),
		"--webhook-cert-dir=" + certDir,
		fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--health-addr=127.0.0.1:%d", ports[2]),
		"--insecure-diagnostics",
		"--v=2",
	}
	if featureGates != "" {
		args = append(args, "--feature-gates="+featureGates)
	}
	p, err := startProcess("capi-manager", cp.Dir, binary, args, cleanEnv())
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	m := &CAPIManager{proc: p}
	// Up once its health endpoint answers.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("capi-manager exited: %v\n%s", p.err, p.tail(30))
		}
		return httpOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2])), nil
	})
	if err != nil {
		return nil, fmt.Errorf("capi-manager not ready: %w\n%s", err, p.tail(30))
	}
	return m, nil
}

// Stop stops it; CAPI can take 30s to stop while handling a deleted Cluster,
// so it gets a SIGKILL after 10s.
func (m *CAPIManager) Stop() { m.proc.stop(10 * time.Second) }

// Logs is the tail of its log.
func (m *CAPIManager) Logs(lines int) string { return m.proc.tail(lines) }
