// Package terraformmachinetemplate keeps what the cluster-autoscaler reads
// of a TerraformMachineTemplate to scale from zero: status.capacity and
// status.nodeInfo, from the hints in its spec.
package terraformmachinetemplate

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/captf/captf/pkg/controller"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

// ControllerName names the controller in logs, events and metrics.
const ControllerName = "terraformmachinetemplate"

// Controller copies scale-from-zero hints into the status.
type Controller struct {
	captf  versioned.Interface
	lister infralisters.TerraformMachineTemplateLister
	loop   *controller.Loop
}

// NewController wires the controller to its informer.
func NewController(ctx context.Context, cc controller.Context) (*Controller, error) {
	informer := cc.CAPTFInformers.Infrastructure().V1alpha1().TerraformMachineTemplates()
	c := &Controller{captf: cc.CAPTF, lister: informer.Lister(), loop: controller.NewLoop(ctx, ControllerName, cc)}
	c.loop.Synced = []cache.InformerSynced{informer.Informer().HasSynced}
	c.loop.Sync = c.sync
	enqueue := func(obj any) {
		if key, err := cache.ObjectToName(obj); err == nil {
			c.loop.Queue.Add(key)
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) { c.loop.Run(ctx, workers) }

// HasSynced tells whether the informer has synced.
func (c *Controller) HasSynced() bool { return c.loop.HasSynced() }

// sync writes the status only when the hints changed. The template's spec is
// otherwise left alone: it is what Cluster API clones into TerraformMachines.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	cached, err := c.lister.TerraformMachineTemplates(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(cached.Status.Capacity, cached.Spec.Capacity) && equality.Semantic.DeepEqual(cached.Status.NodeInfo, cached.Spec.NodeInfo) {
		return nil
	}
	t := cached.DeepCopy()
	t.Status.Capacity = t.Spec.Capacity
	t.Status.NodeInfo = t.Spec.NodeInfo
	_, err = c.captf.InfrastructureV1alpha1().TerraformMachineTemplates(t.Namespace).UpdateStatus(ctx, t, metav1.UpdateOptions{FieldManager: ControllerName})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
