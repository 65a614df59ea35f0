package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// Authorizer says whether user may do what attrs describe; why explains a
// no.
type Authorizer func(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (ok bool, why string, err error)

// reference is a Secret or ConfigMap an object makes the manager or the
// kubelet read: its value ends up in a runner pod, where module code (and
// its outputs) can show it.
type reference struct {
	path     *field.Path
	resource string // secrets or configmaps
	name     string
	key      string // "" for every key (envFrom, the module ConfigMap)
}

// checkReferences refuses a create or update that adds a reference to a
// Secret or ConfigMap that no person who may read it allowed: CAPTF would
// read it on their behalf. A reference is a key of the object (or every
// key): one the object already had is not checked again, so others
// (Cluster API's controllers, the manager) can keep writing it, but another
// key of the same Secret is a new reference.
//
// Who allowed a new reference depends on where the object came from. One
// cloned from a template (Cluster API's MachineSet, KubeadmControlPlane and
// topology controllers write those, with their own identity, which may
// read every Secret) gets only references its template holds: the
// template's author was checked when writing it, and a ClusterClass patch
// cannot add one. Any other object's writer must be able to read it.
func (h *Handler) checkReferences(ctx context.Context, req *admissionv1.AdmissionRequest, specs []objectSpec) (field.ErrorList, error) {
	if h.Authorize == nil {
		return nil, nil
	}
	refs := references(specs)
	had := map[[3]string]bool{} // resource, name, key
	if req.Operation == admissionv1.Update {
		oldSpecs, err := specsOf(req.OldObject.Raw)
		if err != nil {
			return nil, err
		}
		had = referenceSet(references(oldSpecs))
	}
	var errs field.ErrorList
	var template *clonedFrom
	checked := map[[2]string]string{} // "" allowed, else why not
	for _, r := range refs {
		if holds(had, r) {
			continue // that key, or every key, was there
		}
		if template == nil {
			var err error
			if template, err = h.clonedFrom(ctx, req); err != nil {
				return nil, err
			}
		}
		if template.kind != "" {
			if why := template.refuses(r); why != "" {
				errs = append(errs, field.Forbidden(r.path, why))
			}
			continue
		}
		key := [2]string{r.resource, r.name}
		why, done := checked[key]
		if !done {
			ok, reason, err := h.Authorize(ctx, req.UserInfo, authorizationv1.ResourceAttributes{Namespace: req.Namespace, Verb: "get", Resource: r.resource, Name: r.name})
			if err != nil {
				return nil, fmt.Errorf("checking whether %s may read %s %s: %w", req.UserInfo.Username, r.resource, r.name, err)
			}
			why = ""
			if !ok {
				why = fmt.Sprintf("%s may not get %s %q in namespace %s, which CAPTF would read for them", req.UserInfo.Username, singular(r.resource), r.name, req.Namespace)
				if reason != "" {
					why += " (" + reason + ")"
				}
			}
			checked[key] = why
		}
		if why != "" {
			errs = append(errs, field.Forbidden(r.path, why))
		}
	}
	return errs, nil
}

// referenceSet is refs by (resource, name, key).
func referenceSet(refs []reference) map[[3]string]bool {
	set := map[[3]string]bool{}
	for _, r := range refs {
		set[[3]string{r.resource, r.name, r.key}] = true
	}
	return set
}

// holds tells whether set has r: its key, or every key of its Secret.
func holds(set map[[3]string]bool, r reference) bool {
	return set[[3]string{r.resource, r.name, r.key}] || set[[3]string{r.resource, r.name, ""}]
}

// clonedFrom is the template an object says it was cloned from; kind is
// "" for an object that says none.
type clonedFrom struct {
	kind, name, namespace string
	refs                  map[[3]string]bool // the template's; nil when it is not a CAPTF template of the namespace
	missing               string             // why refs is nil
}

// templateResources are the kinds an object may be cloned from, and their
// resources.
var templateResources = map[string]string{
	"TerraformClusterTemplate":     "terraformclustertemplates",
	"TerraformMachineTemplate":     "terraformmachinetemplates",
	"TerraformMachinePoolTemplate": "terraformmachinepooltemplates",
}

// clonedFrom reads the template the request's object was cloned from.
func (h *Handler) clonedFrom(ctx context.Context, req *admissionv1.AdmissionRequest) (*clonedFrom, error) {
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	name, named := obj.Annotations[capi.ClonedFromNameAnnotation]
	groupKind, kinded := obj.Annotations[capi.ClonedFromGroupKindAnnotation]
	if !named && !kinded {
		return &clonedFrom{}, nil
	}
	c := &clonedFrom{kind: groupKind, name: name, namespace: req.Namespace}
	kind, group, _ := strings.Cut(groupKind, ".")
	resource, ours := templateResources[kind]
	switch {
	case !named || !kinded:
		c.kind, c.missing = "a template", "of which the annotations name only half"
		return c, nil
	case group != infrav1.GroupName || !ours:
		c.missing = "which is not a CAPTF template"
		return c, nil
	case h.ReadTemplate == nil:
		c.missing = "which the webhook cannot read"
		return c, nil
	}
	c.kind = kind
	raw, err := h.ReadTemplate(ctx, req.Namespace, resource, name)
	if apierrors.IsNotFound(err) {
		// A restore brings objects back in its own order (Velero's:
		// terraformmachines before terraformmachinetemplates): its writer
		// is checked as for an object it made itself.
		if ok, err := h.restoring(ctx, req, &obj); err != nil || ok {
			return &clonedFrom{}, err
		}
		c.missing = "which is not in namespace " + req.Namespace
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s, which the object was cloned from: %w", kind, name, err)
	}
	specs, err := specsOf(raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s, which the object was cloned from: %w", kind, name, err)
	}
	c.refs = referenceSet(references(specs))
	return c, nil
}

// refuses says why r may not be added to an object cloned from c, or "".
func (c *clonedFrom) refuses(r reference) string {
	if c.refs != nil && holds(c.refs, r) {
		return ""
	}
	what := fmt.Sprintf("%s %q", singular(r.resource), r.name)
	if r.key != "" {
		what += " key " + strconv.Quote(r.key)
	}
	where := fmt.Sprintf("%s %s (%s), which the object was cloned from", c.kind, c.name, capi.ClonedFromNameAnnotation)
	if c.refs == nil {
		return fmt.Sprintf("%s is not read for an object cloned from %s, %s", what, where, c.missing)
	}
	return fmt.Sprintf("%s is not in %s: an object cloned from a template reads only what the template names (its author was checked), "+
		"so a ClusterClass patch or a controller cannot add a reference; add it to the template", what, where)
}

func singular(resource string) string {
	if resource == "configmaps" {
		return "ConfigMap"
	}
	return "Secret"
}

// references finds every Secret and ConfigMap any kind's object names:
// the module ConfigMap, variables' valueFrom, and the Job policy's env and
// envFrom, in spec, spec.defaults and a template's spec.template.spec.
func references(specs []objectSpec) []reference {
	var refs []reference
	add := func(path *field.Path, resource, name, key string) {
		refs = append(refs, reference{path, resource, name, key})
	}
	keyRefs := func(path *field.Path, secret *corev1.SecretKeySelector, configMap *corev1.ConfigMapKeySelector) {
		if secret != nil {
			add(path.Child("secretKeyRef"), "secrets", secret.Name, secret.Key)
		}
		if configMap != nil {
			add(path.Child("configMapKeyRef"), "configmaps", configMap.Name, configMap.Key)
		}
	}
	jobRefs := func(path *field.Path, j *infrav1.JobPolicy) {
		if j == nil {
			return
		}
		for i, e := range j.Env {
			if e.ValueFrom != nil {
				keyRefs(path.Child("env").Index(i).Child("valueFrom"), e.ValueFrom.SecretKeyRef, e.ValueFrom.ConfigMapKeyRef)
			}
		}
		for i, e := range j.EnvFrom {
			p := path.Child("envFrom").Index(i)
			if e.SecretRef != nil {
				add(p.Child("secretRef"), "secrets", e.SecretRef.Name, "")
			}
			if e.ConfigMapRef != nil {
				add(p.Child("configMapRef"), "configmaps", e.ConfigMapRef.Name, "")
			}
		}
	}
	for _, s := range specs {
		if s.Module.ConfigMap != nil {
			add(s.path.Child("module", "configMap", "name"), "configmaps", s.Module.ConfigMap.Name, "")
		}
		for i, v := range s.Variables {
			if v.ValueFrom != nil {
				keyRefs(s.path.Child("variables").Index(i).Child("valueFrom"), v.ValueFrom.SecretKeyRef, v.ValueFrom.ConfigMapKeyRef)
			}
		}
		jobRefs(s.path.Child("jobs"), s.Jobs)
		if s.Defaults != nil {
			jobRefs(s.path.Child("defaults", "jobs"), s.Defaults.Jobs)
		}
	}
	return refs
}

// SubjectAccessReviews is an Authorizer that asks the API server.
func SubjectAccessReviews(create func(context.Context, *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error)) Authorizer {
	return func(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
		extra := map[string]authorizationv1.ExtraValue{}
		for k, v := range user.Extra {
			extra[k] = authorizationv1.ExtraValue(v)
		}
		review, err := create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
			ResourceAttributes: &attrs,
		}})
		if err != nil {
			return false, "", err
		}
		return review.Status.Allowed, review.Status.Reason, nil
	}
}
