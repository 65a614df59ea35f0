package catalog

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// CheckVariables checks an object's variables against the ones the
// catalog version declares: every name is declared, every required one is
// set (CAPTF's own captf_* inputs are CAPTF's to set), every literal value
// is of its type. A value read from a Secret or ConfigMap is checked by
// the plan: the webhook does not read it. Messages carry the module's
// description of the variable.
func CheckVariables(declared []infrav1.ModuleVariable, set []infrav1.Variable, entry string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	byName := map[string]infrav1.ModuleVariable{}
	for _, d := range declared {
		byName[d.Name] = d
	}
	given := map[string]bool{}
	for i, v := range set {
		given[v.Name] = true
		d, ok := byName[v.Name]
		if !ok {
			errs = append(errs, field.NotFound(path.Index(i).Child("name"), fmt.Sprintf("%s: %s declares no such variable (it declares %s)", v.Name, entry, names(declared))))
			continue
		}
		if v.Value != nil {
			if why := CheckValue(d, v.Value.Raw); why != "" {
				errs = append(errs, field.Invalid(path.Index(i).Child("value"), string(v.Value.Raw), fmt.Sprintf("%s %s%s", v.Name, why, described(d))))
			}
		}
	}
	for _, d := range declared {
		if d.Required && !given[d.Name] && !strings.HasPrefix(d.Name, "captf_") {
			errs = append(errs, field.Required(path, fmt.Sprintf("%s requires variable %s (%s)%s", entry, d.Name, typeOrAny(d), described(d))))
		}
	}
	return errs
}

func names(vars []infrav1.ModuleVariable) string {
	var out []string
	for _, v := range vars {
		if !strings.HasPrefix(v.Name, "captf_") {
			out = append(out, v.Name)
		}
	}
	if len(out) == 0 {
		return "none a writer sets"
	}
	return strings.Join(out, ", ")
}

func typeOrAny(d infrav1.ModuleVariable) string {
	if d.Type == "" {
		return "any type"
	}
	return d.Type
}

func described(d infrav1.ModuleVariable) string {
	if d.Description == "" {
		return ""
	}
	return ": " + d.Description
}

// Selects tells whether an entry's namespace selector selects a namespace
// whose labels nsLabels reads (only when the selector needs them). No
// selector selects none, {} every namespace, a selector that does not
// parse none: the entry's to fix.
func Selects(selector *metav1.LabelSelector, nsLabels func() (map[string]string, error)) (bool, error) {
	if selector == nil {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return false, nil
	}
	if sel.Empty() {
		return true, nil
	}
	l, err := nsLabels()
	if err != nil {
		return false, err
	}
	return sel.Matches(labels.Set(l)), nil
}
