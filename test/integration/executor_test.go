package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/test/framework"
)

var (
	executorOnce sync.Once
	executor     *framework.Executor
	executorErr  error
)

// startExecutor starts the package's executor once; it runs until the plane
// stops (TestMain checks that no process outlives the run).
func startExecutor(t *testing.T) *framework.Executor {
	t.Helper()
	executorOnce.Do(func() {
		var images map[string]string
		if images, executorErr = framework.ImageArchives(); executorErr != nil {
			return
		}
		executor, executorErr = plane.StartExecutor(context.Background(), framework.ExecutorOptions{Images: images})
	})
	if executorErr != nil {
		t.Fatal(executorErr)
	}
	return executor
}

// newJobNamespace makes a namespace with a ServiceAccount "runner" that may
// read ConfigMaps and nothing else.
func newJobNamespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	ns := newNamespace(t)
	if _, err := plane.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read-configmaps"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "runner", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func shellJob(name, script string, mutate ...func(*batchv1.Job)) *batchv1.Job {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy:      corev1.RestartPolicyNever,
				ServiceAccountName: "runner",
				Containers: []corev1.Container{{
					Name: "main", Image: "local", Command: []string{"/bin/sh", "-c", script},
					TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				}},
			}},
		},
	}
	for _, m := range mutate {
		m(job)
	}
	return job
}

// waitJobFinished waits until the Job completes or fails.
func waitJobFinished(t *testing.T, ns, name string, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if job, err = plane.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		return job.Status.Succeeded+job.Status.Failed > 0, nil
	})
	if err != nil {
		t.Fatalf("Job %s did not finish: %v", name, err)
	}
	return job
}

// waitJob waits until the Job has a condition of the given type set to True.
func waitJob(t *testing.T, ns, name string, condition batchv1.JobConditionType, timeout time.Duration) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if job, err = plane.Kube.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		for _, c := range job.Status.Conditions {
			if c.Type == condition && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Job %s never got %s: %v; status %+v", name, condition, err, job.Status)
	}
	return job
}

func jobPod(t *testing.T, ns, job string) *corev1.Pod {
	t.Helper()
	pods, err := plane.Kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("Job %s has %d pods, want 1", job, len(pods.Items))
	}
	return &pods.Items[0]
}

func TestExecutorJobCompletes(t *testing.T) {
	ex := startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"password": "s3cret", "file.txt": "from a secret volume"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"},
		Data: map[string]string{"REGION": "eu-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := `set -e
echo "password=$PASSWORD region=$REGION pod=$POD_NAME"
cat /etc/creds/file.txt; echo
test -s /var/run/secrets/kubernetes.io/serviceaccount/token
echo -n done > /dev/termination-log`
	job := shellJob("ok", script, func(j *batchv1.Job) {
		c := &j.Spec.Template.Spec.Containers[0]
		c.Env = []corev1.EnvVar{
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}
		c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds", ReadOnly: true}}
		j.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	})
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "ok", batchv1.JobComplete, time.Minute)
	pod := jobPod(t, ns, "ok")
	if pod.Status.Phase != corev1.PodSucceeded || pod.Spec.NodeName != framework.NodeName {
		t.Errorf("pod phase %s on node %q, want Succeeded on %q", pod.Status.Phase, pod.Spec.NodeName, framework.NodeName)
	}
	if term := pod.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Message != "done" {
		t.Errorf("terminated state = %+v, want exit 0 and message done", term)
	}
	logs, err := ex.Logs(ns, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"password=s3cret region=eu-1 pod=" + pod.Name, "from a secret volume"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs %q do not contain %q", logs, want)
		}
	}
}

// TestExecutorSharedWorkingDir: two pods with the same working directory,
// one the executor made for the first: the first finishing leaves it to the
// second, still running (it once removed it: "chdir: no such file").
func TestExecutorSharedWorkingDir(t *testing.T) {
	startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	dir := fmt.Sprintf("/tmp/captf-shared-%d/workspace", time.Now().UnixNano())
	withDir := func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].WorkingDir = dir }
	// The second starts once the first runs, and outlives it.
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, shellJob("first", "sleep 3", withDir), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=first"})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("the first pod never ran: %v", err)
	}
	script := fmt.Sprintf("sleep 5; cd %s && echo still-here > file && cat file", dir)
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, shellJob("second", script, withDir), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "first", batchv1.JobComplete, time.Minute)
	var second *batchv1.Job
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		second, err = plane.Kube.BatchV1().Jobs(ns).Get(ctx, "second", metav1.GetOptions{})
		return err == nil && (second.Status.Succeeded > 0 || second.Status.Failed > 0), nil
	}); err != nil {
		t.Fatalf("the second Job never finished: %v", err)
	}
	if second.Status.Succeeded == 0 {
		t.Fatalf("the second pod lost its working directory when the first finished: %+v", jobPod(t, ns, "second").Status.ContainerStatuses)
	}
}

func TestExecutorJobFails(t *testing.T) {
	startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, shellJob("fail", "echo something broke >&2; exit 3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "fail", batchv1.JobFailed, time.Minute)
	term := jobPod(t, ns, "fail").Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 3 || !strings.Contains(term.Message, "something broke") {
		t.Errorf("terminated state = %+v, want exit code 3 and the log tail as message", term)
	}
}

func TestExecutorDeadlineKills(t *testing.T) {
	ex := startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	job := shellJob("slow", "trap 'echo got SIGTERM; exit 143' TERM; sleep 300 & wait", func(j *batchv1.Job) {
		j.Spec.ActiveDeadlineSeconds = ptr(int64(3))
		j.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(5))
	})
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failed := waitJob(t, ns, "slow", batchv1.JobFailed, time.Minute)
	var reason string
	for _, c := range failed.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			reason = c.Reason
		}
	}
	if reason != batchv1.JobReasonDeadlineExceeded {
		t.Errorf("Job failed with reason %q, want %q", reason, batchv1.JobReasonDeadlineExceeded)
	}
	// The pod is deleted by the Job controller; its process got SIGTERM and
	// the pod object goes once it stopped.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := plane.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=slow"})
		return err == nil && len(pods.Items) == 0, err
	})
	if err != nil {
		t.Fatalf("the deadline-killed pod is still there: %v", err)
	}
	if ex.Running() != 0 {
		t.Errorf("%d processes still run after the deadline", ex.Running())
	}
}

func TestExecutorJobDeletionCollectsPods(t *testing.T) {
	startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, shellJob("gc", "exit 0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "gc", batchv1.JobComplete, time.Minute)
	podName := jobPod(t, ns, "gc").Name
	if err := plane.Kube.BatchV1().Jobs(ns).Delete(ctx, "gc", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Kube.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the garbage collector never removed pod %s of the deleted Job", podName)
	}
}

// TestExecutorTokenIsRBACChecked runs a pod that calls the API server with
// its ServiceAccount token: reading ConfigMaps is allowed, Secrets are not.
func TestExecutorTokenIsRBACChecked(t *testing.T) {
	ex := startExecutor(t)
	ctx := context.Background()
	ns := newJobNamespace(t)
	script := fmt.Sprintf(`sa=/var/run/secrets/kubernetes.io/serviceaccount
call() { curl -s -o /dev/null -w '%%{http_code}' --cacert $sa/ca.crt -H "Authorization: Bearer $(cat $sa/token)" "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $sa/namespace)/$1"; }
echo "configmaps=$(call configmaps) secrets=$(call secrets)"
test "$(cat $sa/namespace)" = %q`, ns)
	if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, shellJob("rbac", script), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitJob(t, ns, "rbac", batchv1.JobComplete, time.Minute)
	logs, err := ex.Logs(ns, jobPod(t, ns, "rbac").Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "configmaps=200 secrets=403") {
		t.Errorf("pod saw %q, want configmaps=200 secrets=403", logs)
	}
}

func ptr[T any](v T) *T { return &v }

// TestExecutorRunsImages: a Job of the runner image runs from the image as
// a kubelet runs it: its filesystem, its user (not root: /etc is not
// writable), its env (HOME), volumes and the token at their paths, the
// working directory, tofu and git from the image; a container without a
// command runs the image's entrypoint. Nothing is mounted on the host.
func TestExecutorRunsImages(t *testing.T) {
	ex := startExecutor(t)
	ctx := context.Background()
	runner, err := framework.RunnerImage()
	if err != nil {
		t.Fatal(err)
	}
	mountsBefore := hostMounts(t)
	ns := newJobNamespace(t)
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		StringData: map[string]string{"file.txt": "from a secret volume"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	script := `set -e
echo "home=$HOME pod=$POD_NAME"
cat /etc/creds/file.txt; echo
test -s /var/run/secrets/kubernetes.io/serviceaccount/token
if touch /etc/forbidden 2>/dev/null; then echo "ran as root"; exit 1; fi
echo "wd=$(pwd)"; echo x > made-here
git --version
tofu version | head -1
echo -n done > /dev/termination-log`
	job := shellJob("image", script, func(j *batchv1.Job) {
		spec := &j.Spec.Template.Spec
		c := &spec.Containers[0]
		c.Image, c.WorkingDir = runner, "/workspace"
		c.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/etc/creds", ReadOnly: true}, {Name: "workspace", MountPath: "/workspace"}}
		spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	entrypoint := shellJob("entrypoint", "", func(j *batchv1.Job) {
		c := &j.Spec.Template.Spec.Containers[0]
		c.Image, c.Command, c.Args = runner, nil, []string{"version"}
	})
	for _, j := range []*batchv1.Job{job, entrypoint} {
		if _, err := plane.Kube.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][]string{
		"image":      {"home=/home/nonroot pod=image-", "from a secret volume", "wd=/workspace", "git version 2.", "OpenTofu v"},
		"entrypoint": {"captf v"},
	} {
		j := waitJobFinished(t, ns, name, 2*time.Minute)
		pod := jobPod(t, ns, name)
		logs, err := ex.Logs(ns, pod.Name)
		if j.Status.Succeeded != 1 {
			t.Errorf("Job %s failed: %+v\nlogs: %s", name, pod.Status.ContainerStatuses, logs)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(logs, w) {
				t.Errorf("%s: logs %q lack %q", name, logs, w)
			}
		}
	}
	if term := jobPod(t, ns, "image").Status.ContainerStatuses[0].State.Terminated; term == nil || term.Message != "done" {
		t.Errorf("terminated state %+v, want the message written in the image", term)
	}
	if mountsAfter := hostMounts(t); mountsBefore != mountsAfter {
		t.Errorf("the host's mounts changed:\nbefore %s\nafter %s", mountsBefore, mountsAfter)
	}
}

// TestExecutorRestartsAndProbes: a pod of a known image that is no Job's
// is taken too; its container, which fails once, is restarted after the
// back-off (restartPolicy Always) with its emptyDir kept, reports the
// failed run as its last state, and turns Ready only when its readiness
// probe passes; deleting the pod stops it and the pod goes.
func TestExecutorRestartsAndProbes(t *testing.T) {
	startExecutor(t)
	ctx := context.Background()
	runner, err := framework.RunnerImage()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := framework.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	// The first run fails; the second serves /data over HTTP after a
	// moment (the probe must not see it Ready before).
	script := fmt.Sprintf(`n=$(($(cat /data/runs 2>/dev/null || echo 0) + 1)); echo $n > /data/runs
[ $n -ge 2 ] || exit 3
sleep 2; echo ok > /data/index.html; exec busybox httpd -f -p %d -h /data`, ports[0])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name: "server", Image: runner, Command: []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromInt(ports[0])}}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := plane.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	sawRunningUnready := false
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if got, err = plane.Kube.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{}); err != nil || len(got.Status.ContainerStatuses) != 1 {
			return false, nil
		}
		cs := got.Status.ContainerStatuses[0]
		if cs.RestartCount == 1 && cs.State.Running != nil && !cs.Ready {
			sawRunningUnready = true
		}
		return cs.Ready, nil
	})
	if err != nil {
		t.Fatalf("the pod never became Ready: %v\n%+v", err, got.Status)
	}
	cs := got.Status.ContainerStatuses[0]
	if cs.RestartCount != 1 {
		t.Errorf("restartCount %d, want 1", cs.RestartCount)
	}
	if last := cs.LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
		t.Errorf("last state %+v, want the run that exited 3", cs.LastTerminationState)
	}
	if !sawRunningUnready {
		t.Error("the restarted container was never seen running but not ready: Ready did not wait for the probe")
	}
	if !podReady(got) {
		t.Errorf("pod conditions %+v, want Ready", got.Status.Conditions)
	}
	if err := plane.Kube.CoreV1().Pods(ns).Delete(ctx, "server", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Kube.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted pod stayed: %v", err)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// hostMounts is the host's mount table, without the pods' network
// namespaces (/run/netns): the executors of the other test packages' planes,
// running beside this one, add and remove theirs at any time.
func hostMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], "/run/netns/") {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}
