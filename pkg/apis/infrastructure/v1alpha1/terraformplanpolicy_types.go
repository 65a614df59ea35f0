package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PlanAction is what a plan policy's rule does with a plan it matches.
// +kubebuilder:validation:Enum=Deny;RequireApproval;Allow
type PlanAction string

const (
	// PlanActionDeny: the plan never applies, whatever the approvals,
	// until the plan or the policy changes.
	PlanActionDeny PlanAction = "Deny"
	// PlanActionRequireApproval: the plan waits for an approver as under
	// approvalPolicy Manual (a destructive one for
	// captf.io/approve-destructive-plan), whatever the object's policy.
	PlanActionRequireApproval PlanAction = "RequireApproval"
	// PlanActionAllow: the plan applies without a person, where the
	// object's approval policy would have it wait. spec.protect and the
	// approval of a module's code still hold.
	PlanActionAllow PlanAction = "Allow"
)

// TerraformPlanPolicySpec selects objects and judges their plans.
type TerraformPlanPolicySpec struct {
	// NamespaceSelector selects the namespaces whose objects' plans the
	// policy judges. Unset or {} selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// CatalogEntries narrows the policy to objects that name one of these
	// module catalog entries (spec.module.catalogRef.name). Empty: every
	// object of the selected namespaces.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	CatalogEntries []string `json:"catalogEntries,omitempty"`

	// Rules judge each plan of an apply. Of the rules (of every policy
	// that selects the object) that match a plan, Deny wins over
	// RequireApproval, which wins over Allow; a plan no rule matches is
	// left to the object's approval policy.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Rules []PlanRule `json:"rules"`
}

// PlanRule is one rule of a plan policy.
type PlanRule struct {
	// Name of the rule, unique in the policy; the verdict names it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Expression is a CEL expression, true when the rule matches the plan.
	// It reads plan (the plan as `terraform show -json` prints it), summary
	// (add, change, destroy, replace, forget, import: counts; protected:
	// the addresses spec.protect covers that the plan changes) and object
	// (kind, namespace, name, labels, catalogEntry, catalogVersion). A rule
	// that fails to evaluate matches when it denies or requires approval,
	// and does not when it allows. See docs/policy.md.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Expression string `json:"expression"`

	// Action is what a match does: Deny, RequireApproval or Allow.
	// +required
	Action PlanAction `json:"action"`

	// Message is what people read on the object and in the run record when
	// the rule decides, e.g. "no destroy of a database".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=terraformplanpolicies,scope=Cluster,shortName=tfpolicy,categories=captf
// +kubebuilder:printcolumn:name="Entries",type=string,JSONPath=`.spec.catalogEntries`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformPlanPolicy judges the plans of the objects it selects before
// they apply: it denies them, has them wait for an approver, or lets them
// apply without one. The platform team owns it; the webhook refuses an
// expression that does not compile.
type TerraformPlanPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformPlanPolicySpec `json:"spec"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformPlanPolicyList is a list of TerraformPlanPolicies.
type TerraformPlanPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformPlanPolicy `json:"items"`
}
