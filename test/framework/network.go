package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// podNetwork is what a CNI plugin and kube-proxy give pods, for the pods
// the executor runs from images: each gets a network namespace of its own
// with one address on a bridge the plane made (198.18.N.0/24, the range
// RFC 2544 sets aside for tests), an address the API server can use as an
// endpoint. Services get cluster IPs from 198.19.N.0/24, local to the host:
// a proxy in the test process forwards each to a ready endpoint (what
// kube-proxy's first, userspace mode did). Workload clusters' API servers
// listen on 198.18.255.1, local to the host too, which pods of every
// network reach, as pods of a real management cluster reach the clusters it
// manages (and reach them still after a clusterctl move to another plane).
// Pods route only those three ranges: no pod traffic leaves the machine. It
// needs root and `ip`.
type podNetwork struct {
	index     int
	bridge    string
	gateway   string // the host's address on the bridge
	serviceIP string // the first of the service range: the kubernetes Service
	lock      *os.File

	mu   sync.Mutex
	used map[int]bool // host numbers of pod addresses in use
}

// workloadRange holds the addresses of workload clusters' API servers.
const (
	workloadRange         = "198.18.255.0/24"
	workloadAPIServerHost = "198.18.255.1"
)

// HostAddressForPods returns an address of this host that pods of every
// pod network reach, for servers outside the management cluster (the
// workload clusters' API servers, the local cloud) to listen on.
func HostAddressForPods() (string, error) {
	return workloadAPIServerHost, ensureWorkloadRange()
}

// serviceRange is the service range kube-apiserver is told.
func (n *podNetwork) serviceRange() string { return fmt.Sprintf("198.19.%d.0/24", n.index) }

// newPodNetwork takes the first network index no other plane on the machine
// holds (a lock file per index, held while the plane runs, so that planes
// of test packages running side by side never share one), and makes its
// bridge.
func newPodNetwork() (*podNetwork, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the pod network needs the ip command (Debian's iproute2) and root")
	}
	for i := range 255 { // 198.18.255.0/24 is the workload range
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("captf-pod-network-%d.lock", i)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close()
			continue
		}
		n := &podNetwork{index: i, bridge: fmt.Sprintf("captfbr%d", i), gateway: fmt.Sprintf("198.18.%d.1", i),
			serviceIP: fmt.Sprintf("198.19.%d.1", i), lock: f, used: map[int]bool{}}
		n.removeLeftovers() // of a plane of this index that was killed
		if err := n.setUp(); err != nil {
			n.Close()
			return nil, err
		}
		return n, nil
	}
	return nil, errors.New("every pod network index is taken")
}

func (n *podNetwork) setUp() error {
	return ipCommands([][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		// A bridge without an address of its own takes the lowest of its
		// ports': a pod joining with a lower one would change the
		// gateway's address under the other pods, whose ARP entries then
		// point nowhere for a minute (their API calls and webhooks time out).
		{"link", "set", n.bridge, "address", fmt.Sprintf("02:ca:f7:00:%02x:01", n.index)},
		{"addr", "add", n.gateway + "/24", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
		// Every service address is the host's own.
		{"route", "add", "local", n.serviceRange(), "dev", n.bridge},
	})
}

// ensureWorkloadRange makes the workload range local to the host, once for
// every plane (so it outlives them: an address range for tests only).
func ensureWorkloadRange() error {
	out, err := exec.Command("ip", "route", "add", "local", workloadRange, "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") {
		return fmt.Errorf("ip route add local %s dev lo: %v: %s", workloadRange, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// namespacePrefix names this network's pod network namespaces.
func (n *podNetwork) namespacePrefix() string { return fmt.Sprintf("captf-%d-", n.index) }

func (n *podNetwork) removeLeftovers() {
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), n.namespacePrefix()) {
			_ = exec.Command("ip", "netns", "del", e.Name()).Run()
		}
	}
}

// Close removes the bridge and every pod namespace left, and frees the index.
func (n *podNetwork) Close() {
	n.removeLeftovers()
	n.lock.Close()
}

// podSandbox is a pod's network namespace and address.
type podSandbox struct {
	IP    string
	NetNS string // path of the namespace, for nsenter --net
	name  string
	veth  string // the host's end
	host  int
}

// attach makes a pod's network namespace: a veth pair whose host end is on
// the bridge, lo up, and routes to the pod and service ranges only.
func (n *podNetwork) attach(uid string) (*podSandbox, error) {
	n.mu.Lock()
	host := 2
	for n.used[host] {
		host++
	}
	if host > 254 {
		n.mu.Unlock()
		return nil, errors.New("the pod network is full")
	}
	n.used[host] = true
	n.mu.Unlock()
	sb := &podSandbox{IP: fmt.Sprintf("198.18.%d.%d", n.index, host), name: n.namespacePrefix() + uid[:8], host: host,
		veth: fmt.Sprintf("cv%d-%s", n.index, uid[:8])}
	sb.NetNS = filepath.Join("/run/netns", sb.name)
	err := ipCommands([][]string{
		{"netns", "add", sb.name},
		{"link", "add", sb.veth, "type", "veth", "peer", "name", "eth0", "netns", sb.name},
		{"link", "set", sb.veth, "master", n.bridge, "up"},
		{"-n", sb.name, "addr", "add", sb.IP + "/24", "dev", "eth0"},
		{"-n", sb.name, "link", "set", "lo", "up"},
		{"-n", sb.name, "link", "set", "eth0", "up"},
		{"-n", sb.name, "route", "add", n.serviceRange(), "via", n.gateway},
		{"-n", sb.name, "route", "add", workloadRange, "via", n.gateway},
	})
	if err != nil {
		n.detach(sb)
		return nil, err
	}
	return sb, nil
}

// detach removes the veth pair and the namespace (the kernel would remove
// the pair with the namespace, but later).
func (n *podNetwork) detach(sb *podSandbox) {
	_ = exec.Command("ip", "link", "del", sb.veth).Run()
	_ = exec.Command("ip", "netns", "del", sb.name).Run()
	n.mu.Lock()
	delete(n.used, sb.host)
	n.mu.Unlock()
}

func ipCommands(cmds [][]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// serviceProxy listens on every Service's cluster IP and port and forwards
// each connection to a ready endpoint of its EndpointSlices; the kubernetes
// Service goes to the API server.
type serviceProxy struct {
	cp        *ControlPlane
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	listeners map[string]net.Listener // by cluster IP:port
	// hosts are the /etc/hosts files of running pods, by path.
	hosts  map[string]podHosts
	mu     sync.Mutex
	cancel context.CancelFunc
}

type podHosts struct {
	pod *corev1.Pod
	ip  string
}

// startServiceProxy runs until Stop of the plane.
func (cp *ControlPlane) startServiceProxy(ctx context.Context) (*serviceProxy, error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(cp.Kube, 0)
	p := &serviceProxy{cp: cp, services: factory.Core().V1().Services().Lister(),
		slices: factory.Discovery().V1().EndpointSlices().Lister(), listeners: map[string]net.Listener{}, hosts: map[string]podHosts{}, cancel: cancel}
	resync := func(any) { p.resync() }
	if _, err := factory.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: resync, UpdateFunc: func(_, o any) { resync(o) }, DeleteFunc: resync}); err != nil {
		cancel()
		return nil, err
	}
	factory.Discovery().V1().EndpointSlices().Informer()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("%v informer did not sync", typ)
		}
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return p, nil
}

func (p *serviceProxy) Stop() {
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, ln := range p.listeners {
		ln.Close()
		delete(p.listeners, addr)
	}
}

// resync opens a listener per cluster IP and TCP port, and closes those of
// Services that are gone.
func (p *serviceProxy) resync() {
	svcs, _ := p.services.List(labels.Everything())
	want := map[string]bool{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, svc := range svcs {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, port := range svc.Spec.Ports {
			if port.Protocol != corev1.ProtocolTCP {
				continue
			}
			addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port.Port)))
			want[addr] = true
			if p.listeners[addr] != nil {
				continue
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintf(os.Stderr, "service proxy: %s/%s: %v\n", svc.Namespace, svc.Name, err)
				continue
			}
			p.listeners[addr] = ln
			go p.serve(ln, svc.Namespace, svc.Name, port)
		}
	}
	for addr, ln := range p.listeners {
		if !want[addr] {
			ln.Close()
			delete(p.listeners, addr)
		}
	}
	// Cluster DNS answers with a Service's current cluster IP: a Service
	// deleted and made again (clusterctl upgrade does that) has a new one.
	for path, h := range p.hosts {
		if err := writeInPlace(path, p.hostsFile(h.pod, h.ip)); err != nil {
			delete(p.hosts, path) // the pod is gone
		}
	}
}

// writeHosts writes a pod's /etc/hosts at path and keeps it up to date
// with the Services until the pod's files go.
func (p *serviceProxy) writeHosts(path string, pod *corev1.Pod, ip string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hosts[path] = podHosts{pod: pod, ip: ip}
	return os.WriteFile(path, p.hostsFile(pod, ip), 0o644)
}

// writeInPlace rewrites an existing file without replacing its inode: the
// pod sees it through its overlay mount.
func writeInPlace(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

func (p *serviceProxy) serve(ln net.Listener, namespace, name string, port corev1.ServicePort) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			backend := p.endpoint(namespace, name, port)
			if backend == "" {
				return // no ready endpoint: refused, as kube-proxy rejects it
			}
			out, err := net.DialTimeout("tcp", backend, 5*time.Second)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(out, conn)
				out.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(conn, out)
			<-done
		}()
	}
}

// endpoint is a ready endpoint of the Service's port, picked at random, or
// "" when it has none.
func (p *serviceProxy) endpoint(namespace, name string, port corev1.ServicePort) string {
	if namespace == "default" && name == "kubernetes" {
		return net.JoinHostPort(p.cp.APIServerHost, strconv.Itoa(p.cp.APIServerPort))
	}
	eps, _ := p.slices.EndpointSlices(namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
	var ready []string
	for _, s := range eps {
		for _, sp := range s.Ports {
			if sp.Port == nil || ptrValue(sp.Name) != port.Name {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
					continue
				}
				for _, a := range ep.Addresses {
					ready = append(ready, net.JoinHostPort(a, strconv.Itoa(int(*sp.Port))))
				}
			}
		}
	}
	if len(ready) == 0 {
		return ""
	}
	return ready[rand.IntN(len(ready))]
}

// hostsFile is what a pod of the network reads in /etc/hosts: itself, and
// the Services' DNS names at their cluster IPs (the stand-in for cluster
// DNS; writeHosts rewrites it when Services change).
func (p *serviceProxy) hostsFile(pod *corev1.Pod, ip string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "127.0.0.1\tlocalhost\n%s\t%s\n", ip, pod.Name)
	svcs, _ := p.services.List(labels.Everything())
	slices.SortFunc(svcs, func(a, b *corev1.Service) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for _, svc := range svcs {
		if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		n := svc.Name + "." + svc.Namespace + ".svc"
		fmt.Fprintf(&b, "%s\t%s %s.cluster.local\n", svc.Spec.ClusterIP, n, n)
	}
	return []byte(b.String())
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
