package workspace

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// mergePatch is the JSON merge patch (RFC 7386) that turns base's metadata
// and spec into obj's, holding base's resourceVersion. Applied, it changes
// only what the sync changed, so what the cache does not hold (annotations
// no controller reads) stays as it is on the server; and the API server
// refuses it with a conflict when another writer changed the object since
// base was read, as it refuses a stale update.
func mergePatch(base, obj runtime.Object) ([]byte, error) {
	from, err := runtime.DefaultUnstructuredConverter.ToUnstructured(base)
	if err != nil {
		return nil, err
	}
	to, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(from, "status") // written through its subresource
	delete(to, "status")
	// Annotations key by key, even when none is left: the last one the
	// cache holds removed must not remove the map, with the annotations the
	// cache left out in it.
	for _, o := range []map[string]any{from, to} {
		if m, ok := o["metadata"].(map[string]any); ok && !isObject(m["annotations"]) {
			m["annotations"] = map[string]any{}
		}
	}
	patch := mergeDiff(from, to)
	m, ok := patch["metadata"].(map[string]any)
	if !ok {
		m = map[string]any{}
		patch["metadata"] = m
	}
	if a, ok := m["annotations"].(map[string]any); ok && len(a) == 0 {
		delete(m, "annotations")
	}
	was, err := meta.Accessor(base)
	if err != nil {
		return nil, err
	}
	m["resourceVersion"] = was.GetResourceVersion()
	return json.Marshal(patch)
}

// mergeDiff is the merge patch from one JSON object to another: a key
// added or changed takes its new value (objects compared key by key, lists
// replaced whole), a key removed is null.
func mergeDiff(from, to map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range to {
		old, ok := from[k]
		switch {
		case ok && reflect.DeepEqual(old, v):
		case isObject(old) && isObject(v):
			out[k] = mergeDiff(old.(map[string]any), v.(map[string]any))
		default:
			out[k] = v
		}
	}
	for k := range from {
		if _, ok := to[k]; !ok {
			out[k] = nil
		}
	}
	return out
}

func isObject(v any) bool {
	_, ok := v.(map[string]any)
	return ok
}

// cachedAnnotations are the annotations of a Terraform* object the
// controllers read: the caches keep these and no other.
var cachedAnnotations = map[string]bool{
	infrav1.AnnotationApprovePlan: true, infrav1.AnnotationApproveDestructivePlan: true, infrav1.AnnotationApproveModule: true,
	infrav1.AnnotationRestoreState: true, infrav1.AnnotationAbandonInfrastructure: true, infrav1.AnnotationAdoptState: true,
	capi.PausedAnnotation: true, capi.ManagedByAnnotation: true, capi.BlockMoveAnnotation: true,
}

// maxCachedAnnotation bounds a kept annotation's value in the caches. No
// value the controllers act on is longer (the webhook refuses longer
// approvals and backup names); a longer one, admitted before the webhook
// checked it, is kept cut, so that it still counts as present and still
// matches nothing.
const maxCachedAnnotation = 1024

// CachedAnnotations are the annotations of a Terraform* object the caches
// keep: those the controllers read, each bounded. The rest can be large
// (kubectl's last-applied-configuration repeats the whole object; any
// writer may add up to 256 KiB, under any key) and would take the
// manager's memory for nothing; the controllers write objects by patch
// (mergePatch), which leaves what the cache left out as it is.
func CachedAnnotations(annotations map[string]string) map[string]string {
	var kept map[string]string
	for k, v := range annotations {
		if !cachedAnnotations[k] {
			continue
		}
		if len(v) > maxCachedAnnotation {
			v = strings.Clone(v[:maxCachedAnnotation]) // not a slice that holds the whole value
		}
		if kept == nil {
			kept = map[string]string{}
		}
		kept[k] = v
	}
	return kept
}

// update writes what the sync changed of obj's metadata and spec since
// base, as a patch: the cache leaves out what no controller reads, which an
// update of the cached object would erase. obj keeps the status this sync
// computed and takes the new resourceVersion and generation.
func (c *Controller[T]) update(ctx context.Context, base, obj T) error {
	patch, err := mergePatch(base, obj)
	if err != nil {
		return err
	}
	updated, err := c.kind.Client(c.captf, obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: c.fieldManager})
	if apierrors.IsNotFound(err) && obj.GetDeletionTimestamp() != nil {
		return nil // the last finalizer went
	}
	if err != nil {
		return err
	}
	obj.SetResourceVersion(updated.GetResourceVersion())
	obj.SetGeneration(updated.GetGeneration())
	c.written.Wrote(cache.MetaObjectToName(obj), updated.GetResourceVersion())
	return nil
}
