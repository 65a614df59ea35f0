package webhook

import (
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/planpolicy"
)

// ValidateTerraformPlanPolicy refuses a policy whose rules would fail at
// every plan: an expression that does not compile or is no bool, a
// namespace selector that is not one. The CRD checks the rest.
func ValidateTerraformPlanPolicy(p *infrav1.TerraformPlanPolicy) field.ErrorList {
	spec := field.NewPath("spec")
	errs := metav1validation.ValidateLabelSelector(p.Spec.NamespaceSelector, metav1validation.LabelSelectorValidationOptions{}, spec.Child("namespaceSelector"))
	for i, r := range p.Spec.Rules {
		if _, err := planpolicy.Compile(r.Expression); err != nil {
			errs = append(errs, field.Invalid(spec.Child("rules").Index(i).Child("expression"), r.Expression, err.Error()))
		}
	}
	return errs
}
