package capi

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is what CAPTF keeps and reads of a Cluster API Cluster, Machine or
// MachinePool: the fields below, wherever its kind keeps them. The
// informers cache these (Trim): a running Machine took 5.1 KB as an
// unstructured map of its metadata and the fields CAPTF reads, 1.8 KB as
// this with its whole metadata, 0.8 KB now (BenchmarkCAPICache).
type Object struct {
	metav1.TypeMeta
	// Name, namespace, UID, resource version, deletion, and of the labels
	// only the control-plane label: CAPTF reads nothing else of a Cluster
	// API object's metadata (the pause annotation it heeds is on its own
	// objects), and never writes one.
	metav1.ObjectMeta
	Spec   Spec
	Status Status
}

// Spec is what CAPTF reads of a Cluster API object's spec. A MachinePool's
// machine template fields (spec.template.spec) are here as a Machine's.
type Spec struct {
	Paused             bool // spec.paused, of a Cluster
	InfrastructureRef  *Ref
	BootstrapConfigRef *Ref   // spec.bootstrap.configRef
	DataSecretName     string // spec.bootstrap.dataSecretName
	ClusterName        string // spec.clusterName
	Version            string // spec.version
	FailureDomain      string // spec.failureDomain, of a Machine
	Replicas           *int64 // spec.replicas, of a MachinePool
	FailureDomains     []string
}

// Status is what CAPTF reads of a Cluster's status.
type Status struct {
	InfrastructureProvisioned bool // status.initialization.infrastructureProvisioned
	ControlPlaneInitialized   bool // status.initialization.controlPlaneInitialized
}

// Ref is a contract reference (v1beta2): API group, kind and name, in the
// referrer's namespace.
type Ref struct {
	APIGroup, Kind, Name string
}

// DeepCopyObject makes Object a runtime.Object, as informers hold.
func (o *Object) DeepCopyObject() runtime.Object { return o.DeepCopy() }

// DeepCopy is a copy of o that shares nothing with it.
func (o *Object) DeepCopy() *Object {
	if o == nil {
		return nil
	}
	out := *o
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if o.Spec.InfrastructureRef != nil {
		ref := *o.Spec.InfrastructureRef
		out.Spec.InfrastructureRef = &ref
	}
	if o.Spec.BootstrapConfigRef != nil {
		ref := *o.Spec.BootstrapConfigRef
		out.Spec.BootstrapConfigRef = &ref
	}
	if o.Spec.Replicas != nil {
		n := *o.Spec.Replicas
		out.Spec.Replicas = &n
	}
	out.Spec.FailureDomains = slices.Clone(o.Spec.FailureDomains)
	return &out
}

// KindOf is the owner kind named kind, if it is one.
func KindOf(kind string) (Kind, bool) {
	return ownerKind(func(k Kind) bool { return k.Kind == kind })
}

// KindServedAs is the owner kind whose resource is gvr, if it is one.
func KindServedAs(gvr schema.GroupVersionResource) (Kind, bool) {
	return ownerKind(func(k Kind) bool { return k.Resource == gvr })
}

func ownerKind(match func(Kind) bool) (Kind, bool) {
	for _, k := range []Kind{Cluster, Machine, MachinePool} {
		if match(k) {
			return k, true
		}
	}
	return Kind{}, false
}

// ObjectOf is what CAPTF reads of o: the Object the manager's caches hold,
// or one read from an unstructured Cluster, Machine or MachinePool (a read
// from the API server, an informer without Trim). nil for anything else.
func ObjectOf(o any) *Object {
	switch o := o.(type) {
	case *Object:
		return o
	case *unstructured.Unstructured:
		k, ok := KindOf(o.GetKind())
		if !ok {
			return nil
		}
		return k.read(o)
	}
	return nil
}

// read takes what CAPTF reads of u, an object of kind k, from where k
// keeps it.
func (k Kind) read(u *unstructured.Unstructured) *Object {
	o := &Object{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: k.Kind}}
	o.ObjectMeta = metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion(),
		DeletionTimestamp: u.GetDeletionTimestamp()}
	if v, ok := u.GetLabels()[ControlPlaneLabel]; ok {
		o.Labels = map[string]string{ControlPlaneLabel: v}
	}
	m := u.Object
	s := &o.Spec
	s.Paused, _, _ = unstructured.NestedBool(m, "spec", "paused")
	s.InfrastructureRef = ref(m, k.InfrastructureRefPath)
	s.BootstrapConfigRef = ref(m, k.BootstrapConfigRefPath)
	if k.BootstrapDataSecretPath != nil {
		s.DataSecretName, _, _ = unstructured.NestedString(m, k.BootstrapDataSecretPath...)
	}
	if k.ClusterNamePath != nil {
		s.ClusterName, _, _ = unstructured.NestedString(m, k.ClusterNamePath...)
	}
	version := []string{"spec", "version"}
	if k.Kind == MachinePool.Kind {
		version = []string{"spec", "template", "spec", "version"}
	}
	s.Version, _, _ = unstructured.NestedString(m, version...)
	s.FailureDomain, _, _ = unstructured.NestedString(m, "spec", "failureDomain")
	if n, found, err := unstructured.NestedInt64(m, "spec", "replicas"); found && err == nil {
		s.Replicas = &n
	}
	s.FailureDomains, _, _ = unstructured.NestedStringSlice(m, "spec", "failureDomains")
	o.Status.InfrastructureProvisioned, _, _ = unstructured.NestedBool(m, "status", "initialization", "infrastructureProvisioned")
	o.Status.ControlPlaneInitialized, _, _ = unstructured.NestedBool(m, "status", "initialization", "controlPlaneInitialized")
	return o
}

// ref reads the reference at path, nil when there is none.
func ref(m map[string]any, path []string) *Ref {
	if path == nil {
		return nil
	}
	fields, found, err := unstructured.NestedStringMap(m, path...)
	if !found || err != nil {
		return nil
	}
	return &Ref{APIGroup: fields["apiGroup"], Kind: fields["kind"], Name: fields["name"]}
}
