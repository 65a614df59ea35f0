package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/catalog"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// ReasonCatalogModuleNotAllowed: the catalog entry an object names does not
// select the object's namespace (any more).
const ReasonCatalogModuleNotAllowed = "CatalogModuleNotAllowed"

// Catalog is the module catalog as Render reads it.
type Catalog struct {
	Modules infralisters.TerraformModuleLister
	// Namespace is the manager's: the ConfigMaps of ConfigMap sources are
	// there.
	Namespace string
}

// module is the module a run of an object in namespace takes from the
// catalog version ref names: the pinned source (or the files) and the
// digest its code must have, and the variables the version declares.
func (c *Catalog) module(ctx context.Context, client kubernetes.Interface, namespace string, ref *infrav1.CatalogRef) (run.Module, []infrav1.ModuleVariable, error) {
	unavailable := func(format string, args ...any) (run.Module, []infrav1.ModuleVariable, error) {
		return run.Module{}, nil, &InputError{Reason: ReasonModuleUnavailable, Message: "catalog module " + ref.Name + " " + ref.Version + ": " + fmt.Sprintf(format, args...)}
	}
	if c == nil || c.Modules == nil {
		return unavailable("this manager reads no module catalog")
	}
	entry, err := c.Modules.Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return unavailable("the catalog has no such entry")
	}
	if err != nil {
		return run.Module{}, nil, err
	}
	// Checked again at each render: an entry may stop selecting a
	// namespace after its objects were admitted.
	if ok, err := namespaceSelected(ctx, client, namespace, entry.Spec.NamespaceSelector); err != nil {
		return run.Module{}, nil, err
	} else if !ok {
		return run.Module{}, nil, &InputError{Reason: ReasonCatalogModuleNotAllowed,
			Message: fmt.Sprintf("namespace %s may not use catalog module %s: its spec.namespaceSelector does not select the namespace", namespace, ref.Name)}
	}
	i := slices.IndexFunc(entry.Status.Versions, func(st infrav1.CatalogVersionStatus) bool { return st.Name == ref.Version })
	offered := slices.ContainsFunc(entry.Spec.Versions, func(v infrav1.CatalogVersion) bool { return v.Name == ref.Version })
	switch {
	case !offered:
		return unavailable("the entry does not offer the version")
	case i < 0 || entry.Status.Versions[i].Digest == "":
		return unavailable("the version is not resolved yet (kubectl get tfmod %s)", ref.Name)
	}
	st := entry.Status.Versions[i]
	m := run.Module{Source: st.Source, Digest: st.Digest}
	if reg := entry.Spec.Source.Registry; reg != nil {
		m = run.Module{Registry: &run.RegistryModule{Address: reg.Address, Version: st.Ref}, Digest: st.Digest}
	}
	if entry.Spec.Source.ConfigMap != nil {
		cm, err := client.CoreV1().ConfigMaps(c.Namespace).Get(ctx, st.Ref, metav1.GetOptions{})
		if err != nil {
			return unavailable("reading ConfigMap %s/%s: %v", c.Namespace, st.Ref, err)
		}
		m = run.Module{Files: maps.Clone(cm.Data), Digest: st.Digest}
	}
	if name := entry.Spec.CredentialsSecretName; name != "" {
		m.Credentials = &run.SecretRef{Namespace: c.Namespace, Name: name}
	}
	return m, st.Variables, nil
}

// namespaceSelected tells whether selector selects namespace.
func namespaceSelected(ctx context.Context, client kubernetes.Interface, namespace string, selector *metav1.LabelSelector) (bool, error) {
	return catalog.Selects(selector, func() (map[string]string, error) {
		ns, err := client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s: %w", namespace, err)
		}
		return ns.Labels, nil
	})
}

// catalogDigest is the catalog's digest of the module of run inputs data,
// "" when it is no catalog module's (or the run reads its durable inputs).
func catalogDigest(data map[string][]byte) string {
	var m run.Module
	if json.Unmarshal(data[run.KeyModule], &m) != nil {
		return ""
	}
	return m.Digest
}

// onlyDeclared keeps of CAPTF's inputs those the module declares: terraform
// warns of each value it gets for a variable the module does not declare.
func onlyDeclared(captf map[string]any, declared []infrav1.ModuleVariable) map[string]any {
	out := map[string]any{}
	for k, v := range captf {
		if catalog.Declared(declared, k) {
			out[k] = v
		}
	}
	return out
}
