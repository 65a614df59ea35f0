package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BuildCAPTF builds the captf binary into <repo>/bin/<name>.
func BuildCAPTF(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if bin := os.Getenv("CAPTF_TEST_BINARY"); bin != "" {
		// Another build under today's tests: a release, or the commit
		// before a fix, to see its test fail.
		return bin, nil
	}
	out := filepath.Join(root, "bin", name)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/captf")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building captf: %v\n%s", err, b)
	}
	return out, nil
}

// PluginBinary is the kubectl plugin under test: CAPTF_TEST_PLUGIN names
// one built from an earlier tree, else it is built from this one into
// <repo>/bin/<name> (a name of each suite's own: suites run side by side,
// and one must not overwrite the binary another runs).
func PluginBinary(name string) (string, error) {
	if bin := os.Getenv("CAPTF_TEST_PLUGIN"); bin != "" {
		return bin, nil
	}
	return BuildCommand("./cmd/kubectl-captf", name)
}

// BuildCommand builds the command in <repo>/<pkg> (./test/cmd/attack, say)
// into <repo>/bin/<name>.
func BuildCommand(pkg, name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "bin", name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// InstallRBAC creates CAPTF's ClusterRoles from manifests/rbac, and a
// captf-manager ServiceAccount in namespace bound to the manager's role.
func (cp *ControlPlane) InstallRBAC(ctx context.Context, namespace string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, f := range []string{"manager_role.yaml", "metrics_reader_role.yaml"} {
		objs, err := ReadObjects(filepath.Join(root, "manifests", "rbac", f))
		if err != nil {
			return err
		}
		for _, o := range objs {
			var role rbacv1.ClusterRole
			if err := FromUnstructured(o, &role); err != nil {
				return err
			}
			if _, err := cp.Kube.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cp.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "captf-manager"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "captf-manager-" + namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-manager"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "captf-manager", Namespace: namespace}}}
	if _, err := cp.Kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// Manager is a `captf manager` process running as the captf-manager
// ServiceAccount of its namespace, so its RBAC is the shipped one.
type Manager struct {
	binary string
	args   []string
	env    []string
	front  *Front

	mu   sync.Mutex
	cmd  *exec.Cmd // the current process
	done chan struct{}

	LogFile   string
	ProbeAddr string
	// MetricsAddr serves /metrics.
	MetricsAddr string
	// WebhookAddr serves the webhook over TLS with WebhookCert, and
	// RunnerAPIAddr the runner API with the same certificate.
	WebhookAddr   string
	RunnerAPIAddr string
	WebhookCert   *WebhookCert
}

// ManagerOptions configure StartManager.
type ManagerOptions struct {
	Binary string
	// Namespace is POD_NAMESPACE: where its ServiceAccount and leader Lease are.
	Namespace string
	Dir       string
	Args      []string
	// Env is added to its environment (GOGC, GOMEMLIMIT).
	Env []string
	// Front, when set, is the runner API's address runners are told (a
	// Service of several managers), and Cert the serving certificate the
	// managers behind it share. Without them a manager has its own.
	Front *Front
	Cert  *WebhookCert
}

// StartManager starts a manager; it dies with the test binary.
func (cp *ControlPlane) StartManager(ctx context.Context, o ManagerOptions) (*Manager, error) {
	cfg, err := cp.ServiceAccountConfig(ctx, o.Namespace, "captf-manager")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(o.Dir, "manager.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, cfg, "captf"); err != nil {
		return nil, err
	}
	ports, err := FreePorts(4)
	if err != nil {
		return nil, err
	}
	m := &Manager{LogFile: filepath.Join(o.Dir, "manager.log"),
		ProbeAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), MetricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		WebhookAddr: fmt.Sprintf("127.0.0.1:%d", ports[2]), RunnerAPIAddr: fmt.Sprintf("127.0.0.1:%d", ports[3])}
	m.WebhookCert = o.Cert
	if m.WebhookCert == nil {
		if m.WebhookCert, err = NewWebhookCert(filepath.Join(o.Dir, "webhook-certs")); err != nil {
			return nil, err
		}
	}
	runnerAPI := m.RunnerAPIAddr
	if o.Front != nil {
		runnerAPI = o.Front.Addr
	}
	args := append([]string{"manager", "--kubeconfig=" + kubeconfig, "--runner-image=captf:local",
		"--health-probe-bind-address=" + m.ProbeAddr, "--metrics-bind-address=" + m.MetricsAddr,
		fmt.Sprintf("--webhook-port=%d", ports[2]), "--webhook-cert-dir=" + m.WebhookCert.Dir,
		fmt.Sprintf("--runner-api-port=%d", ports[3]), "--runner-api-url=https://" + runnerAPI, "-v=2"}, o.Args...)
	m.binary, m.args, m.front = o.Binary, args, o.Front
	m.env = append(append(cleanEnv(), o.Env...), "POD_NAMESPACE="+o.Namespace, "SERVICE_ACCOUNT_NAME=captf-manager")
	if err := m.start(os.O_TRUNC); err != nil {
		return nil, err
	}
	cp.onStop(m.Stop)
	return m, nil
}

// Restart starts the manager again, on the same ports and with the same
// certificate and arguments, once it has exited (Kill or Stop): a pod of
// the Deployment restarted. Its log goes on in LogFile.
func (m *Manager) Restart() error {
	if !m.Exited() {
		return errors.New("the manager still runs")
	}
	return m.start(os.O_APPEND)
}

func (m *Manager) start(mode int) error {
	out, err := os.OpenFile(m.LogFile, os.O_CREATE|os.O_WRONLY|mode, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(m.binary, m.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = m.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	if m.front != nil {
		m.front.Add(m.RunnerAPIAddr)
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		if m.front != nil {
			m.front.Remove(m.RunnerAPIAddr)
		}
		out.Close()
		close(done)
	}()
	return nil
}

// process is the current process and the channel closed when it exits.
func (m *Manager) process() (*exec.Cmd, chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd, m.done
}

// Kill sends SIGKILL and waits for the exit.
func (m *Manager) Kill() {
	cmd, done := m.process()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop sends SIGTERM, then SIGKILL after 15s.
func (m *Manager) Stop() {
	if m.Exited() {
		return
	}
	cmd, done := m.process()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		m.Kill()
	}
}

// Exited reports whether the process has ended.
func (m *Manager) Exited() bool {
	_, done := m.process()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Ready tells whether the manager serves (/readyz) and its controllers,
// if it leads, have synced (/readyz/controllers).
func (m *Manager) Ready() bool { return m.probe("/readyz") && m.probe("/readyz/controllers") }

// Serving asks /readyz alone: what the pod's readiness probe asks.
func (m *Manager) Serving() bool { return m.probe("/readyz") }

func (m *Manager) probe(path string) bool {
	resp, err := http.Get("http://" + m.ProbeAddr + path)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady waits up to a minute for Ready: informers synced and the
// webhook serving.
func (m *Manager) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for !m.Ready() {
		if m.Exited() {
			return fmt.Errorf("the manager exited; log: %s", m.LogFile)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the manager is not ready after a minute; log: %s", m.LogFile)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// LogContains reports whether the manager logged s.
func (m *Manager) LogContains(s string) bool {
	b, _ := os.ReadFile(m.LogFile)
	return strings.Contains(string(b), s)
}

// Pid is the manager's process ID.
func (m *Manager) Pid() int {
	cmd, _ := m.process()
	return cmd.Process.Pid
}

// ExitCode is the exit status once the process has ended.
func (m *Manager) ExitCode() int {
	cmd, done := m.process()
	<-done
	return cmd.ProcessState.ExitCode()
}

func httpOK(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
