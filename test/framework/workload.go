package framework

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// workloadControllers run in a workload cluster's controller manager: the
// node lifecycle controller turns a Node whose heartbeats stopped Unknown;
// the ServiceAccount controllers let Start see the manager working.
var workloadControllers = []string{
	"node-lifecycle-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
}

// nodeLifecycleArgs make a stopped host's Node Unknown within seconds, not
// the default 50: the health-check tests wait for it.
var nodeLifecycleArgs = []string{
	"--node-monitor-period=1s",
	"--node-monitor-grace-period=8s",
	"--node-startup-grace-period=20s",
}

// heartbeat is how often the node agent renews the Leases of live hosts.
const heartbeat = time.Second

// WorkloadCluster is the API server of a Cluster API cluster: its own etcd,
// kube-apiserver and a controller manager with the node lifecycle
// controller, and a node agent standing in for the kubelets of its hosts.
type WorkloadCluster struct {
	*ControlPlane
	Namespace, Name string

	// hosts are the live hosts: each one's Node name and provider ID.
	hosts    func() map[string]string
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

var clustersGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}

// KubeconfigSecretName is the Secret Cluster API reads a cluster's
// kubeconfig from.
func KubeconfigSecretName(cluster string) string { return cluster + "-kubeconfig" }

// StartWorkload starts the workload cluster of the Cluster namespace/name
// and writes its kubeconfig Secret, as a control-plane provider would in
// production (owned by the Cluster when it exists). Its node agent keeps a
// Ready Node with provider ID local:///<file> for every file in
// instanceDirs, the hosts of the example machine and pool modules; a file
// removed out of band stops its heartbeats, and the node lifecycle
// controller turns its Node Unknown. It stops with cp.
func (cp *ControlPlane) StartWorkload(ctx context.Context, namespace, name string, instanceDirs ...string) (*WorkloadCluster, error) {
	return cp.StartWorkloadOf(ctx, namespace, name, func() map[string]string { return instanceHosts(instanceDirs) })
}

// StartWorkloadOf is StartWorkload with the live hosts hosts lists (Node
// name → provider ID), the local cloud's instances, say.
func (cp *ControlPlane) StartWorkloadOf(ctx context.Context, namespace, name string, hosts func() map[string]string) (*WorkloadCluster, error) {
	opts := Options{workload: true}
	if cp.network != nil {
		// Cluster API runs in a pod: its API server must be reachable from
		// pods, of this plane and of any other a move takes the cluster to.
		if err := ensureWorkloadRange(); err != nil {
			return nil, err
		}
		opts.apiServerHost = workloadAPIServerHost
	}
	plane, err := startOnFreePorts(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("workload cluster %s/%s: %w", namespace, name, err)
	}
	wc := &WorkloadCluster{ControlPlane: plane, Namespace: namespace, Name: name, hosts: hosts, done: make(chan struct{})}
	if err := cp.writeKubeconfigSecret(ctx, wc); err != nil {
		plane.Stop()
		return nil, err
	}
	agentCtx, cancel := context.WithCancel(context.Background())
	wc.cancel = cancel
	go wc.runNodeAgent(agentCtx)
	cp.onStop(wc.Stop)
	return wc, nil
}

// Stop stops the node agent and the workload cluster's processes.
func (wc *WorkloadCluster) Stop() {
	wc.stopOnce.Do(func() {
		wc.cancel()
		<-wc.done
		wc.ControlPlane.Stop()
	})
}

func (cp *ControlPlane) writeKubeconfigSecret(ctx context.Context, wc *WorkloadCluster) error {
	kubeconfig, err := os.ReadFile(wc.KubeconfigFile)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: KubeconfigSecretName(wc.Name), Namespace: wc.Namespace,
			Labels: map[string]string{"cluster.x-k8s.io/cluster-name": wc.Name},
		},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": kubeconfig},
	}
	cluster, err := cp.Dynamic.Resource(clustersGVR).Namespace(wc.Namespace).Get(ctx, wc.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		secret.OwnerReferences = []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: wc.Name, UID: cluster.GetUID()}}
	case !apierrors.IsNotFound(err):
		return err
	}
	if _, err := cp.Kube.CoreV1().Secrets(wc.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("writing the kubeconfig Secret of %s/%s: %w", wc.Namespace, wc.Name, err)
	}
	return nil
}

// ProviderIDPrefix is the provider ID of a local-cloud host without its name.
const ProviderIDPrefix = "local:///"

// instanceHosts are the instance files of dirs, with their provider IDs:
// hidden files are the modules' own bookkeeping.
func instanceHosts(dirs []string) map[string]string {
	live := map[string]string{}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
				live[e.Name()] = ProviderIDPrefix + e.Name()
			}
		}
	}
	return live
}

// runNodeAgent does what the kubelets of live hosts would: register the
// Node, post it Ready, renew its Lease. It logs failures and tries again on
// the next beat: the API server may be busy, a test may have deleted a Node.
func (wc *WorkloadCluster) runNodeAgent(ctx context.Context) {
	defer close(wc.done)
	leases := map[string]*coordinationv1.Lease{}
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		live := wc.hosts()
		for host := range leases {
			if _, ok := live[host]; !ok {
				delete(leases, host) // back later: post Ready again
			}
		}
		for host, providerID := range live {
			if err := wc.beat(ctx, host, providerID, leases); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "node agent of %s/%s: %s: %v\n", wc.Namespace, wc.Name, host, err)
				delete(leases, host)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (wc *WorkloadCluster) beat(ctx context.Context, host, providerID string, leases map[string]*coordinationv1.Lease) error {
	now := metav1.NowMicro()
	if lease := leases[host]; lease != nil {
		lease = lease.DeepCopy()
		lease.Spec.RenewTime = &now
		updated, err := wc.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		leases[host] = updated
		return nil
	}
	// First beat of this agent for the host, or after a failure: the Node
	// may be missing, deleted (Cluster API deletes a removed Machine's
	// Node) or Unknown (its host came back).
	node, err := wc.Kube.CoreV1().Nodes().Get(ctx, host, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = wc.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: host, Labels: map[string]string{corev1.LabelHostname: host, corev1.LabelOSStable: "linux"}},
			Spec:       corev1.NodeSpec{ProviderID: providerID},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	if !nodeReady(node) {
		if err := postReady(ctx, wc, node); err != nil {
			return err
		}
	}
	lease, err := wc.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, host, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, duration := host, int32(40)
		lease, err = wc.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: host, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: host, UID: node.UID}}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &now},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	leases[host] = lease
	return nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// postReady posts the status a healthy kubelet would: Ready, no pressure.
// The node lifecycle controller taints a new Node meanwhile: on a conflict
// it reads the Node again.
func postReady(ctx context.Context, wc *WorkloadCluster, node *corev1.Node) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := postReadyOnce(ctx, wc, node)
		if apierrors.IsConflict(err) {
			if fresh, getErr := wc.Kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); getErr == nil {
				node = fresh
			}
		}
		return err
	})
}

func postReadyOnce(ctx context.Context, wc *WorkloadCluster, node *corev1.Node) error {
	node = node.DeepCopy()
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node.Status.Conditions = []corev1.NodeCondition{
		condition(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "the host's instance file exists"),
		condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
		condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
		condition(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: node.Name}}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resourceMust("110"), corev1.ResourceCPU: resourceMust("2"), corev1.ResourceMemory: resourceMust("4Gi")}
	node.Status.Allocatable = node.Status.Capacity
	_, err := wc.Kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}
