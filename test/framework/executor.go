package framework

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// ExecutorOptions configure the local executor.
type ExecutorOptions struct {
	// Commands maps a container's command[0] to a local executable, e.g.
	// "/captf" to the captf binary the tests built. Unmapped commands are
	// looked up on PATH.
	Commands map[string]string
	// Env is added to every process, after the pod's own env.
	Env []string
	// LabelSelector restricts which unscheduled pods the executor takes.
	// Pods owned by a Job are taken when it is empty.
	LabelSelector string
	// Images maps an image reference to an OCI image archive: a container
	// of such an image runs from the image's root filesystem, as its user,
	// with its entrypoint and env, as a kubelet runs it (see
	// imageContainer); on a plane with a pod network, in a network
	// namespace of its own. The executor takes every pod of these images.
	Images map[string]string
	// HostDirs are bound at the same path into every container run from an
	// image: the "cloud" the example modules make instances in.
	HostDirs []string
}

// Executor plays the scheduler and the kubelet on the local Node for Job
// pods and pods of the images it has: it binds them, runs their container
// as a local process in a private mount namespace with the pod's env and
// volumes (the ServiceAccount token included, so RBAC is the real RBAC),
// restarts it as the pod's restartPolicy says, runs its probes, writes the
// pod's status, and stops the process when the pod is deleted.
type Executor struct {
	cp       *ControlPlane
	opts     ExecutorOptions
	selector labels.Selector
	dir      string
	lister   corelisters.PodLister
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	cancel   context.CancelFunc
	workers  sync.WaitGroup

	mu       sync.Mutex
	running  map[types.UID]*podProcess
	finished map[types.UID]bool // never run or rewrite these again, whatever a stale cache says
	runs     []PodRun
	images   map[string]*unpackedImage
	// sandboxes are the pods' network namespaces, by pod.
	sandboxes map[types.UID]*podSandbox
	// cutOff are pods whose node is cut off from the API server: closed
	// when it is back.
	cutOff     map[cache.ObjectName]chan struct{}
	cgroups    memoryCgroups
	cgroupsErr error // why containers get no memory limits
}

// unpackedImage is an image's root filesystem, unpacked once and shared
// read-only by its containers.
type unpackedImage struct {
	once   sync.Once
	rootfs string
	config *ImageConfig
	err    error
}

// StartExecutor starts an executor that runs until Stop or ctx ends.
func (cp *ControlPlane) StartExecutor(ctx context.Context, opts ExecutorOptions) (*Executor, error) {
	selector := labels.Everything()
	if opts.LabelSelector != "" {
		var err error
		if selector, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(cp.Dir, "pods")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(cp.Kube, 0)
	podInformer := factory.Core().V1().Pods()
	e := &Executor{
		cp: cp, opts: opts, selector: selector, dir: dir, cancel: cancel,
		lister:   podInformer.Lister(),
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]()),
		running:  map[types.UID]*podProcess{},
		finished: map[types.UID]bool{},
		cutOff:   map[cache.ObjectName]chan struct{}{},
		images:   map[string]*unpackedImage{},

		sandboxes: map[types.UID]*podSandbox{},
	}
	if e.cgroups, e.cgroupsErr = findMemoryCgroups(); e.cgroupsErr != nil {
		klog.FromContext(ctx).Info("Containers from images run without memory limits", "err", e.cgroupsErr)
	}
	enqueue := func(obj any) {
		if name, err := cache.DeletionHandlingObjectToName(obj); err == nil {
			e.queue.Add(name)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		cancel()
		return nil, errors.New("pod informer did not sync")
	}
	for range 4 {
		e.workers.Go(func() {
			for e.processNext(ctx) {
			}
		})
	}
	go func() {
		<-ctx.Done()
		e.queue.ShutDown()
		factory.Shutdown()
	}()
	cp.onStop(e.Stop)
	return e, nil
}

// Stop kills every process the executor runs and stops it.
func (e *Executor) Stop() {
	e.cancel()
	e.workers.Wait()
	e.mu.Lock()
	procs := slices.Collect(maps.Values(e.running))
	e.mu.Unlock()
	for _, p := range procs {
		e.mu.Lock()
		if p.cmd != nil {
			signalPod(p.cmd.Process.Pid, syscall.SIGKILL)
		}
		e.mu.Unlock()
		<-p.done
	}
}

// Logs returns what a pod's container wrote.
func (e *Executor) Logs(namespace, name string) (string, error) {
	matches, _ := filepath.Glob(filepath.Join(e.dir, namespace+"_"+name+"_*", "container.log"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no logs of pod %s/%s", namespace, name)
	}
	b, err := os.ReadFile(matches[len(matches)-1])
	return string(b), err
}

// Running is the number of pod processes running now.
// PodRun is one container run the executor finished: when its process
// started and ended, to the nanosecond (pod statuses keep seconds).
type PodRun struct {
	Namespace, Name   string
	Started, Finished time.Time
	ExitCode          int32
}

// Runs returns the container runs finished so far.
func (e *Executor) Runs() []PodRun {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.runs)
}

func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

func (e *Executor) processNext(ctx context.Context) bool {
	key, quit := e.queue.Get()
	if quit {
		return false
	}
	defer e.queue.Done(key)
	if err := e.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Executor sync failed", "pod", key)
			e.queue.AddRateLimited(key)
		}
		return true
	}
	e.queue.Forget(key)
	return true
}

func (e *Executor) sync(ctx context.Context, key cache.ObjectName) error {
	if e.isCutOff(key) {
		return nil // Heal syncs it again
	}
	pod, err := e.lister.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// Force-deleted: nothing waits for the process, kill it at once.
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.running {
			if p.key == key && p.cmd != nil {
				p.terminating = true
				signalPod(p.cmd.Process.Pid, syscall.SIGKILL)
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	e.mu.Lock()
	proc, finished := e.running[pod.UID], e.finished[pod.UID]
	e.mu.Unlock()

	switch {
	case pod.DeletionTimestamp != nil:
		if proc != nil {
			e.terminate(proc, pod)
			return nil
		}
		if pod.Spec.NodeName == NodeName {
			// Nothing runs (the pod may have waited for a volume): take its
			// network down and finish the deletion as a kubelet does.
			e.teardown(pod.UID)
			return ignoreNotFound(e.cp.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptrTo(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
		}
		return nil
	case pod.Spec.NodeName == "":
		if !e.takes(pod) {
			return nil
		}
		return ignoreNotFound(e.cp.Kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: NodeName},
		}, metav1.CreateOptions{}))
	case pod.Spec.NodeName != NodeName || proc != nil || finished:
		return nil
	case pod.Status.Phase == corev1.PodPending:
		return e.run(ctx, pod)
	case pod.Status.Phase == corev1.PodRunning:
		// Its process belonged to an executor that is gone.
		return e.finish(ctx, pod, nil, 137, "ExecutorRestarted", "the local executor that ran this pod stopped")
	}
	return nil
}

func (e *Executor) takes(pod *corev1.Pod) bool {
	if e.opts.LabelSelector != "" {
		return e.selector.Matches(labels.Set(pod.Labels))
	}
	if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "Job" {
		return true
	}
	_, ok := e.opts.Images[pod.Spec.Containers[0].Image]
	return ok
}

// setRunning reports the container running at ip, ready unless it has a
// readiness probe to pass first.
func (e *Executor) setRunning(ctx context.Context, pod *corev1.Pod, ip string, started metav1.Time, restarts int32) error {
	c := pod.Spec.Containers[0]
	ready := c.ReadinessProbe == nil
	return e.updateStatus(ctx, pod, func(status *corev1.PodStatus) {
		var last corev1.ContainerState
		if len(status.ContainerStatuses) == 1 {
			last = status.ContainerStatuses[0].LastTerminationState
		}
		status.Phase = corev1.PodRunning
		status.HostIP, status.PodIP = "127.0.0.1", ip
		status.HostIPs, status.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: ip}}
		if status.StartTime == nil {
			status.StartTime = &started
		}
		status.Conditions = podConditions(started, conditionStatus(ready))
		status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: ready, Started: ptrTo(c.StartupProbe == nil),
			ContainerID: "local://" + string(pod.UID), RestartCount: restarts, LastTerminationState: last,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}}
	})
}

// setReady reports the container's readiness probe's verdict.
func (e *Executor) setReady(ctx context.Context, pod *corev1.Pod, ready bool) error {
	return e.updateStatus(ctx, pod, func(status *corev1.PodStatus) {
		if status.Phase != corev1.PodRunning || len(status.ContainerStatuses) != 1 {
			return
		}
		now := metav1.Now()
		status.Conditions = podConditions(now, conditionStatus(ready))
		status.ContainerStatuses[0].Ready = ready
	})
}

func conditionStatus(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// finish writes the pod's terminal status.
func (e *Executor) finish(ctx context.Context, pod *corev1.Pod, started *metav1.Time, code int32, reason, message string) error {
	now := metav1.Now()
	if started == nil {
		started = &now
	}
	e.mu.Lock()
	e.finished[pod.UID] = true
	e.mu.Unlock()
	return e.updateStatus(ctx, pod, func(status *corev1.PodStatus) {
		if status.Phase == corev1.PodSucceeded || status.Phase == corev1.PodFailed {
			return
		}
		status.Phase = corev1.PodSucceeded
		if code != 0 {
			status.Phase = corev1.PodFailed
		}
		if status.StartTime == nil {
			status.StartTime = started
		}
		status.Conditions = podConditions(*started, corev1.ConditionFalse)
		c := pod.Spec.Containers[0]
		status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Started: ptrTo(false),
			ContainerID: "local://" + string(pod.UID),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: reason, Message: message,
				StartedAt: *started, FinishedAt: now, ContainerID: "local://" + string(pod.UID),
			}},
		}}
	})
}

func (e *Executor) updateStatus(ctx context.Context, pod *corev1.Pod, mutate func(*corev1.PodStatus)) error {
	pods := e.cp.Kube.CoreV1().Pods(pod.Namespace)
	return ignoreNotFound(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if current.UID != pod.UID {
			return apierrors.NewNotFound(corev1.Resource("pods"), pod.Name)
		}
		mutate(&current.Status)
		_, err = pods.UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	}))
}

func podConditions(at metav1.Time, ready corev1.ConditionStatus) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: at},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: at},
	}
}

func exitCode(cmd *exec.Cmd, err error) int32 {
	if err == nil {
		return 0
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return int32(128 + ws.Signal())
		}
		return int32(ws.ExitStatus())
	}
	return 1
}

func logTail(path string, lines, maxBytes int) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	out := strings.Join(all, "\n")
	if len(out) > maxBytes {
		out = out[len(out)-maxBytes:]
	}
	return []byte(out)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Signal sends sig to the main process of a running pod, as a kubelet or an
// OOM killer would.
func (e *Executor) Signal(namespace, name string, sig syscall.Signal) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.running {
		if p.key.Namespace == namespace && p.key.Name == name && p.cmd != nil {
			return p.cmd.Process.Signal(sig)
		}
	}
	return fmt.Errorf("pod %s/%s is not running here", namespace, name)
}

// SignalGroup sends sig to the process group of a running pod's main
// process, as an init that signals groups (tini -g) does: not to a
// process that made a group of its own.
func (e *Executor) SignalGroup(namespace, name string, sig syscall.Signal) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.running {
		if p.key.Namespace == namespace && p.key.Name == name && p.cmd != nil {
			return syscall.Kill(-p.cmd.Process.Pid, sig)
		}
	}
	return fmt.Errorf("pod %s/%s is not running here", namespace, name)
}

// SignalPod sends sig to every process of a running pod: the runner and
// the terraform it runs, as a stalled node or a frozen cgroup would.
func (e *Executor) SignalPod(namespace, name string, sig syscall.Signal) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.running {
		if p.key.Namespace == namespace && p.key.Name == name && p.cmd != nil {
			signalPod(p.cmd.Process.Pid, sig)
			return nil
		}
	}
	return fmt.Errorf("pod %s/%s is not running here", namespace, name)
}

// CutOff plays a network partition between the pod's node and the API
// server: its processes run on, but the executor neither sees the pod
// deleted nor reports its status (an exit included) until Heal.
func (e *Executor) CutOff(namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := cache.ObjectName{Namespace: namespace, Name: name}
	if e.cutOff[key] == nil {
		e.cutOff[key] = make(chan struct{})
	}
}

// Heal ends CutOff: the executor reports what happened meanwhile and acts
// on the pod as it now is (a deletion stops it).
func (e *Executor) Heal(namespace, name string) {
	key := cache.ObjectName{Namespace: namespace, Name: name}
	e.mu.Lock()
	if healed := e.cutOff[key]; healed != nil {
		close(healed)
		delete(e.cutOff, key)
	}
	e.mu.Unlock()
	e.queue.Add(key)
}

func (e *Executor) isCutOff(key cache.ObjectName) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cutOff[key] != nil
}

// waitHealed waits while the pod's node is cut off.
func (e *Executor) waitHealed(key cache.ObjectName) {
	e.mu.Lock()
	healed := e.cutOff[key]
	e.mu.Unlock()
	if healed != nil {
		<-healed
	}
}

// WaitExited waits until the container of a running pod has exited (its
// status may not be reported yet: see CutOff).
func (e *Executor) WaitExited(ctx context.Context, namespace, name string) error {
	var exited <-chan struct{}
	e.mu.Lock()
	for _, p := range e.running {
		if p.key.Namespace == namespace && p.key.Name == name {
			exited = p.exited
		}
	}
	e.mu.Unlock()
	if exited == nil {
		return fmt.Errorf("pod %s/%s is not running here", namespace, name)
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
