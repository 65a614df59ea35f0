// Package providerid is the one policy on provider IDs, the ties between
// CAPTF's machines and pools and real instances, asked alike by the
// webhook and the manager: the form of an ID; that a machine's never
// changes once set; that a write setting one is the manager's (or a
// restore's, or clusterctl move's: the webhook decides who restores); that
// an object holding IDs stays with its Cluster; that one instance has one
// holder in a namespace; and that an object restored with IDs but no state
// is known to have instances.
package providerid

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// Invalid says why id is not a provider ID, or "" when it is one. Module
// code writes it, and people read it (kubectl, events, Node objects): a
// space or a control character would let it write lines of its own.
func Invalid(id string) string {
	if scheme, rest, ok := strings.Cut(id, "://"); !ok || scheme == "" || rest == "" {
		return "must look like <provider>://<id>"
	}
	if strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) >= 0 {
		return "must not hold spaces or control characters"
	}
	return ""
}

// InvalidNew is Invalid for an ID not among held: an object keeps the IDs
// it took before the rules were tightened (its instances exist), and is
// not locked out of its other updates by them.
func InvalidNew(id string, held ...string) string {
	if slices.Contains(held, id) {
		return ""
	}
	return Invalid(id)
}

// Validate checks the form of a machine's provider ID at path, unless it
// is old's.
func Validate(id, old string, path *field.Path) field.ErrorList {
	if why := InvalidNew(id, old); why != "" {
		return field.ErrorList{field.Invalid(path, id, why)}
	}
	return nil
}

// ValidateList checks the form of a pool's provider IDs at path (those not
// in old), and that none is named twice.
func ValidateList(ids, old []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, id := range ids {
		if why := InvalidNew(id, old...); why != "" {
			errs = append(errs, field.Invalid(path.Index(i), id, why))
		}
		if seen[id] {
			errs = append(errs, field.Duplicate(path.Index(i), id))
		}
		seen[id] = true
	}
	return errs
}

// Held are the provider IDs obj holds (none for other kinds), and the
// field that holds them.
func Held(obj any) ([]string, *field.Path) {
	switch o := obj.(type) {
	case *infrav1.TerraformMachine:
		if o.Spec.ProviderID == "" {
			return nil, field.NewPath("spec", "providerID")
		}
		return []string{o.Spec.ProviderID}, field.NewPath("spec", "providerID")
	case *infrav1.TerraformMachinePool:
		return o.Spec.ProviderIDList, field.NewPath("spec", "providerIDList")
	}
	return nil, nil
}

// HoldsInstances tells whether obj holds provider IDs, and so instances
// that exist: only the manager, clusterctl move and a restore set them
// (Sets, the webhook's identity rule), each for instances it created or
// carried. An object restored with IDs but without its state has
// infrastructure, and its state is missing, not new.
func HoldsInstances(obj any) bool {
	ids, _ := Held(obj)
	return len(ids) > 0
}

// Sets tells whether a create (old nil) or an update of obj sets or
// changes its provider IDs: a write only the manager may make, or a
// restore or move.
func Sets(old, obj any) bool {
	ids, _ := Held(obj)
	if old == nil {
		return len(ids) > 0
	}
	was, _ := Held(old)
	return !slices.Equal(was, ids)
}

// CheckImmutable refuses a change of a machine's provider ID once set: it
// names the instance the Machine (and its Node) is. A pool's list changes
// with its instances.
func CheckImmutable(old, obj *infrav1.TerraformMachine) field.ErrorList {
	if old != nil && old.Spec.ProviderID != "" && obj.Spec.ProviderID != old.Spec.ProviderID {
		return field.ErrorList{field.Forbidden(field.NewPath("spec", "providerID"), "is immutable once set")}
	}
	return nil
}

// Relabels tells whether an update moves an object that holds provider
// IDs to another Cluster (its cluster-name label changed): it would hand
// the instances to that Cluster. Setting the label an object did not have
// is Cluster API's own first step, and is no move.
func Relabels(old, obj metav1.Object) bool {
	was := old.GetLabels()[capi.ClusterNameLabel]
	held, _ := Held(old)
	return len(held) > 0 && was != "" && obj.GetLabels()[capi.ClusterNameLabel] != was
}

// Index indexes machines and pools by the provider IDs they hold, within
// their namespace (Key).
const Index = "captf.io/provider-id"

// Key is an Index key: a provider ID is unique within a namespace. Cluster
// API ties a provider ID to a Node of the Machine's own Cluster, which is
// in the Machine's namespace, so an ID claimed in one namespace takes
// nothing from another; a cluster-wide index let a tenant claim, first,
// IDs that another namespace's machines would output (sequential server
// numbers), blocking them, and told the tenant who held an ID.
func Key(namespace, id string) string { return namespace + "/" + id }

// IndexFunc is Index's function, for machines and pools alike.
func IndexFunc(obj any) ([]string, error) {
	ids, _ := Held(obj)
	m, ok := obj.(metav1.Object)
	if !ok || len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(ids))
	for _, id := range ids {
		keys = append(keys, Key(m.GetNamespace(), id))
	}
	return keys, nil
}

// HeldElsewhere returns an error naming the object of obj's namespace
// that already holds one of ids (looked up in indexers, each with Index),
// or a provider ID that ids name twice.
func HeldElsewhere(indexers []cache.Indexer, obj metav1.Object, ids []string) error {
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if seen[id] {
			return fmt.Errorf("provider ID %q is output twice: each instance has its own", id)
		}
		seen[id] = true
		for _, idx := range indexers {
			holders, err := idx.ByIndex(Index, Key(obj.GetNamespace(), id))
			if err != nil {
				return err
			}
			for _, h := range holders {
				o := h.(metav1.Object)
				if o.GetUID() != obj.GetUID() {
					kind := "TerraformMachine"
					if _, ok := o.(*infrav1.TerraformMachinePool); ok {
						kind = "TerraformMachinePool"
					}
					return fmt.Errorf("provider ID %q is already held by %s %s in this namespace: a module may not claim another object's instance",
						id, kind, o.GetName())
				}
			}
		}
	}
	return nil
}
