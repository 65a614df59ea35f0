package framework

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
)

// Tenant makes a ServiceAccount "tenant" of namespace with what a team gets
// in a shared management cluster, the captf-writer Role docs/security.md
// shows (nothing on Secrets, pods or Jobs), and returns its client config
// once the API server's authorizer knows the binding.
func (cp *ControlPlane) Tenant(ctx context.Context, namespace string) (*rest.Config, error) {
	if _, err := cp.Kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	role, err := ShippedRole("captf-writer")
	if err != nil {
		return nil, err
	}
	role.Name, role.Namespace = "tenant", ""
	if _, err := cp.Kube.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "tenant", Namespace: namespace}}}
	if _, err := cp.Kube.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	cfg, err := cp.ServiceAccountConfig(ctx, namespace, "tenant")
	if err != nil {
		return nil, err
	}
	captf, kube := versioned.NewForConfigOrDie(cfg), kubernetes.NewForConfigOrDie(cfg)
	// The authorizer sees a new RoleBinding a moment after it is made.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := captf.InfrastructureV1alpha1().TerraformMachines(namespace).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the tenant's Role never took effect: %w", err)
	}
	if _, err := kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("the tenant lists Secrets: %v", err)
	}
	return cfg, nil
}
