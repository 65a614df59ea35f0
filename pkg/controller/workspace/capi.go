package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
)

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

// exports are a TerraformCluster's non-sensitive outputs, as machines and
// pools receive them.
func exports(tc *infrav1.TerraformCluster) map[string]json.RawMessage {
	exports := map[string]json.RawMessage{}
	if tc != nil {
		for k, v := range tc.Status.Outputs {
			exports[k] = v.Raw
		}
	}
	return exports
}

// Ready reasons of bootstrap data that cannot be read.
const (
	// ReasonBootstrapDataUnavailable: the bootstrap data Secret cannot be read.
	ReasonBootstrapDataUnavailable = "BootstrapDataUnavailable"
	// ReasonBootstrapDataNotAllowed: the owner names a bootstrap data
	// Secret that was not made for it.
	ReasonBootstrapDataNotAllowed = "BootstrapDataNotAllowed"
)

// bootstrapInputs reads the bootstrap data Secret of owner (a Machine or
// MachinePool of kind; keys value and format, as Cluster API's bootstrap
// providers write it) into captf_bootstrap_data and captf_bootstrap_format,
// when the Secret was made for owner (madeFor).
func bootstrapInputs(ctx context.Context, kube kubernetes.Interface, configs BootstrapConfigReader, kind capi.Kind, owner *capi.Object, inputs map[string]any) error {
	name := kind.BootstrapData(owner)
	sec, err := kube.CoreV1().Secrets(owner.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return &InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading bootstrap data Secret %s: %v", name, err)}
	}
	ok, err := madeFor(ctx, configs, sec, kind, owner)
	if err != nil {
		return &InputError{Reason: ReasonBootstrapDataUnavailable, Message: fmt.Sprintf("reading the bootstrap config of %s %s: %v", kind.Kind, owner.GetName(), err)}
	}
	if !ok {
		return &InputError{Reason: ReasonBootstrapDataNotAllowed, Message: fmt.Sprintf(
			"%s %s names bootstrap data Secret %s (%s), which was not made for it: CAPTF reads bootstrap data only from a Secret controlled by the %s or by its bootstrap config (%s), "+
				"or one labelled %s=true by someone who may write Secrets. Point %s at the Secret its bootstrap provider wrote, or label the Secret if it is meant as bootstrap data.",
			kind.Kind, owner.GetName(), name, strings.Join(kind.BootstrapDataSecretPath, "."), kind.Kind, strings.Join(kind.BootstrapConfigRefPath, "."),
			infrav1.LabelBootstrapData, strings.Join(kind.BootstrapDataSecretPath, "."))}
	}
	format := string(sec.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	inputs["captf_bootstrap_data"] = string(sec.Data["value"])
	inputs["captf_bootstrap_format"] = format
	return nil
}

// BootstrapConfigReader reads the metadata of a bootstrap config (group,
// kind and name as a configRef gives them) in namespace.
type BootstrapConfigReader func(ctx context.Context, namespace, group, kind, name string) (metav1.Object, error)

// madeFor tells whether sec is bootstrap data made for owner: whoever may
// create Machines must not make CAPTF read any Secret of the namespace (the
// cluster's kubeconfig, another cluster's bootstrap data with its CA keys).
// A Secret is made for owner when its controller is owner itself, or the
// bootstrap config owner names (as kubeadm's provider writes it) when that
// config is controlled by owner (Cluster API's Machine and MachinePool
// controllers take control of the configs they use: another Machine's
// config stays its own) and the Secret belongs to owner's Cluster; or when
// someone who may write Secrets labelled it as bootstrap data.
func madeFor(ctx context.Context, configs BootstrapConfigReader, sec *corev1.Secret, kind capi.Kind, owner *capi.Object) (bool, error) {
	if sec.Labels[infrav1.LabelBootstrapData] == "true" {
		return true, nil
	}
	ref := metav1.GetControllerOfNoCopy(sec)
	if ref == nil {
		return false, nil
	}
	if controls(ref, capi.Group, kind.Kind, owner.GetName(), owner.GetUID()) {
		return true, nil
	}
	cfgGroup, cfgKind, cfgName, ok := kind.BootstrapConfig(owner)
	if !ok || !controls(ref, cfgGroup, cfgKind, cfgName, ref.UID) {
		return false, nil
	}
	if cluster, labelled := sec.Labels[capi.ClusterNameLabel]; labelled && cluster != kind.ClusterName(owner) {
		return false, nil
	}
	if configs == nil {
		return false, nil
	}
	cfg, err := configs(ctx, owner.GetNamespace(), cfgGroup, cfgKind, cfgName)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cfgRef := metav1.GetControllerOfNoCopy(cfg)
	return cfg.GetUID() == ref.UID && cfgRef != nil && controls(cfgRef, capi.Group, kind.Kind, owner.GetName(), owner.GetUID()), nil
}

// controls tells whether the controller reference ref names the object
// group/kind name with uid.
func controls(ref *metav1.OwnerReference, group, kind, name string, uid types.UID) bool {
	refGroup := ref.APIVersion
	if i := strings.Index(refGroup, "/"); i >= 0 {
		refGroup = refGroup[:i]
	} else {
		refGroup = "" // the core group
	}
	return refGroup == group && ref.Kind == kind && ref.Name == name && ref.UID == uid
}
