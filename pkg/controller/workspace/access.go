package workspace

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

// RunnerAccess keeps the captf-runner ServiceAccount in each namespace the
// manager runs Jobs in. The account has no rights: runner pods reach their
// object's state, lock and result through the manager's runner API, which
// knows them by a token of this account (or of spec.jobs.serviceAccountName)
// bound to the pod. A RoleBinding that older releases made for the account
// is deleted.
type RunnerAccess struct {
	Client kubernetes.Interface

	mu    sync.Mutex
	done  map[string]bool
	queue workqueue.TypedRateLimitingInterface[string]
}

// Watch re-creates the ServiceAccount of a namespace as soon as it is
// deleted: without it, Job pods cannot even be created.
func (a *RunnerAccess) Watch(serviceAccounts cache.SharedIndexInformer) error {
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "runner-access"})
	_, err := serviceAccounts.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(metav1.Object); ok && o.GetName() == names.RunnerServiceAccount {
			a.queue.Add(o.GetNamespace())
		}
	}})
	return err
}

// Run re-creates what Watch saw deleted until ctx ends.
func (a *RunnerAccess) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	logger := klog.FromContext(ctx)
	for {
		ns, quit := a.queue.Get()
		if quit {
			return
		}
		a.mu.Lock()
		delete(a.done, ns)
		a.mu.Unlock()
		err := a.Ensure(ctx, ns)
		switch {
		case err == nil:
			logger.Info("Re-created the runner's ServiceAccount", "namespace", ns)
			a.queue.Forget(ns)
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			a.queue.Forget(ns) // the namespace goes, and with it the need
		default:
			logger.Error(err, "Re-creating the runner's ServiceAccount", "namespace", ns)
			a.queue.AddRateLimited(ns)
		}
		a.queue.Done(ns)
	}
}

// Ensure makes sure namespace has the ServiceAccount and no RoleBinding of
// an older release; it checks once per namespace per manager process, with
// reads, and writes only what is missing or left over.
func (a *RunnerAccess) Ensure(ctx context.Context, namespace string) error {
	a.mu.Lock()
	done := a.done[namespace]
	a.mu.Unlock()
	if done {
		return nil
	}
	labels := map[string]string{names.LabelManagedBy: names.ManagedByValue}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: names.RunnerServiceAccount, Namespace: namespace, Labels: labels},
		AutomountServiceAccountToken: ptr.To(false)}
	if _, err := a.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, sa.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := a.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ServiceAccount %s/%s: %w", namespace, sa.Name, err)
		}
	} else if err != nil {
		return err
	}
	rb, err := a.Client.RbacV1().RoleBindings(namespace).Get(ctx, names.RunnerRoleBinding, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case rb.Labels[names.LabelManagedBy] == names.ManagedByValue:
		err := a.Client.RbacV1().RoleBindings(namespace).Delete(ctx, rb.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rb.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the runner's old RoleBinding %s/%s: %w", namespace, rb.Name, err)
		}
	}
	a.mu.Lock()
	if a.done == nil {
		a.done = map[string]bool{}
	}
	a.done[namespace] = true
	a.mu.Unlock()
	return nil
}

// ReasonRunnerServiceAccountNotAllowed is the Ready reason when
// spec.jobs.serviceAccountName names a ServiceAccount without the label.
const ReasonRunnerServiceAccountNotAllowed = "RunnerServiceAccountNotAllowed"

// CheckServiceAccount allows a runner ServiceAccount other than captf-runner
// only when its namespace's owner labelled it captf.io/runner=true: without
// that, anyone who may create a Terraform* object could run Terraform with
// any ServiceAccount's rights.
func (a *RunnerAccess) CheckServiceAccount(ctx context.Context, namespace string, sa runnerjob.ServiceAccount) error {
	if sa.Name == names.RunnerServiceAccount {
		return nil
	}
	got, err := a.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, sa.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &InputError{Reason: ReasonRunnerServiceAccountNotAllowed, Message: fmt.Sprintf("%s: ServiceAccount %s not found", sa.Field, sa.Name)}
	}
	if err != nil {
		return err
	}
	if got.Labels[infrav1.LabelRunnerServiceAccount] != "true" {
		return &InputError{Reason: ReasonRunnerServiceAccountNotAllowed, Message: fmt.Sprintf(
			"%s: ServiceAccount %s lacks the label %s=true that lets CAPTF run Terraform with its rights", sa.Field, sa.Name, infrav1.LabelRunnerServiceAccount)}
	}
	return nil
}
