package terraformcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/runner"
)

var gvk = infrav1.SchemeGroupVersion.WithKind("TerraformCluster")

// Ready reasons, besides the Cluster API ones.
const ReasonWaitingForOwner = "WaitingForClusterOwner"

// Well-known module outputs.
const (
	OutputControlPlaneEndpoint = "control_plane_endpoint"
	OutputFailureDomains       = "failure_domains"
)

// syncCtx is what one sync knows and decides.
type syncCtx struct {
	tc      *infrav1.TerraformCluster // a copy: safe to change
	key     cache.ObjectName
	cluster *unstructured.Unstructured
	run     *workspace.Run
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx).WithValues("terraformCluster", key)
	ctx = klog.NewContext(ctx, logger)
	start := c.now()
	defer func() { logger.V(4).Info("Finished syncing", "duration", c.now().Sub(start)) }()

	cached, err := c.lister.TerraformClusters(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := cached.Annotations[workspace.ManagedByAnnotation]; ok {
		return nil // externally managed: hands off
	}
	if !c.written.Seen(key, cached.ResourceVersion) {
		// The cache has not caught up with our last write: deciding on it
		// would write again what is already written.
		c.queue.AddAfter(key, 250*time.Millisecond)
		return nil
	}
	if !c.expectations.Satisfied(key) {
		logger.V(4).Info("Waiting for the informer to see the Jobs created")
		return nil
	}
	s := &syncCtx{tc: cached.DeepCopy(), key: key}
	original := cached.Status.DeepCopy()
	s.run = c.engine.NewRun(s.tc, nil)
	s.run.Gate = workspace.GateOf(s.tc, s.tc.Spec.ApprovalPolicy)
	s.cluster = c.ownerCluster(cached)

	err = c.reconcile(ctx, s)
	if serr := c.writeStatus(ctx, s.tc, original); serr != nil && !apierrors.IsNotFound(serr) {
		err = errors.Join(err, serr)
	}
	if err == nil && s.run.Requeue > 0 {
		c.queue.AddAfter(key, s.run.Requeue)
	}
	return err
}

func (c *Controller) reconcile(ctx context.Context, s *syncCtx) error {
	l := workspace.Lifecycle{
		Finalizer: infrav1.TerraformClusterFinalizer,
		Cluster:   s.cluster,
		Update:    func(ctx context.Context) error { return c.update(ctx, s) },
		Render: func() (*util.Inputs, error) {
			return util.Render(ctx, c.kube, s.tc.Namespace, s.tc.Spec.WorkspaceSpec, c.captfInputs(s))
		},
	}
	if s.cluster == nil {
		l.OwnerMissing = &workspace.Wait{Reason: ReasonWaitingForOwner, Message: "Waiting for a Cluster to own this TerraformCluster: Cluster API sets the owner reference once the Cluster's spec.infrastructureRef names it"}
	}
	live, err := c.engine.Reconcile(ctx, s.run, l)
	if err != nil || !live {
		return err
	}
	return c.reconcileNormal(ctx, s)
}

func (c *Controller) reconcileNormal(ctx context.Context, s *syncCtx) error {
	tc := s.tc
	in, err := util.Render(ctx, c.kube, tc.Namespace, tc.Spec.WorkspaceSpec, c.captfInputs(s))
	if err != nil {
		var ie *util.InputError
		if errors.As(err, &ie) {
			c.engine.InputError(s.run, ie)
			return nil
		}
		return err
	}
	res, job, err := c.engine.Apply(ctx, s.run, in)
	if err != nil || res == nil {
		return err
	}
	endpoint, domains, err := readClusterOutputs(res.Outputs)
	if err != nil {
		c.engine.InvalidOutput(s.run, err)
		return nil
	}
	if tc.Spec.ControlPlaneEndpoint.IsZero() && endpoint != nil {
		tc.Spec.ControlPlaneEndpoint = *endpoint
		if err := c.update(ctx, s); err != nil {
			return err
		}
	}
	tc.Status.FailureDomains = domains
	c.engine.Applied(s.run, in.Hash, job, res)
	return nil
}

// update writes the object's metadata and spec, keeping the status this
// sync computed.
func (c *Controller) update(ctx context.Context, s *syncCtx) error {
	status := s.tc.Status
	updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(s.tc.Namespace).Update(ctx, s.tc, metav1.UpdateOptions{FieldManager: ControllerName})
	if apierrors.IsNotFound(err) && s.tc.DeletionTimestamp != nil {
		return nil
	}
	if err != nil {
		return err
	}
	c.written.Wrote(s.key, updated.ResourceVersion)
	*s.tc = *updated
	s.tc.Status = status
	return nil
}

func (c *Controller) writeStatus(ctx context.Context, tc *infrav1.TerraformCluster, original *infrav1.TerraformClusterStatus) error {
	if tc.DeletionTimestamp != nil && !workspace.HoldsFinalizer(tc, infrav1.TerraformClusterFinalizer) {
		return nil // gone once the finalizer went
	}
	tc.Status.ObservedGeneration = tc.Generation
	if equality.Semantic.DeepEqual(&tc.Status, original) {
		return nil
	}
	updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).UpdateStatus(ctx, tc, metav1.UpdateOptions{FieldManager: ControllerName})
	if err != nil {
		return err
	}
	c.written.Wrote(cache.MetaObjectToName(tc), updated.ResourceVersion)
	return nil
}

// captfInputs are the inputs CAPTF gives every cluster module (docs/inputs.md).
func (c *Controller) captfInputs(s *syncCtx) map[string]any {
	clusterName := s.tc.Labels["cluster.x-k8s.io/cluster-name"]
	if s.cluster != nil {
		clusterName = s.cluster.GetName()
	}
	return map[string]any{
		"captf_cluster_name": clusterName,
		"captf_namespace":    s.tc.Namespace,
		"captf_name":         s.tc.Name,
		"captf_kind":         gvk.Kind,
	}
}

func (c *Controller) ownerCluster(tc *infrav1.TerraformCluster) *unstructured.Unstructured {
	return workspace.OwnerOfKind(tc, "Cluster", c.clusters.ByNamespace(tc.Namespace))
}

// readClusterOutputs reads control_plane_endpoint ("host:port", or an object
// with host and port) and failure_domains (a list in Cluster API's v1beta2
// shape, or a map from name to {controlPlane, attributes}).
func readClusterOutputs(outputs map[string]runner.Output) (*infrav1.APIEndpoint, []infrav1.FailureDomain, error) {
	var endpoint *infrav1.APIEndpoint
	if o, ok := outputs[OutputControlPlaneEndpoint]; ok {
		var asString string
		var asObject struct {
			Host string `json:"host"`
			Port int32  `json:"port"`
		}
		switch {
		case json.Unmarshal(o.Value, &asString) == nil:
			host, port, err := net.SplitHostPort(asString)
			p, perr := strconv.ParseInt(port, 10, 32)
			if err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
				return nil, nil, fmt.Errorf("output %s = %q: want \"host:port\" or {host, port}", OutputControlPlaneEndpoint, asString)
			}
			endpoint = &infrav1.APIEndpoint{Host: host, Port: int32(p)}
		case json.Unmarshal(o.Value, &asObject) == nil && asObject.Host != "" && asObject.Port >= 1 && asObject.Port <= 65535:
			endpoint = &infrav1.APIEndpoint{Host: asObject.Host, Port: asObject.Port}
		default:
			return nil, nil, fmt.Errorf("output %s = %s: want \"host:port\" or {host, port} with a port from 1 to 65535", OutputControlPlaneEndpoint, o.Value)
		}
	}
	var domains []infrav1.FailureDomain
	if o, ok := outputs[OutputFailureDomains]; ok {
		if err := json.Unmarshal(o.Value, &domains); err != nil {
			var byName map[string]struct {
				ControlPlane *bool             `json:"controlPlane"`
				Attributes   map[string]string `json:"attributes"`
			}
			if err := json.Unmarshal(o.Value, &byName); err != nil {
				return nil, nil, fmt.Errorf("output %s: want a list of {name, controlPlane, attributes} or a map from name to {controlPlane, attributes}", OutputFailureDomains)
			}
			domains = nil
			for name, fd := range byName {
				domains = append(domains, infrav1.FailureDomain{Name: name, ControlPlane: fd.ControlPlane, Attributes: fd.Attributes})
			}
		}
		slices.SortFunc(domains, func(a, b infrav1.FailureDomain) int { return strings.Compare(a.Name, b.Name) })
		for _, fd := range domains {
			if fd.Name == "" {
				return nil, nil, fmt.Errorf("output %s: a failure domain has no name", OutputFailureDomains)
			}
		}
	}
	return endpoint, domains, nil
}
