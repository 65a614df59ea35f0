package workspace

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/runnerjob"
)

// newSync finds what obj's sync reads besides obj: its owner, its Cluster,
// the Cluster's TerraformCluster, and its Jobs. cached is obj as the cache
// holds it, never written to.
func (c *Controller[T]) newSync(cached, obj T) *Sync {
	owner := c.kind.Owner.OwnerOf(obj, c.kind.GVK.Group, c.kind.GVK.Kind, c.owners)
	cluster, tc := owner, (*infrav1.TerraformCluster)(nil)
	if c.belongsToCluster() {
		var fallback string
		if owner != nil {
			fallback = c.kind.Owner.ClusterName(owner)
		}
		cluster, tc = clusterOf(obj, fallback, c.clusters, c.tcs)
	}
	var defaults *infrav1.JobPolicy
	if tc != nil && tc.Spec.Defaults != nil {
		defaults = tc.Spec.Defaults.Jobs
	}
	s := c.engine.NewSync(obj, defaults)
	s.Owner, s.Cluster, s.TerraformCluster = owner, cluster, tc
	base := cached // what the API server holds, as far as this sync knows
	s.Update = func(ctx context.Context) error {
		err := c.update(ctx, base, obj)
		if err == nil {
			base = obj.DeepCopyObject().(T)
		}
		s.Unwritten = s.Unwritten && err != nil
		return err
	}
	if c.kind.Gate != nil {
		s.Gate = c.kind.Gate(obj)
	}
	return s
}

// NewSync starts a sync of obj; clusterDefaults is the cluster's
// spec.defaults.jobs for machines and pools, nil for clusters.
func (e *Engine) NewSync(obj Object, clusterDefaults *infrav1.JobPolicy) *Sync {
	r := &Sync{Obj: obj, Key: cache.MetaObjectToName(obj), Policy: runnerjob.EffectivePolicy(obj.Workspace().Jobs, clusterDefaults),
		ReapplyAfter: e.remediationTime(obj)}
	r.Jobs = runnerjob.OfObject(e.JobIndex, obj)
	return r
}

// clusterOf finds the Cluster of a machine or pool by its cluster-name label
// (Cluster API sets it; fallback names it before then), and its
// TerraformCluster when that is the Cluster's infrastructure.
func clusterOf(obj metav1.Object, fallback string, clusters cache.GenericLister, tcs infralisters.TerraformClusterLister) (*capi.Object, *infrav1.TerraformCluster) {
	name := obj.GetLabels()[capi.ClusterNameLabel]
	if name == "" {
		name = fallback
	}
	if name == "" {
		return nil, nil
	}
	o, err := clusters.ByNamespace(obj.GetNamespace()).Get(name)
	if err != nil {
		return nil, nil
	}
	cluster := capi.ObjectOf(o)
	if cluster == nil || cluster.Kind != capi.Cluster.Kind {
		return nil, nil
	}
	ref, ok := capi.Cluster.InfrastructureRef(cluster, infrav1.SchemeGroupVersion.Group, "TerraformCluster")
	if !ok {
		return cluster, nil
	}
	tc, err := tcs.TerraformClusters(ref.Namespace).Get(ref.Name)
	if err != nil {
		return cluster, nil
	}
	return cluster, tc
}
