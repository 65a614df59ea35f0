package framework

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// podProcess is a pod the executor runs: its directory, volumes and
// network, which outlive a container restart, and its container's
// current process.
type podProcess struct {
	key     cache.ObjectName
	pod     *corev1.Pod // as it was when it started
	dir     string
	volumes map[string]string
	sandbox *podSandbox // nil: the host's network

	// Under the executor's lock.
	cmd         *exec.Cmd     // nil between two runs of a restarting container
	exited      chan struct{} // closed when cmd has exited
	terminating bool
	restarts    int32
	done        chan struct{} // closed when the pod has finished for good
}

// container is one run of the pod's container: a shell script that makes
// its mounts in a private mount namespace and then execs argv.
type container struct {
	script   string
	argv     []string
	env      []string
	termFile string
	cgroup   string // its memory cgroup, if it has a memory limit
}

// configError is a container the executor cannot start as specified.
type configError struct{ reason, message string }

func (c *configError) Error() string { return c.reason + ": " + c.message }

// run sets up the pod (network, volumes) and starts its container.
func (e *Executor) run(ctx context.Context, pod *corev1.Pod) error {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) > 0 {
		return e.finish(ctx, pod, nil, 1, "Unsupported", "the local executor runs pods with exactly one container and no init containers")
	}
	proc := &podProcess{key: cache.MetaObjectToName(pod), pod: pod, done: make(chan struct{}),
		dir: filepath.Join(e.dir, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, string(pod.UID)[:8]))}
	_, fromImage := e.opts.Images[pod.Spec.Containers[0].Image]
	if fromImage && e.cp.network != nil && !pod.Spec.HostNetwork {
		var err error
		if proc.sandbox, err = e.sandbox(pod); err != nil {
			return err // retried, as a kubelet retries a failed sandbox
		}
	}
	volumes, err := e.materialiseVolumes(ctx, pod, proc.podIP(), filepath.Join(proc.dir, "volumes"))
	var cfgErr *configError
	if errors.As(err, &cfgErr) {
		e.teardown(proc.pod.UID)
		return e.finish(ctx, pod, nil, 1, cfgErr.reason, cfgErr.message)
	}
	if err != nil {
		// A kubelet waits for a volume's Secret or ConfigMap that is not
		// there yet (a certificate cert-manager has not issued, the
		// kube-root-ca.crt of a namespace just made): so does the executor.
		return e.waiting(ctx, pod, proc, "ContainerCreating", err.Error(), err)
	}
	proc.volumes = volumes
	e.mu.Lock()
	e.running[pod.UID] = proc
	e.mu.Unlock()
	go e.refreshSecrets(ctx, proc)
	return e.start(ctx, proc)
}

// podIP is the pod's address: its own, or the host's.
func (p *podProcess) podIP() string {
	if p.sandbox != nil {
		return p.sandbox.IP
	}
	return "127.0.0.1"
}

// start starts (or restarts) the pod's container.
func (e *Executor) start(ctx context.Context, proc *podProcess) error {
	pod := proc.pod
	var c *container
	var err error
	if archive, ok := e.opts.Images[pod.Spec.Containers[0].Image]; ok {
		c, err = e.imageContainer(ctx, proc, archive)
	} else {
		c, err = e.processContainer(ctx, proc)
	}
	var cfgErr *configError
	if errors.As(err, &cfgErr) {
		e.finishPod(ctx, proc, nil, 1, cfgErr.reason, cfgErr.message)
		return nil
	}
	if err != nil {
		e.finishPod(ctx, proc, nil, 128, "StartError", err.Error())
		return err
	}
	return e.launch(ctx, proc, c)
}

// processContainer runs the container's command as a local process: the
// command mapped by ExecutorOptions.Commands, with the pod's volumes bound
// at their mount paths.
func (e *Executor) processContainer(ctx context.Context, proc *podProcess) (*container, error) {
	pod, c := proc.pod, proc.pod.Spec.Containers[0]
	env, err := e.containerEnv(ctx, pod, c, proc, nil)
	if err != nil {
		return nil, &configError{"CreateContainerConfigError", err.Error()}
	}
	if len(c.Command) == 0 {
		return nil, &configError{"CreateContainerConfigError", "the local executor needs the container's command: it has no image entrypoints"}
	}
	argv := expandAll(append(slices.Clone(c.Command), c.Args...), env)
	if local, ok := e.opts.Commands[argv[0]]; ok {
		argv[0] = local
	}

	// Mounts happen inside the process's private mount namespace: a shell
	// binds each volume at its mountPath, then execs the command.
	var script strings.Builder
	script.WriteString(scriptStart(pod))
	// A mount target the executor makes on the host (/workspace, the
	// token's directory) stays: another test package's executor may have a
	// pod running on it, and removing a directory another mount namespace
	// has a mount on detaches that mount ("getwd: no such file or
	// directory" in the middle of a run).
	target := func(path string, file bool) {
		if file {
			fmt.Fprintf(&script, "mkdir -p %s; [ -e %s ] || : > %s\n", shellQuote(filepath.Dir(path)), shellQuote(path), shellQuote(path))
		} else {
			fmt.Fprintf(&script, "mkdir -p %s\n", shellQuote(path))
		}
	}
	for _, m := range c.VolumeMounts {
		src, dir, err := mountSource(proc.volumes, m)
		if err != nil {
			return nil, &configError{"CreateContainerConfigError", err.Error()}
		}
		target(m.MountPath, !dir)
		fmt.Fprintf(&script, "mount --bind %s %s\n", shellQuote(src), shellQuote(m.MountPath))
		if m.ReadOnly {
			fmt.Fprintf(&script, "mount -o remount,bind,ro %s\n", shellQuote(m.MountPath))
		}
	}
	termFile, err := terminationFile(proc.dir)
	if err != nil {
		return nil, err
	}
	termPath := cmp.Or(c.TerminationMessagePath, corev1.TerminationMessagePathDefault)
	target(termPath, true)
	fmt.Fprintf(&script, "mount --bind %s %s\n", shellQuote(termFile), shellQuote(termPath))
	workDir := filepath.Join(proc.dir, "workdir")
	if c.WorkingDir != "" {
		target(c.WorkingDir, false)
		fmt.Fprintf(&script, "mkdir -p %s; mount --bind %s %s; cd %s\n", shellQuote(workDir), shellQuote(workDir), shellQuote(c.WorkingDir), shellQuote(c.WorkingDir))
	} else {
		fmt.Fprintf(&script, "mkdir -p %s; cd %s\n", shellQuote(workDir), shellQuote(workDir))
	}
	script.WriteString("exec \"$@\"\n")
	return &container{script: script.String(), argv: argv, env: append(env, e.opts.Env...), termFile: termFile}, nil
}

// imageContainer runs the container from its image, as a kubelet would:
// the image's root filesystem (unpacked once) under an overlay of the
// pod's own, mounted in the container's private mount namespace with the
// volumes bound into it and the device nodes a runtime gives; the process
// runs chrooted there (nsenter --root), in the pod's network namespace if
// it has one, in the working directory, as the pod's (else the image's)
// user, with the image's entrypoint, command and env unless the container
// sets them. Nothing is mounted on the host: the mounts go with the
// container's processes.
func (e *Executor) imageContainer(ctx context.Context, proc *podProcess, archive string) (*container, error) {
	pod, c := proc.pod, proc.pod.Spec.Containers[0]
	img, err := e.image(archive)
	if err != nil {
		return nil, &configError{"ErrImagePull", err.Error()}
	}
	cfg := img.config
	env, err := e.containerEnv(ctx, pod, c, proc, cfg.Env)
	if err != nil {
		return nil, &configError{"CreateContainerConfigError", err.Error()}
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
		return nil, &configError{"CreateContainerConfigError", "neither the container nor its image has a command"}
	}
	uid, gid, err := containerUser(pod, c, cfg.User)
	if err != nil {
		return nil, &configError{"CreateContainerConfigError", err.Error()}
	}
	if uid == 0 && runAsNonRoot(pod, c) {
		return nil, &configError{"CreateContainerConfigError", "container has runAsNonRoot and image will run as root"}
	}
	// Volumes belong to the container's user, as a kubelet makes a pod's
	// token its user's and secrets its fsGroup's: a non-root container can
	// read them.
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || v.Image != nil { // an image volume is as the image has it, shared
			continue
		}
		if err := chownTree(proc.volumes[v.Name], int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	root, upper, work := filepath.Join(proc.dir, "rootfs"), filepath.Join(proc.dir, "upper"), filepath.Join(proc.dir, "work")
	for _, d := range []string{root, upper, work, filepath.Join(upper, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := MakeDevices(upper); err != nil {
		return nil, err
	}
	if proc.sandbox != nil {
		// The runtime's /etc/hosts, with the Services' names (no cluster DNS here).
		if err := e.cp.services.writeHosts(filepath.Join(upper, "etc", "hosts"), pod, proc.sandbox.IP); err != nil {
			return nil, err
		}
	}
	var script strings.Builder
	script.WriteString(scriptStart(pod))
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
		src, dir, err := mountSource(proc.volumes, m)
		if err != nil {
			return nil, &configError{"CreateContainerConfigError", err.Error()}
		}
		bind(src, m.MountPath, !dir)
		if m.ReadOnly {
			fmt.Fprintf(&script, "mount -o remount,bind,ro %s\n", shellQuote(filepath.Join(root, m.MountPath)))
		}
	}
	for _, d := range e.opts.HostDirs {
		bind(d, d, false)
	}
	var cgroup string
	if limit := c.Resources.Limits.Memory(); !limit.IsZero() && e.cgroups.base != "" {
		if cgroup, err = e.cgroups.create(fmt.Sprintf("captf-%s-%d", pod.UID, time.Now().UnixNano()), limit.Value()); err != nil {
			return nil, err
		}
		// From here on the kernel counts the container's memory.
		fmt.Fprintf(&script, "echo $$ > %s || exit 125\n", shellQuote(filepath.Join(cgroup, "cgroup.procs")))
		bind(cgroup, cgroupMountPoint, false)
	}
	termFile, err := terminationFile(proc.dir)
	if err != nil {
		e.cgroups.remove(cgroup)
		return nil, err
	}
	bind(termFile, cmp.Or(c.TerminationMessagePath, corev1.TerminationMessagePathDefault), true)
	wd := filepath.Join(root, cmp.Or(c.WorkingDir, cfg.WorkingDir, "/"))
	fmt.Fprintf(&script, "mkdir -p %s\n", shellQuote(wd))
	net := ""
	if proc.sandbox != nil {
		net = "--net=" + shellQuote(proc.sandbox.NetNS)
	}
	fmt.Fprintf(&script, "exec nsenter --target $$ --mount %s --root=%s --wd=%s --setuid=%d --setgid=%d \"$@\"\n", net, shellQuote(root), shellQuote(wd), uid, gid)
	return &container{script: script.String(), argv: argv, env: env, termFile: termFile, cgroup: cgroup}, nil
}

// scriptStart begins a container's script: the pod's hostname, in the
// container's own UTS namespace, as a kubelet sets it.
func scriptStart(pod *corev1.Pod) string {
	return fmt.Sprintf("set -e\nhostname %s\n", shellQuote(strings.TrimRight(truncate(pod.Name, 63), "-.")))
}

// terminationFile is a fresh, empty file any user may write, bound at the
// container's terminationMessagePath.
func terminationFile(podDir string) (string, error) {
	f := filepath.Join(podDir, "termination-log")
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(f, nil, 0o666); err != nil {
		return "", err
	}
	return f, os.Chmod(f, 0o666) // past the umask
}

// launch starts c (script run by /bin/sh in a private mount namespace, with
// argv as its arguments) as the pod's container. When it ends, a container
// the pod's restartPolicy restarts starts again after a back-off, as a
// kubelet's does; otherwise the pod finishes.
func (e *Executor) launch(ctx context.Context, proc *podProcess, c *container) error {
	pod, spec := proc.pod, proc.pod.Spec.Containers[0]
	logFile, err := os.OpenFile(filepath.Join(proc.dir, "container.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.cgroups.remove(c.cgroup)
		return err
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", c.script, "sh"}, c.argv...)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS, Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		e.cgroups.remove(c.cgroup)
		e.finishPod(ctx, proc, nil, 128, "StartError", err.Error())
		return nil
	}
	exited := make(chan struct{})
	e.mu.Lock()
	proc.cmd, proc.exited = cmd, exited
	count := proc.restarts
	e.mu.Unlock()
	started := metav1.Now()
	if err := e.setRunning(ctx, pod, proc.podIP(), started, count); err != nil {
		klog.FromContext(ctx).Error(err, "Setting pod running", "pod", klog.KObj(pod))
	}
	e.probe(ctx, proc, cmd, exited)

	go func() {
		waitErr := cmd.Wait()
		close(exited)
		logFile.Close()
		// The container is gone: so is every process it left behind.
		signalPod(cmd.Process.Pid, syscall.SIGKILL)
		oomKilled := e.cgroups.oomKilled(c.cgroup)
		go e.cgroups.remove(c.cgroup)
		code := exitCode(cmd, waitErr)
		msg, _ := os.ReadFile(c.termFile)
		if len(msg) == 0 && code != 0 && spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			msg = logTail(filepath.Join(proc.dir, "container.log"), 80, 2048)
		}
		reason := "Completed"
		switch {
		case oomKilled:
			reason = "OOMKilled"
		case code != 0:
			reason = "Error"
		}
		last := &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: truncate(string(msg), 4096),
			StartedAt: started, FinishedAt: metav1.Now(), ContainerID: "local://" + string(pod.UID)}
		fctx := context.WithoutCancel(ctx)
		e.mu.Lock()
		proc.cmd = nil
		restart := !proc.terminating && ctx.Err() == nil && restarts(pod, code)
		if restart {
			proc.restarts++
		}
		n := proc.restarts
		e.mu.Unlock()
		if !restart {
			e.finishPod(fctx, proc, &started, code, reason, last.Message)
			return
		}
		backoff := min(10*time.Second<<min(n-1, 5), 5*time.Minute)
		if err := e.waiting(fctx, pod, proc, "CrashLoopBackOff", fmt.Sprintf("back-off %s restarting the failed container", backoff), nil, last); err != nil {
			klog.FromContext(ctx).Error(err, "Setting pod waiting", "pod", klog.KObj(pod))
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		e.mu.Lock()
		stop := proc.terminating || ctx.Err() != nil
		e.mu.Unlock()
		if stop {
			e.finishPod(fctx, proc, &started, code, reason, last.Message)
			return
		}
		if err := e.start(ctx, proc); err != nil {
			klog.FromContext(ctx).Error(err, "Restarting container", "pod", klog.KObj(pod))
		}
	}()
	return nil
}

// restarts says whether the pod's restartPolicy restarts a container that
// exited with code.
func restarts(pod *corev1.Pod, code int32) bool {
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// waiting reports the container waiting (to be created, or to restart after
// last ended) and returns err.
func (e *Executor) waiting(ctx context.Context, pod *corev1.Pod, proc *podProcess, reason, message string, err error, last ...*corev1.ContainerStateTerminated) error {
	e.mu.Lock()
	n := proc.restarts
	e.mu.Unlock()
	c := pod.Spec.Containers[0]
	updateErr := e.updateStatus(ctx, pod, func(status *corev1.PodStatus) {
		now := metav1.Now()
		status.Phase = cmp.Or(status.Phase, corev1.PodPending)
		status.Conditions = podConditions(now, corev1.ConditionFalse)
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, RestartCount: n, Started: ptrTo(false),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: truncate(message, 1024)}}}
		if len(last) > 0 {
			cs.LastTerminationState = corev1.ContainerState{Terminated: last[0]}
		}
		status.ContainerStatuses = []corev1.ContainerStatus{cs}
	})
	return cmp.Or(err, updateErr)
}

// finishPod writes the pod's terminal status, takes its network down, and
// finishes a deletion that waited for the container.
func (e *Executor) finishPod(ctx context.Context, proc *podProcess, started *metav1.Time, code int32, reason, message string) {
	pod, ended := proc.pod, time.Now()
	e.waitHealed(proc.key)
	if err := e.finish(ctx, pod, started, code, reason, message); err != nil {
		klog.FromContext(ctx).Error(err, "Setting pod finished", "pod", klog.KObj(pod))
	}
	e.teardown(proc.pod.UID)
	e.mu.Lock()
	if started != nil {
		e.runs = append(e.runs, PodRun{Namespace: pod.Namespace, Name: pod.Name, Started: started.Time, Finished: ended, ExitCode: code})
	}
	terminating := proc.terminating
	if e.running[pod.UID] == proc {
		delete(e.running, pod.UID)
	}
	e.finished[pod.UID] = true
	select {
	case <-proc.done:
	default:
		close(proc.done)
	}
	e.mu.Unlock()
	if terminating {
		_ = ignoreNotFound(e.cp.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrTo(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}}))
	}
}

// sandbox is the pod's network namespace, made once per pod: it outlives
// failed attempts to start the pod and its container's restarts.
func (e *Executor) sandbox(pod *corev1.Pod) (*podSandbox, error) {
	e.mu.Lock()
	sb := e.sandboxes[pod.UID]
	e.mu.Unlock()
	if sb != nil {
		return sb, nil
	}
	sb, err := e.cp.network.attach(string(pod.UID))
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.sandboxes[pod.UID] = sb
	e.mu.Unlock()
	return sb, nil
}

// teardown takes a pod's network down, if it has one.
func (e *Executor) teardown(uid types.UID) {
	e.mu.Lock()
	sb := e.sandboxes[uid]
	delete(e.sandboxes, uid)
	e.mu.Unlock()
	if sb != nil {
		e.cp.network.detach(sb)
	}
}

// terminate stops the pod's container as a kubelet does when its pod is
// deleted: SIGTERM to its main process, SIGKILL to all of it after the
// grace period; a container waiting to restart is not started again.
func (e *Executor) terminate(proc *podProcess, pod *corev1.Pod) {
	e.mu.Lock()
	if proc.terminating {
		e.mu.Unlock()
		return
	}
	proc.terminating = true
	cmd, exited := proc.cmd, proc.exited
	e.mu.Unlock()
	if cmd == nil {
		go e.finishPod(context.Background(), proc, nil, 0, "Completed", "")
		return
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	// A preStop sleep runs first, within the grace period, as a kubelet
	// runs it: the pod serves on while it leaves its Services' endpoints.
	c := pod.Spec.Containers[0]
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil && grace > 0 {
		pause := min(c.Lifecycle.PreStop.Sleep.Seconds, grace)
		go func() {
			select {
			case <-exited:
				return
			case <-time.After(time.Duration(pause) * time.Second):
			}
			stopProcess(cmd, exited, time.Duration(grace-pause)*time.Second)
		}()
		return
	}
	stopProcess(cmd, exited, time.Duration(grace)*time.Second)
}

// stopProcess sends SIGTERM to cmd's main process and SIGKILL to its
// process group after grace, unless it has exited by then.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-exited:
		case <-time.After(grace):
			signalPod(cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
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

func runAsNonRoot(pod *corev1.Pod, c corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return podSC(pod).RunAsNonRoot != nil && *podSC(pod).RunAsNonRoot
}

func podSC(pod *corev1.Pod) *corev1.PodSecurityContext {
	if pod.Spec.SecurityContext == nil {
		return &corev1.PodSecurityContext{}
	}
	return pod.Spec.SecurityContext
}
