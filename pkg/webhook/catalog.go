package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/catalog"
)

// checkCatalog checks the catalog module each spec names: the entry is
// there, selects the object's namespace, offers the version and has
// resolved it, and the spec's variables fit the version's. A spec whose
// module and variables are unchanged is not checked again: a catalog that
// changed since must not lock an object out of its other updates (its
// runs say what no longer fits).
func (h *Handler) checkCatalog(ctx context.Context, req *admissionv1.AdmissionRequest, specs []objectSpec) (field.ErrorList, error) {
	if h.CatalogEntry == nil {
		return nil, nil
	}
	var old []objectSpec
	if req.Operation == admissionv1.Update {
		var err error
		if old, err = specsOf(req.OldObject.Raw); err != nil {
			return nil, err
		}
	}
	var errs field.ErrorList
	for i, s := range specs {
		ref := s.Module.CatalogRef
		if ref == nil {
			continue
		}
		if i < len(old) && equality.Semantic.DeepEqual(old[i].Module, s.Module) && equality.Semantic.DeepEqual(old[i].Variables, s.Variables) {
			continue
		}
		refPath := s.path.Child("module", "catalogRef")
		entry, err := h.CatalogEntry(ctx, ref.Name)
		if apierrors.IsNotFound(err) {
			errs = append(errs, field.NotFound(refPath.Child("name"), fmt.Sprintf("%s: the module catalog has no such entry (kubectl captf modules lists them)", ref.Name)))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading catalog module %s: %w", ref.Name, err)
		}
		if entry.DeletionTimestamp != nil {
			errs = append(errs, field.Forbidden(refPath.Child("name"), fmt.Sprintf("catalog module %s is being deleted: name another entry (kubectl captf modules lists them)", ref.Name)))
			continue
		}
		allowed, err := h.namespaceMayUse(ctx, req.Namespace, entry)
		if err != nil {
			return nil, err
		}
		if !allowed {
			errs = append(errs, field.Forbidden(refPath.Child("name"), fmt.Sprintf("namespace %s may not use catalog module %s: its spec.namespaceSelector does not select the namespace", req.Namespace, ref.Name)))
			continue
		}
		errs = append(errs, checkCatalogVersion(entry, ref, s, refPath)...)
	}
	return errs, nil
}

// checkCatalogVersion checks that entry offers and resolved ref's version,
// and the spec's variables against it.
func checkCatalogVersion(entry *infrav1.TerraformModule, ref *infrav1.CatalogRef, s objectSpec, refPath *field.Path) field.ErrorList {
	var offered []string
	for _, v := range entry.Spec.Versions {
		offered = append(offered, v.Name)
	}
	if !slices.Contains(offered, ref.Version) {
		return field.ErrorList{field.NotFound(refPath.Child("version"), fmt.Sprintf("%s: catalog module %s offers %s", ref.Version, ref.Name, strings.Join(offered, ", ")))}
	}
	i := slices.IndexFunc(entry.Status.Versions, func(st infrav1.CatalogVersionStatus) bool { return st.Name == ref.Version })
	if i < 0 || entry.Status.Versions[i].Digest == "" {
		why := "it is being resolved"
		if i >= 0 && entry.Status.Versions[i].Error != "" {
			why = "resolving it failed: " + catalog.PlainText(entry.Status.Versions[i].Error)
		}
		return field.ErrorList{field.Forbidden(refPath.Child("version"), fmt.Sprintf("version %s of catalog module %s is not resolved yet (%s): its variables are not known; write the object again once kubectl get tfmod %s shows it Ready", ref.Version, ref.Name, why, ref.Name))}
	}
	return catalog.CheckVariables(entry.Status.Versions[i].Variables, s.Variables, fmt.Sprintf("catalog module %s %s", ref.Name, ref.Version), s.path.Child("variables"))
}

// namespaceMayUse tells whether entry's namespace selector selects
// namespace.
func (h *Handler) namespaceMayUse(ctx context.Context, namespace string, entry *infrav1.TerraformModule) (bool, error) {
	ok, err := catalog.Selects(entry.Spec.NamespaceSelector, func() (map[string]string, error) { return h.NamespaceLabels(ctx, namespace) })
	if err != nil {
		return false, fmt.Errorf("reading the labels of namespace %s: %w", namespace, err)
	}
	return ok, nil
}
