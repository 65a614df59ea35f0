package runnerjob

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Control creates and deletes runner Jobs: the engine's side effects on
// Jobs, behind an interface so unit tests see what it would do (the role of
// kube-controller-manager's PodControlInterface).
type Control interface {
	// Create creates job; one that already exists is an AlreadyExists error.
	Create(ctx context.Context, job *batchv1.Job) error
	// Delete deletes job; one already gone is no error.
	Delete(ctx context.Context, job *Cached, propagation metav1.DeletionPropagation) error
}

// APIControl is the Control of the API server.
type APIControl struct {
	Client       kubernetes.Interface
	FieldManager string
}

// Create creates job.
func (c *APIControl) Create(ctx context.Context, job *batchv1.Job) error {
	_, err := c.Client.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: c.FieldManager})
	return err
}

// Delete deletes job and, with propagation, its pods.
func (c *APIControl) Delete(ctx context.Context, job *Cached, propagation metav1.DeletionPropagation) error {
	err := c.Client.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &propagation})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
