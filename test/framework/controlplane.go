// Package framework runs a real, local Kubernetes control plane for CAPTF's
// tests and quickstart: etcd, kube-apiserver and kube-controller-manager built
// by hack/build-controlplane.sh, CAPTF's and Cluster API's CRDs, and a local
// executor that plays the kubelet for Job pods.
package framework

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
)

// NodeName is the Node the local executor runs pods on.
const NodeName = "local"

// Options configure a control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver and kube-controller-manager.
	// Default: $CAPTF_BIN_DIR, else <repo>/bin.
	BinDir string
	// CRDDirs are installed after start. Default: CAPTF's manifests/crd and
	// Cluster API v1.14.2's core CRDs from the module cache.
	CRDDirs []string
	// Dir is where the plane keeps its data, certificates and logs. Default: a
	// new temporary directory, removed on Stop unless CAPTF_KEEP_PLANE is set.
	Dir string
	// ExtraAPIServerArgs are appended to kube-apiserver's flags, and
	// ExtraControllerManagerArgs to kube-controller-manager's.
	ExtraAPIServerArgs         []string
	ExtraControllerManagerArgs []string
	// PodNetwork gives the pods the executor runs from images a network of
	// their own (see podNetwork), Services that forward to them, and the
	// API server routes to Services' endpoints, as to pods of a cluster. It
	// needs root and `ip`.
	PodNetwork bool
	// RunnerTerraform is the terraform or tofu runner pods run
	// (CAPTF_TERRAFORM) on StartLocal's plane. Default: the runner's choice.
	RunnerTerraform string

	// workload starts the plane as a workload cluster's (StartWorkload):
	// no CRDs, no executor Node, and the controller manager runs the node
	// lifecycle controller for Nodes whose heartbeats stop.
	workload bool
	// apiServerHost is the address the API server listens on and clients
	// use. Default: 127.0.0.1.
	apiServerHost string
}

// ControlPlane is a running etcd, kube-apiserver and kube-controller-manager.
type ControlPlane struct {
	Dir            string
	CA             *CA
	APIServerHost  string
	APIServerPort  int
	KubeconfigFile string

	// Config is the admin (system:masters) client config.
	Config  *rest.Config
	Kube    kubernetes.Interface
	Captf   versioned.Interface
	Dynamic dynamic.Interface

	network   *podNetwork   // nil unless Options.PodNetwork
	services  *serviceProxy // nil unless Options.PodNetwork
	removeDir bool
	stopOnce  sync.Once
	procs     []*process // in start order
	mu        sync.Mutex
	cleanups  []func() // what runs on the plane: stopped first, newest first
}

// onStop registers what Stop stops before the plane itself.
func (cp *ControlPlane) onStop(f func()) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.cleanups = append(cp.cleanups, f)
}

// Start builds nothing: it starts the plane from prebuilt binaries and waits
// until it serves, the controller manager works and the CRDs are established.
// On error everything started is stopped again.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, rErr error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = BinDir(); err != nil {
			return nil, err
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%s is missing in %s: run hack/build-controlplane.sh (make test does)", b, opts.BinDir)
		}
	}
	if opts.CRDDirs == nil && !opts.workload {
		capi, err := CAPICRDDir()
		if err != nil {
			return nil, err
		}
		opts.CRDDirs = []string{filepath.Join(root, "manifests", "crd"), capi}
	}
	if opts.apiServerHost == "" {
		opts.apiServerHost = "127.0.0.1"
	}
	cp := &ControlPlane{Dir: opts.Dir, APIServerHost: opts.apiServerHost}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "captf-plane-"); err != nil {
			return nil, err
		}
		cp.removeDir = os.Getenv("CAPTF_KEEP_PLANE") == ""
	}
	defer func() {
		if rErr != nil {
			cp.Stop()
		}
	}()
	pki := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, etcdPeerPort := ports[0], ports[1]
	cp.APIServerPort = ports[2]

	serviceRange := "10.0.0.0/24"
	if opts.PodNetwork {
		if cp.network, err = newPodNetwork(); err != nil {
			return nil, err
		}
		serviceRange = cp.network.serviceRange()
		opts.ExtraAPIServerArgs = append(opts.ExtraAPIServerArgs, "--enable-aggregator-routing=true")
	}
	files, err := cp.writePKI(pki)
	if err != nil {
		return nil, fmt.Errorf("making certificates: %w", err)
	}
	env := cleanEnv()

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeerPort)
	if err := cp.start("etcd", filepath.Join(opts.BinDir, "etcd"), []string{
		"--name=default",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync", "--log-level=warn",
	}, env); err != nil {
		return nil, err
	}

	apiArgs := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + cp.APIServerHost, "--advertise-address=" + cp.APIServerHost,
		"--secure-port=" + strconv.Itoa(cp.APIServerPort),
		"--cert-dir=" + pki,
		"--tls-cert-file=" + files["serving.crt"], "--tls-private-key-file=" + files["serving.key"],
		"--client-ca-file=" + files["ca.crt"],
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + files["sa.pub"],
		"--service-account-signing-key-file=" + files["sa.key"],
		"--service-cluster-ip-range=" + serviceRange,
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--requestheader-client-ca-file=" + files["front-proxy-ca.crt"],
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + files["front-proxy-client.crt"],
		"--proxy-client-key-file=" + files["front-proxy-client.key"],
		"--profiling=false",
		"--v=1",
	}
	apiArgs = append(apiArgs, opts.ExtraAPIServerArgs...)
	if err := cp.start("kube-apiserver", filepath.Join(opts.BinDir, "kube-apiserver"), apiArgs, env); err != nil {
		return nil, err
	}
	if err := cp.connect(files); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return nil, err
	}

	kcmControllers := controllers
	if opts.workload {
		kcmControllers = workloadControllers
		opts.ExtraControllerManagerArgs = append(opts.ExtraControllerManagerArgs, nodeLifecycleArgs...)
	}
	if err := cp.start("kube-controller-manager", filepath.Join(opts.BinDir, "kube-controller-manager"), append([]string{
		"--kubeconfig=" + cp.KubeconfigFile,
		"--controllers=" + strings.Join(kcmControllers, ","),
		"--service-account-private-key-file=" + files["sa.key"],
		"--root-ca-file=" + files["ca.crt"],
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1",
	}, opts.ExtraControllerManagerArgs...), env); err != nil {
		return nil, err
	}
	if !opts.workload {
		if err := cp.createNode(ctx); err != nil {
			return nil, err
		}
	}
	if err := cp.InstallCRDs(ctx, opts.CRDDirs...); err != nil {
		return nil, err
	}
	if err := cp.waitControllerManager(ctx); err != nil {
		return nil, err
	}
	if cp.network != nil {
		if cp.services, err = cp.startServiceProxy(context.Background()); err != nil {
			return nil, err
		}
		cp.onStop(cp.services.Stop)
	}
	return cp, nil
}

// controllers are the kube-controller-manager controllers the tests need.
// Node lifecycle and taint eviction stay off: no kubelet sends heartbeats here.
var controllers = []string{
	"job-controller",
	"deployment-controller",
	"replicaset-controller",
	"endpointslice-controller",
	"garbage-collector-controller",
	"ttl-after-finished-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
	"resourcequota-controller",
}

func (cp *ControlPlane) writePKI(dir string) (map[string]string, error) {
	files := map[string]string{}
	ca, err := NewCA("captf-test-ca")
	if err != nil {
		return nil, err
	}
	cp.CA = ca
	files["ca.crt"] = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(files["ca.crt"], ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	hosts := []string{cp.APIServerHost, "127.0.0.1", "localhost", "10.0.0.1",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if cp.network != nil {
		hosts = append(hosts, cp.network.serviceIP)
	}
	serving, err := ca.Issue("kube-apiserver", nil, hosts)
	if err != nil {
		return nil, err
	}
	admin, err := ca.Issue("admin", []string{"system:masters"}, nil)
	if err != nil {
		return nil, err
	}
	proxyCA, err := NewCA("front-proxy-ca")
	if err != nil {
		return nil, err
	}
	files["front-proxy-ca.crt"] = filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(files["front-proxy-ca.crt"], proxyCA.CertPEM, 0o600); err != nil {
		return nil, err
	}
	proxyClient, err := proxyCA.Issue("front-proxy-client", nil, nil)
	if err != nil {
		return nil, err
	}
	for name, kp := range map[string]*KeyPair{"serving": serving, "admin": admin, "front-proxy-client": proxyClient} {
		c, k, err := kp.Write(dir, name)
		if err != nil {
			return nil, err
		}
		files[name+".crt"], files[name+".key"] = c, k
	}
	if files["sa.key"], files["sa.pub"], err = writeSigningKey(dir); err != nil {
		return nil, err
	}
	return files, nil
}

func (cp *ControlPlane) start(name, binary string, args, env []string) error {
	p, err := startProcess(name, cp.Dir, binary, args, env)
	if err != nil {
		return err
	}
	cp.procs = append(cp.procs, p)
	return nil
}

// connect builds the admin clients and writes the admin kubeconfig.
func (cp *ControlPlane) connect(files map[string]string) error {
	adminCert, _ := os.ReadFile(files["admin.crt"])
	adminKey, _ := os.ReadFile(files["admin.key"])
	cp.Config = cp.configFor(rest.TLSClientConfig{CertData: adminCert, KeyData: adminKey})
	cp.KubeconfigFile = filepath.Join(cp.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(cp.KubeconfigFile, cp.Config, "captf-local"); err != nil {
		return err
	}
	var err error
	if cp.Kube, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return err
	}
	if cp.Captf, err = versioned.NewForConfig(cp.Config); err != nil {
		return err
	}
	cp.Dynamic, err = dynamic.NewForConfig(cp.Config)
	return err
}

// URL is the API server's address.
func (cp *ControlPlane) URL() string {
	return fmt.Sprintf("https://%s:%d", cp.APIServerHost, cp.APIServerPort)
}

func (cp *ControlPlane) configFor(tls rest.TLSClientConfig) *rest.Config {
	tls.CAData = cp.CA.CertPEM
	return &rest.Config{Host: cp.URL(), TLSClientConfig: tls, QPS: 200, Burst: 400}
}

// UserConfig is a client config of a user authenticated by a client
// certificate, for RBAC tests.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	kp, err := cp.CA.Issue(user, groups, nil)
	if err != nil {
		return nil, err
	}
	return cp.configFor(rest.TLSClientConfig{CertData: kp.CertPEM, KeyData: kp.KeyPEM}), nil
}

// ServiceAccountConfig is a client config carrying a fresh token of a
// ServiceAccount.
func (cp *ControlPlane) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	tr, err := cp.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnTokenRequest, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	cfg := cp.configFor(rest.TLSClientConfig{})
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// WriteKubeconfig writes cfg (certificate or token) as a kubeconfig file.
func WriteKubeconfig(path string, cfg *rest.Config, name string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	kc.CurrentContext = name
	return clientcmd.WriteToFile(*kc, path)
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	apiserver := cp.procs[len(cp.procs)-1]
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, p := range cp.procs { // etcd and kube-apiserver
			if p.exited() {
				return false, fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(20))
			}
		}
		var status int
		last = cp.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Error()
		return last == nil && status == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready (last: %v): %w\n%s", last, err, apiserver.tail(20))
	}
	return nil
}

// createNode registers the Node the executor runs pods on, Ready and untainted.
func (cp *ControlPlane) createNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, Labels: map[string]string{
		corev1.LabelHostname: NodeName, corev1.LabelOSStable: "linux",
	}}}
	created, err := cp.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node: %w", err)
	}
	if err == nil && len(created.Spec.Taints) > 0 {
		created.Spec.Taints = nil
		if created, err = cp.Kube.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("untainting node: %w", err)
		}
	}
	if created == nil {
		return nil
	}
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "LocalExecutor",
		Message: "pods run as local processes", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	created.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resourceMust("110"), corev1.ResourceCPU: resourceMust("2"), corev1.ResourceMemory: resourceMust("16Gi")}
	created.Status.Allocatable = created.Status.Capacity
	_, err = cp.Kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// waitControllerManager waits until kube-controller-manager has done its
// first work: the default ServiceAccount and root CA ConfigMap in "default".
func (cp *ControlPlane) waitControllerManager(ctx context.Context) error {
	kcm := cp.procs[len(cp.procs)-1]
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if kcm.exited() {
			return false, fmt.Errorf("kube-controller-manager exited: %v\n%s", kcm.err, kcm.tail(20))
		}
		if _, err := cp.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, err := cp.Kube.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager not working: %w\n%s", err, kcm.tail(20))
	}
	return nil
}

// Stop stops managers and executors started on the plane, then every
// process in reverse start order and removes the plane's
// directory unless it was given or CAPTF_KEEP_PLANE is set.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.mu.Lock()
		cleanups := cp.cleanups
		cp.mu.Unlock()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		for i := len(cp.procs) - 1; i >= 0; i-- {
			cp.procs[i].stop(10 * time.Second)
		}
		if cp.network != nil {
			cp.network.Close()
		}
		if cp.removeDir {
			os.RemoveAll(cp.Dir)
		}
	})
}

// reportFailure keeps the plane's directory (data and every process's log)
// and says which of its processes died: a failed test that waited for a
// controller cannot tell an idle controller from a dead one.
func (cp *ControlPlane) reportFailure() {
	cp.removeDir = false
	fmt.Fprintf(os.Stderr, "tests failed: the control plane's logs are kept in %s\n", cp.Dir)
	for _, p := range cp.procs {
		if p.exited() {
			fmt.Fprintf(os.Stderr, "%s exited during the run: %v\n%s\n", p.name, p.err, p.tail(20))
		}
	}
}

// Logs returns the tail of a control-plane process's log.
func (cp *ControlPlane) Logs(name string, lines int) string {
	for _, p := range cp.procs {
		if p.name == name {
			return p.tail(lines)
		}
	}
	return ""
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return env
}
