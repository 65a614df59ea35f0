package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
	"github.com/captf/captf/test/framework"
)

// fakeRunner plays the runner of every Job's pod without running terraform:
// an apply writes the object's state and durable inputs, every run its
// result (an apply with an endpoint, a drift check with no change), and the
// pod then succeeds, so that the Job controller completes the Job. It lets
// the bench make 10,000 objects Ready, and check drift at scale, without
// 10,000 terraform runs.
type fakeRunner struct {
	cp      *framework.ControlPlane
	ns      string
	queue   workqueue.TypedRateLimitingInterface[cache.ObjectName]
	done    atomic.Int64
	handled sync.Map // pod UID → true
}

func startFakeRunner(ctx context.Context, cp *framework.ControlPlane, ns string, workers int) *fakeRunner {
	f := &fakeRunner{cp: cp, ns: ns, queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName]())}
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Kube, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.enqueue(obj) },
		UpdateFunc: func(_, obj any) { f.enqueue(obj) },
	})
	factory.Start(ctx.Done())
	for range workers {
		go func() {
			for f.next(ctx) {
			}
		}()
	}
	go func() {
		<-ctx.Done()
		f.queue.ShutDown()
	}()
	return f
}

func (f *fakeRunner) enqueue(obj any) {
	pod := obj.(*corev1.Pod)
	if pod.Status.Phase != corev1.PodPending {
		return
	}
	if _, done := f.handled.Load(pod.UID); done {
		return
	}
	f.queue.Add(cache.MetaObjectToName(pod))
}

func (f *fakeRunner) next(ctx context.Context) bool {
	key, quit := f.queue.Get()
	if quit {
		return false
	}
	defer f.queue.Done(key)
	if err := f.run(ctx, key); err != nil {
		fmt.Printf("fake runner: %s: %v\n", key, err)
		f.queue.AddRateLimited(key)
		return true
	}
	f.queue.Forget(key)
	return true
}

func (f *fakeRunner) run(ctx context.Context, key cache.ObjectName) error {
	kube := f.cp.Kube
	pod, err := kube.CoreV1().Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Status.Phase != corev1.PodPending {
		return nil
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" {
		return nil
	}
	job, err := kube.BatchV1().Jobs(key.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	owner := metav1.GetControllerOf(job)
	if owner == nil {
		return nil
	}
	obj := names.ObjectOf(owner.Kind, owner.Name)
	labels := names.ObjectLabels(owner.Kind, owner.Name, owner.UID)
	op := infrav1.Operation(job.Labels[names.LabelOperation])
	res := run.Result{Operation: op, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "0000000000000000"}}
	if op == infrav1.OperationApply {
		store := &statestore.StateStore{Client: kube, Namespace: key.Namespace, Object: obj, Labels: labels}
		if err := store.Claim(ctx, string(pod.UID), false); err != nil {
			return err
		}
		if err := store.Write(ctx, []byte(`{"version":4,"serial":1}`)); err != nil {
			return err
		}
		durable := statestore.NewStateSecret(key.Namespace, obj.DurableInputs(), obj, names.SecretTypeDurableInput, labels)
		durable.Data = map[string][]byte{"module.json": []byte(`{}`)}
		if _, err := kube.CoreV1().Secrets(key.Namespace).Create(ctx, durable, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		res.Outputs = map[string]run.Output{"control_plane_endpoint": {Value: json.RawMessage(`"` + owner.Name + `.bench.test:6443"`)}}
	}
	if err := f.writeResult(ctx, job, obj, labels, owner, res); err != nil {
		return err
	}
	if err := f.succeed(ctx, pod); err != nil {
		return err
	}
	f.handled.Store(pod.UID, true)
	f.done.Add(1)
	return nil
}

func (f *fakeRunner) writeResult(ctx context.Context, job *batchv1.Job, obj names.Object, labels map[string]string, owner *metav1.OwnerReference, res run.Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	l := map[string]string{names.LabelSecretType: names.SecretTypeResult}
	for k, v := range labels {
		l[k] = v
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.Result(job.Name), Namespace: job.Namespace, Labels: l,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}}},
		Data: map[string][]byte{run.KeyResult: b}}
	_, err = f.cp.Kube.CoreV1().Secrets(job.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// succeed reports the pod's container exited 0, as a kubelet would.
func (f *fakeRunner) succeed(ctx context.Context, pod *corev1.Pod) error {
	pods := f.cp.Kube.CoreV1().Pods(pod.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		now := metav1.Now()
		c := current.Spec.Containers[0]
		current.Status.Phase = corev1.PodSucceeded
		current.Status.StartTime = &now
		current.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		current.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}}
		_, err = pods.UpdateStatus(ctx, current, metav1.UpdateOptions{})
		return err
	})
}

// driftFigures counts the drift Jobs created in [from, from+window) and,
// per object, the longest it went without a check over the window: from
// its last check before the window (or from, when it had none) to each
// check in it, and from its last to the window's end. An object goes
// starved when that exceeds maxGap; an object checked just before the
// window and just after it is not (its checks are an interval apart).
func driftFigures(events []framework.AuditEvent, user string, from time.Time, window, maxGap time.Duration, objects []string) string {
	end := from.Add(window)
	var checks []framework.AuditEvent
	for _, ev := range events {
		if ev.User.Username == user && ev.Verb == "create" && ev.ObjectRef.Resource == "jobs" && strings.Contains(ev.ObjectRef.Name, "-drift-") &&
			ev.RequestReceivedTimestamp.Time.Before(end) {
			checks = append(checks, ev)
		}
	}
	sort.Slice(checks, func(i, j int) bool {
		return checks[i].RequestReceivedTimestamp.Time.Before(checks[j].RequestReceivedTimestamp.Time)
	})
	per := map[int64]int{}
	last := map[string]time.Time{}
	longest := map[string]time.Duration{}
	for _, ev := range checks {
		at := ev.RequestReceivedTimestamp.Time
		obj := strings.TrimPrefix(ev.ObjectRef.Name, "tfc-")
		obj = obj[:strings.Index(obj, "-drift-")]
		if at.Before(from) {
			last[obj] = at
			continue
		}
		per[at.Sub(from).Milliseconds()/10000]++
		prev, ok := last[obj]
		if !ok {
			prev = from
		}
		longest[obj] = max(longest[obj], at.Sub(prev))
		last[obj] = at
	}
	starved := 0
	worst := time.Duration(0)
	for _, o := range objects {
		prev, ok := last[o]
		if !ok {
			prev = from
		}
		gap := max(longest[o], end.Sub(prev))
		worst = max(worst, gap)
		if !ok || gap > maxGap {
			starved++
		}
	}
	buckets := int(window / (10 * time.Second))
	total, peak, low := 0, 0, -1
	for i := range buckets {
		total += per[int64(i)]
		peak = max(peak, per[int64(i)])
		if low < 0 || per[int64(i)] < low {
			low = per[int64(i)]
		}
	}
	mean := float64(total) / float64(buckets)
	return fmt.Sprintf("drift Jobs created over %s: %d (%.1f/s); per 10 s: mean %.1f, lowest %d, highest %d (%.2f× the mean); "+
		"longest an object went without a check over the window %s; objects without one for over %s: %d of %d\n",
		window, total, float64(total)/window.Seconds(), mean, low, peak, float64(peak)/mean, worst.Round(time.Second), maxGap, starved, len(objects))
}
