package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformMachinePoolSpec is the desired state of a TerraformMachinePool.
type TerraformMachinePoolSpec struct {
	WorkspaceSpec `json:",inline"`

	// ProviderIDList lists the provider IDs of the pool's instances, from the
	// module's provider_ids output. Only the manager may set it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	ProviderIDList []string `json:"providerIDList,omitempty"`
}

// TerraformMachinePoolStatus is the observed state of a TerraformMachinePool.
type TerraformMachinePoolStatus struct {
	WorkspaceStatus `json:",inline"`

	// Replicas is the number of instances the module reports.
	// +optional
	Replicas int32 `json:"replicas"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=terraformmachinepools,scope=Namespaced,shortName=tfmp,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Drifted",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Drifted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformMachinePool is a Cluster API infrastructure machine pool whose
// infrastructure is a Terraform module.
type TerraformMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformMachinePoolSpec `json:"spec"`
	// +optional
	Status TerraformMachinePoolStatus `json:"status,omitempty,omitzero"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformMachinePoolList is a list of TerraformMachinePools.
type TerraformMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachinePool `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=terraformmachinepooltemplates,scope=Namespaced,shortName=tfmpt,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformMachinePoolTemplate is the template of TerraformMachinePools, for
// the machine pool classes of a ClusterClass.
type TerraformMachinePoolTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformMachinePoolTemplateSpec `json:"spec"`
}

// TerraformMachinePoolTemplateSpec holds the template.
type TerraformMachinePoolTemplateSpec struct {
	// Template is what TerraformMachinePools are made from. It is immutable:
	// to change pools, make a new template and point to it.
	// +required
	Template TerraformMachinePoolTemplateResource `json:"template"`
}

// TerraformMachinePoolTemplateResource is what a TerraformMachinePool is
// made from.
type TerraformMachinePoolTemplateResource struct {
	// +optional
	ObjectMeta TemplateMeta `json:"metadata,omitempty,omitzero"`
	// +required
	Spec TerraformMachinePoolSpec `json:"spec"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformMachinePoolTemplateList is a list of TerraformMachinePoolTemplates.
type TerraformMachinePoolTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachinePoolTemplate `json:"items"`
}
