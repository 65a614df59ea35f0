package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformMachineSpec is the desired state of a TerraformMachine.
type TerraformMachineSpec struct {
	WorkspaceSpec `json:",inline"`

	// ProviderID is the machine's ID as its Node reports it. The manager sets
	// it from the module's provider_id output; only the manager may set it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="providerID is immutable once set"
	ProviderID string `json:"providerID,omitempty"`
}

// TerraformMachineStatus is the observed state of a TerraformMachine.
type TerraformMachineStatus struct {
	WorkspaceStatus `json:",inline"`

	// Addresses come from the module's addresses output.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// FailureDomain is where the machine was placed, from the module's
	// failure_domain output.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`
}

// MachineAddress is one address of a machine.
type MachineAddress struct {
	// Type of the address.
	// +required
	// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
	Type string `json:"type"`

	// Address itself.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=terraformmachines,scope=Namespaced,shortName=tfm,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Machine",type=string,priority=1,JSONPath=`.metadata.ownerReferences[?(@.kind=="Machine")].name`
// +kubebuilder:printcolumn:name="Drifted",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Drifted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformMachine is a Cluster API infrastructure machine whose
// infrastructure is a Terraform module.
type TerraformMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformMachineSpec `json:"spec"`
	// +optional
	Status TerraformMachineStatus `json:"status,omitempty,omitzero"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformMachineList is a list of TerraformMachines.
type TerraformMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachine `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=terraformmachinetemplates,scope=Namespaced,shortName=tfmt,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="CPU",type=string,JSONPath=`.status.capacity.cpu`
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.capacity.memory`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformMachineTemplate is the template of TerraformMachines, for
// MachineDeployments, MachineSets and control planes.
type TerraformMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformMachineTemplateSpec `json:"spec"`
	// +optional
	Status TerraformMachineTemplateStatus `json:"status,omitempty,omitzero"`
}

// TerraformMachineTemplateSpec holds the template and hints for the
// cluster-autoscaler.
type TerraformMachineTemplateSpec struct {
	// Template is what TerraformMachines are made from. It is immutable: to
	// change machines, make a new template and point to it.
	// +required
	Template TerraformMachineTemplateResource `json:"template"`

	// Capacity of one machine (cpu, memory, nvidia.com/gpu, ...), copied to
	// status.capacity so the cluster-autoscaler can scale from zero.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// NodeInfo of one machine, copied to status.nodeInfo.
	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`
}

// TerraformMachineTemplateResource is what a TerraformMachine is made from.
type TerraformMachineTemplateResource struct {
	// +optional
	ObjectMeta TemplateMeta `json:"metadata,omitempty,omitzero"`
	// +required
	Spec TerraformMachineSpec `json:"spec"`
}

// TerraformMachineTemplateStatus is what the cluster-autoscaler reads.
type TerraformMachineTemplateStatus struct {
	// Capacity of one machine.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// NodeInfo of one machine.
	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`

	// Conditions of the template.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeInfo describes the Nodes a template makes.
type NodeInfo struct {
	// +optional
	// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
	Architecture string `json:"architecture,omitempty"`
	// +optional
	// +kubebuilder:validation:Enum=linux;windows
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformMachineTemplateList is a list of TerraformMachineTemplates.
type TerraformMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformMachineTemplate `json:"items"`
}
