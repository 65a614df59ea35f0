package framework

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
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
	// with its entrypoint and env, as a kubelet runs it (see runImage).
	Images map[string]string
}

// Executor plays the kubelet for Job pods on the local Node: it binds them,
// runs their container as a local process in a private mount namespace with
// the pod's env and volumes (the ServiceAccount token included, so RBAC is
// the real RBAC), writes the pod's status, and stops the process when the
// pod is deleted.
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
	mounts   map[string]int     // host paths the executor created, by users
	images   map[string]*unpackedImage
}

// unpackedImage is an image's root filesystem, unpacked once and shared
// read-only by its containers.
type unpackedImage struct {
	once   sync.Once
	rootfs string
	config *ImageConfig
	err    error
}

type podProcess struct {
	key         cache.ObjectName
	cmd         *exec.Cmd
	done        chan struct{}
	terminating bool
	created     []string
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
		mounts:   map[string]int{},
		images:   map[string]*unpackedImage{},
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
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
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
	pod, err := e.lister.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		// Force-deleted: nothing waits for the process, kill it at once.
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.running {
			if p.key == key {
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
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
			// Nothing runs: finish the deletion as a kubelet does.
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
	owner := metav1.GetControllerOf(pod)
	return owner != nil && owner.Kind == "Job"
}

// run starts the pod's container.
func (e *Executor) run(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) > 0 {
		return e.finish(ctx, pod, nil, 1, "Unsupported", "the local executor runs pods with exactly one container and no init containers")
	}
	c := pod.Spec.Containers[0]
	podDir := filepath.Join(e.dir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, string(pod.UID)[:8]))
	volDirs, err := e.materialiseVolumes(ctx, pod, filepath.Join(podDir, "volumes"))
	if err != nil {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
	}
	if archive, ok := e.opts.Images[c.Image]; ok {
		return e.runImage(ctx, pod, c, archive, podDir, volDirs)
	}
	env, err := e.containerEnv(ctx, pod, c, podDir, nil)
	if err != nil {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
	}
	argv := expandAll(append(slices.Clone(c.Command), c.Args...), env)
	if len(c.Command) == 0 {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", "the local executor needs the container's command: it has no image entrypoints")
	}
	if local, ok := e.opts.Commands[argv[0]]; ok {
		argv[0] = local
	}

	// Mounts happen inside the process's private mount namespace: a shell
	// binds each volume at its mountPath, then execs the command.
	var script strings.Builder
	script.WriteString("set -e\n")
	// created are the mount targets this pod uses that the executor made
	// (for it or for another pod still running): a target goes when its last
	// user finishes, never under a running pod.
	var created []string
	var launched bool
	defer func() {
		if !launched {
			e.release(created)
		}
	}()
	target := func(path string, file bool) {
		e.mu.Lock()
		defer e.mu.Unlock()
		for p := path; p != "/"; p = filepath.Dir(p) {
			if e.mounts[p] == 0 {
				if _, err := os.Lstat(p); err == nil {
					break // not the executor's
				}
			}
			e.mounts[p]++
			created = append(created, p)
		}
		if file {
			fmt.Fprintf(&script, "mkdir -p %s; [ -e %s ] || : > %s\n", shellQuote(filepath.Dir(path)), shellQuote(path), shellQuote(path))
		} else {
			fmt.Fprintf(&script, "mkdir -p %s\n", shellQuote(path))
		}
	}
	for _, m := range c.VolumeMounts {
		src, dir, err := mountSource(volDirs, m)
		if err != nil {
			return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
		}
		target(m.MountPath, !dir)
		fmt.Fprintf(&script, "mount --bind %s %s\n", shellQuote(src), shellQuote(m.MountPath))
	}
	termFile := filepath.Join(podDir, "termination-log")
	if err := os.WriteFile(termFile, nil, 0o666); err != nil {
		return err
	}
	termPath := c.TerminationMessagePath
	if termPath == "" {
		termPath = corev1.TerminationMessagePathDefault
	}
	target(termPath, true)
	fmt.Fprintf(&script, "mount --bind %s %s\n", shellQuote(termFile), shellQuote(termPath))
	workDir := filepath.Join(podDir, "workdir")
	if c.WorkingDir != "" {
		target(c.WorkingDir, false)
		fmt.Fprintf(&script, "mkdir -p %s; mount --bind %s %s; cd %s\n", shellQuote(workDir), shellQuote(workDir), shellQuote(c.WorkingDir), shellQuote(c.WorkingDir))
	} else {
		fmt.Fprintf(&script, "mkdir -p %s; cd %s\n", shellQuote(workDir), shellQuote(workDir))
	}
	script.WriteString("exec \"$@\"\n")

	launched = true // launch releases the targets from here on
	return e.launch(ctx, pod, c, podDir, script.String(), argv, append(env, e.opts.Env...), created, termFile)
}

// launch starts script (run by /bin/sh in a private mount namespace, with
// argv as its arguments) as the pod's container, and reports its end in
// the pod's status; the mount targets in created are released then.
func (e *Executor) launch(ctx context.Context, pod *corev1.Pod, c corev1.Container, podDir, script string, argv, env, created []string, termFile string) error {
	logFile, err := os.Create(filepath.Join(podDir, "container.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, argv...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true, Pdeathsig: syscall.SIGKILL}

	if err := cmd.Start(); err != nil {
		logFile.Close()
		e.release(created)
		return e.finish(ctx, pod, nil, 128, "StartError", err.Error())
	}
	proc := &podProcess{key: cache.MetaObjectToName(pod), cmd: cmd, done: make(chan struct{}), created: created}
	e.mu.Lock()
	e.running[pod.UID] = proc
	e.mu.Unlock()
	started := metav1.Now()
	if err := e.setRunning(ctx, pod, started); err != nil {
		klog.FromContext(ctx).Error(err, "Setting pod running", "pod", klog.KObj(pod))
	}

	go func() {
		waitErr := cmd.Wait()
		logFile.Close()
		// The container is gone: so is every process it left behind.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		code := exitCode(cmd, waitErr)
		msg, _ := os.ReadFile(termFile)
		if len(msg) == 0 && code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			msg = logTail(filepath.Join(podDir, "container.log"), 80, 2048)
		}
		reason := "Completed"
		if code != 0 {
			reason = "Error"
		}
		fctx := context.WithoutCancel(ctx)
		if err := e.finish(fctx, pod, &started, code, reason, truncate(string(msg), 4096)); err != nil {
			klog.FromContext(ctx).Error(err, "Setting pod finished", "pod", klog.KObj(pod))
		}
		e.release(created)
		e.mu.Lock()
		terminating := proc.terminating
		delete(e.running, pod.UID)
		e.finished[pod.UID] = true
		e.mu.Unlock()
		close(proc.done)
		if terminating {
			_ = ignoreNotFound(e.cp.Kube.CoreV1().Pods(pod.Namespace).Delete(fctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: ptrTo(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
		}
	}()
	return nil
}

// runImage runs the container from its image, as a kubelet would: the
// image's root filesystem (unpacked once) under an overlay of the pod's own,
// mounted in the container's private mount namespace with the volumes
// bound into it and the device nodes a runtime gives; the process runs
// chrooted there (nsenter --root), in the working directory, as the pod's
// (else the image's) user, with the image's entrypoint, command and env
// unless the container sets them. Nothing is mounted on the host: the
// mounts go with the container's processes.
func (e *Executor) runImage(ctx context.Context, pod *corev1.Pod, c corev1.Container, archive, podDir string, volDirs map[string]string) error {
	img, err := e.image(archive)
	if err != nil {
		return e.finish(ctx, pod, nil, 1, "ErrImagePull", err.Error())
	}
	cfg := img.config
	env, err := e.containerEnv(ctx, pod, c, podDir, cfg.Env)
	if err != nil {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
	}
	argv := slices.Clone(c.Command)
	if len(argv) == 0 {
		argv = slices.Clone(cfg.Entrypoint)
	}
	if len(c.Command) > 0 || len(c.Args) > 0 {
		argv = append(argv, c.Args...)
	} else {
		argv = append(argv, cfg.Cmd...)
	}
	argv = expandAll(argv, env)
	if len(argv) == 0 {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", "neither the container nor its image has a command")
	}
	uid, gid, err := containerUser(pod, c, cfg.User)
	if err != nil {
		return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
	}
	// Volumes belong to the container's user, as a kubelet makes a pod's
	// token its user's and secrets its fsGroup's: a non-root container can
	// read them.
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			continue
		}
		if err := chownTree(volDirs[v.Name], int(uid), int(gid)); err != nil {
			return err
		}
	}
	root, upper, work := filepath.Join(podDir, "rootfs"), filepath.Join(podDir, "upper"), filepath.Join(podDir, "work")
	for _, d := range []string{root, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := MakeDevices(upper); err != nil {
		return err
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	fmt.Fprintf(&script, "mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s\n", img.rootfs, upper, work, shellQuote(root))
	bind := func(src, dst string, file bool) {
		in := shellQuote(filepath.Join(root, dst))
		if file {
			fmt.Fprintf(&script, "mkdir -p %s; [ -e %s ] || : > %s\n", shellQuote(filepath.Join(root, filepath.Dir(dst))), in, in)
		} else {
			fmt.Fprintf(&script, "mkdir -p %s\n", in)
		}
		fmt.Fprintf(&script, "mount --bind %s %s\n", shellQuote(src), in)
	}
	for _, m := range c.VolumeMounts {
		src, dir, err := mountSource(volDirs, m)
		if err != nil {
			return e.finish(ctx, pod, nil, 1, "CreateContainerConfigError", err.Error())
		}
		bind(src, m.MountPath, !dir)
	}
	termFile := filepath.Join(podDir, "termination-log")
	if err := os.WriteFile(termFile, nil, 0o666); err != nil {
		return err
	}
	if err := os.Chmod(termFile, 0o666); err != nil { // past the umask: any user writes it
		return err
	}
	termPath := cmp.Or(c.TerminationMessagePath, corev1.TerminationMessagePathDefault)
	bind(termFile, termPath, true)
	wd := filepath.Join(root, cmp.Or(c.WorkingDir, cfg.WorkingDir, "/"))
	fmt.Fprintf(&script, "mkdir -p %s\n", shellQuote(wd))
	fmt.Fprintf(&script, "exec nsenter --target $$ --mount --root=%s --wd=%s --setuid=%d --setgid=%d \"$@\"\n", shellQuote(root), shellQuote(wd), uid, gid)
	return e.launch(ctx, pod, c, podDir, script.String(), argv, env, nil, termFile)
}

// mountSource is the host path a volume mount binds, and whether it is a
// directory.
func mountSource(volDirs map[string]string, m corev1.VolumeMount) (string, bool, error) {
	src, ok := volDirs[m.Name]
	if !ok {
		return "", false, fmt.Errorf("volume %q is not defined", m.Name)
	}
	if m.SubPath != "" {
		src = filepath.Join(src, m.SubPath)
	}
	info, err := os.Stat(src)
	if err != nil {
		return "", false, err
	}
	return src, info.IsDir(), nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// image unpacks archive once.
func (e *Executor) image(archive string) (*unpackedImage, error) {
	e.mu.Lock()
	img, ok := e.images[archive]
	if !ok {
		img = &unpackedImage{rootfs: filepath.Join(e.dir, "images", strconv.Itoa(len(e.images)))}
		e.images[archive] = img
	}
	e.mu.Unlock()
	img.once.Do(func() {
		if img.err = os.MkdirAll(img.rootfs, 0o755); img.err == nil {
			img.config, img.err = UnpackImage(archive, img.rootfs)
		}
	})
	return img, img.err
}

// containerUser is the uid and gid the container runs as: the pod's or
// container's security context, else the image's numeric user.
func containerUser(pod *corev1.Pod, c corev1.Container, imageUser string) (int64, int64, error) {
	var uid, gid int64
	if u, g, ok := strings.Cut(imageUser, ":"); imageUser != "" {
		var err error
		if uid, err = strconv.ParseInt(u, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("image user %q is not numeric", imageUser)
		}
		gid = uid
		if ok {
			if gid, err = strconv.ParseInt(g, 10, 64); err != nil {
				return 0, 0, fmt.Errorf("image group %q is not numeric", imageUser)
			}
		}
	}
	for _, sc := range []*corev1.SecurityContext{{RunAsUser: podSC(pod).RunAsUser, RunAsGroup: podSC(pod).RunAsGroup}, c.SecurityContext} {
		if sc == nil {
			continue
		}
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return uid, gid, nil
}

func podSC(pod *corev1.Pod) *corev1.PodSecurityContext {
	if pod.Spec.SecurityContext == nil {
		return &corev1.PodSecurityContext{}
	}
	return pod.Spec.SecurityContext
}

// terminate sends SIGTERM to the container's main process, as a kubelet
// does, and SIGKILL to all of it after the grace period.
func (e *Executor) terminate(proc *podProcess, pod *corev1.Pod) {
	e.mu.Lock()
	if proc.terminating {
		e.mu.Unlock()
		return
	}
	proc.terminating = true
	e.mu.Unlock()
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	_ = proc.cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-proc.done:
		case <-time.After(time.Duration(grace) * time.Second):
			_ = syscall.Kill(-proc.cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
}

func (e *Executor) release(created []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range created {
		e.mounts[p]--
		if e.mounts[p] == 0 {
			delete(e.mounts, p)
			_ = os.Remove(p)
		}
	}
}

func (e *Executor) setRunning(ctx context.Context, pod *corev1.Pod, started metav1.Time) error {
	return e.updateStatus(ctx, pod, func(status *corev1.PodStatus) {
		status.Phase = corev1.PodRunning
		status.HostIP, status.PodIP = "127.0.0.1", "127.0.0.1"
		status.HostIPs, status.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
		status.StartTime = &started
		status.Conditions = podConditions(started, corev1.ConditionTrue)
		c := pod.Spec.Containers[0]
		status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptrTo(true),
			ContainerID: "local://" + string(pod.UID),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}}
	})
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

// materialiseVolumes writes each volume of the pod into dir and returns the
// directory (or, for hostPath, the host path) of each volume by name.
func (e *Executor) materialiseVolumes(ctx context.Context, pod *corev1.Pod, dir string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		vdir := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		out[v.Name] = vdir
		var err error
		switch {
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			out[v.Name] = v.HostPath.Path
		case v.Secret != nil:
			err = e.writeSecret(ctx, pod, vdir, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional)
		case v.ConfigMap != nil:
			err = e.writeConfigMap(ctx, pod, vdir, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional)
		case v.DownwardAPI != nil:
			err = writeDownwardAPI(pod, vdir, v.DownwardAPI.Items)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ServiceAccountToken != nil:
					err = e.writeToken(ctx, pod, vdir, s.ServiceAccountToken)
				case s.Secret != nil:
					err = e.writeSecret(ctx, pod, vdir, s.Secret.Name, s.Secret.Items, s.Secret.Optional)
				case s.ConfigMap != nil:
					err = e.writeConfigMap(ctx, pod, vdir, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional)
				case s.DownwardAPI != nil:
					err = writeDownwardAPI(pod, vdir, s.DownwardAPI.Items)
				default:
					err = fmt.Errorf("projected volume %q: unsupported source", v.Name)
				}
				if err != nil {
					break
				}
			}
		default:
			err = fmt.Errorf("volume %q: the local executor supports emptyDir, hostPath, secret, configMap, downwardAPI and projected volumes", v.Name)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (e *Executor) writeSecret(ctx context.Context, pod *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("secret %q: %w", name, err)
	}
	return writeKeys(dir, s.Data, items, 0o600)
}

func (e *Executor) writeConfigMap(ctx context.Context, pod *corev1.Pod, dir, name string, items []corev1.KeyToPath, optional *bool) error {
	cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	maps.Copy(data, cm.BinaryData)
	return writeKeys(dir, data, items, 0o644)
}

func writeKeys(dir string, data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode) error {
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %q not found", it.Key)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, v, mode); err != nil {
			return err
		}
	}
	return nil
}

func writeDownwardAPI(pod *corev1.Pod, dir string, items []corev1.DownwardAPIVolumeFile) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downwardAPI %q: only fieldRef is supported", it.Path)
		}
		v, err := fieldValue(pod, it.FieldRef.FieldPath)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeToken asks for a token of the pod's ServiceAccount, bound to the pod,
// as the kubelet does.
func (e *Executor) writeToken(ctx context.Context, pod *corev1.Pod, dir string, src *corev1.ServiceAccountTokenProjection) error {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		req.Spec.Audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := e.cp.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of serviceaccount %q: %w", sa, err)
	}
	return os.WriteFile(filepath.Join(dir, src.Path), []byte(tr.Status.Token), 0o600)
}

// containerEnv resolves the container's env as a kubelet does, plus the
// in-cluster service variables pointing at the local API server.
// containerEnv is the container's environment: the executor's defaults,
// then the image's (imageEnv), then the pod's.
func (e *Executor) containerEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container, podDir string, imageEnv []string) ([]string, error) {
	home := filepath.Join(podDir, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	port := strconv.Itoa(e.cp.APIServerPort)
	vars := map[string]string{
		"PATH": os.Getenv("PATH"), "HOME": home, "HOSTNAME": pod.Name,
		"KUBERNETES_SERVICE_HOST": e.cp.APIServerHost, "KUBERNETES_SERVICE_PORT": port,
		"KUBERNETES_SERVICE_PORT_HTTPS": port, "KUBERNETES_PORT": "tcp://" + e.cp.APIServerHost + ":" + port,
	}
	order := slices.Sorted(maps.Keys(vars))
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	for _, from := range c.EnvFrom {
		data := map[string]string{}
		switch {
		case from.SecretRef != nil:
			s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && from.SecretRef.Optional != nil && *from.SecretRef.Optional) {
				return nil, fmt.Errorf("envFrom secret %q: %w", from.SecretRef.Name, err)
			}
			if s != nil {
				for k, v := range s.Data {
					data[k] = string(v)
				}
			}
		case from.ConfigMapRef != nil:
			cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil && !(apierrors.IsNotFound(err) && from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional) {
				return nil, fmt.Errorf("envFrom configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			if cm != nil {
				data = cm.Data
			}
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			set(from.Prefix+k, data[k])
		}
	}
	for _, ev := range c.Env {
		v, err := e.envValue(ctx, pod, ev, vars)
		if err != nil {
			return nil, err
		}
		set(ev.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func (e *Executor) envValue(ctx context.Context, pod *corev1.Pod, ev corev1.EnvVar, vars map[string]string) (string, error) {
	if ev.ValueFrom == nil {
		return expand(ev.Value, vars), nil
	}
	src := ev.ValueFrom
	switch {
	case src.FieldRef != nil:
		return fieldValue(pod, src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		s, err := e.cp.Kube.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretKeyRef.Name, metav1.GetOptions{})
		optional := src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", nil
			}
			return "", fmt.Errorf("env %s: secret %q: %w", ev.Name, src.SecretKeyRef.Name, err)
		}
		v, ok := s.Data[src.SecretKeyRef.Key]
		if !ok && !optional {
			return "", fmt.Errorf("env %s: key %q not in secret %q", ev.Name, src.SecretKeyRef.Key, src.SecretKeyRef.Name)
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		cm, err := e.cp.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMapKeyRef.Name, metav1.GetOptions{})
		optional := src.ConfigMapKeyRef.Optional != nil && *src.ConfigMapKeyRef.Optional
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", nil
			}
			return "", fmt.Errorf("env %s: configmap %q: %w", ev.Name, src.ConfigMapKeyRef.Name, err)
		}
		v, ok := cm.Data[src.ConfigMapKeyRef.Key]
		if !ok && !optional {
			return "", fmt.Errorf("env %s: key %q not in configmap %q", ev.Name, src.ConfigMapKeyRef.Key, src.ConfigMapKeyRef.Name)
		}
		return v, nil
	}
	return "", fmt.Errorf("env %s: unsupported valueFrom", ev.Name)
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.podIP":
		return "127.0.0.1", nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']")], nil
		}
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the local executor", path)
}

// expand replaces $(VAR) references as the kubelet does; $$ escapes.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func expandAll(args, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	for i, a := range args {
		args[i] = expand(a, vars)
	}
	return args
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
		if p.key.Namespace == namespace && p.key.Name == name {
			return p.cmd.Process.Signal(sig)
		}
	}
	return fmt.Errorf("pod %s/%s is not running here", namespace, name)
}

// SignalGroup sends sig to a running pod's whole process group: the runner
// and the terraform it runs, as a stalled node or a frozen cgroup would.
func (e *Executor) SignalGroup(namespace, name string, sig syscall.Signal) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.running {
		if p.key.Namespace == namespace && p.key.Name == name {
			return syscall.Kill(-p.cmd.Process.Pid, sig)
		}
	}
	return fmt.Errorf("pod %s/%s is not running here", namespace, name)
}
