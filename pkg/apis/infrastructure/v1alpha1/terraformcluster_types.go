package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TerraformClusterSpec is the desired state of a TerraformCluster.
type TerraformClusterSpec struct {
	WorkspaceSpec `json:",inline"`

	// ControlPlaneEndpoint is the endpoint of the cluster's API server. When
	// unset, CAPTF fills it from the module's control_plane_endpoint output.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// ApprovalPolicy says which plans wait for an approval annotation:
	// Destructive (default) holds plans that delete or replace resources until
	// captf.io/approve-destructive-plan names them; Manual holds every plan
	// with changes until captf.io/approve-plan names it.
	// +optional
	// +kubebuilder:default=Destructive
	ApprovalPolicy ApprovalPolicy `json:"approvalPolicy,omitempty"`

	// Protect lists resource address patterns no plan may destroy, replace
	// or forget, whatever the approvals (reason ProtectedResourceChange), a
	// delete of the TerraformCluster included, until the pattern is removed.
	// A pattern covers its address and all inside it (module.db covers
	// module.db.x.y); * stands for any characters (aws_db_instance.*).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Protect []string `json:"protect,omitempty"`

	// Defaults apply to the cluster's TerraformMachines and
	// TerraformMachinePools unless they set their own values.
	// +optional
	Defaults *ClusterDefaults `json:"defaults,omitempty"`
}

// ApprovalPolicy says which plans of a TerraformCluster wait for approval.
// +kubebuilder:validation:Enum=Destructive;Manual
type ApprovalPolicy string

const (
	ApprovalPolicyDestructive ApprovalPolicy = "Destructive"
	ApprovalPolicyManual      ApprovalPolicy = "Manual"
)

// ClusterDefaults are defaults for the objects of one cluster.
type ClusterDefaults struct {
	// Jobs is the job policy of the cluster's machines and pools.
	// +optional
	Jobs *JobPolicy `json:"jobs,omitempty"`
}

// APIEndpoint is an API server endpoint.
type APIEndpoint struct {
	// Host is a DNS name or IP address.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`

	// Port is the TCP port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// IsZero reports whether neither host nor port is set.
func (e APIEndpoint) IsZero() bool { return e.Host == "" && e.Port == 0 }

// TerraformClusterStatus is the observed state of a TerraformCluster.
type TerraformClusterStatus struct {
	WorkspaceStatus `json:",inline"`

	// FailureDomains come from the module's failure_domains output.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`
}

// FailureDomain is one failure domain of the cluster, in Cluster API's
// v1beta2 shape.
type FailureDomain struct {
	// Name of the failure domain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// ControlPlane says whether control-plane machines may be placed here.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// Attributes are free-form properties of the failure domain.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=terraformclusters,scope=Namespaced,shortName=tfc,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.metadata.labels['cluster\.x-k8s\.io/cluster-name']`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.controlPlaneEndpoint.host`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Plan",type=string,priority=1,JSONPath=`.status.lastPlan.hash`
// +kubebuilder:printcolumn:name="Drifted",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Drifted")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformCluster is a Cluster API infrastructure cluster whose
// infrastructure is a Terraform module.
type TerraformCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformClusterSpec `json:"spec"`
	// +optional
	Status TerraformClusterStatus `json:"status,omitempty,omitzero"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformClusterList is a list of TerraformClusters.
type TerraformClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformCluster `json:"items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=terraformclustertemplates,scope=Namespaced,shortName=tfct,categories=cluster-api;captf
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformClusterTemplate is the template of a TerraformCluster, for
// ClusterClass.
type TerraformClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformClusterTemplateSpec `json:"spec"`
}

// TerraformClusterTemplateSpec holds the template.
type TerraformClusterTemplateSpec struct {
	// +required
	Template TerraformClusterTemplateResource `json:"template"`
}

// TerraformClusterTemplateResource is what a TerraformCluster is made from.
type TerraformClusterTemplateResource struct {
	// +optional
	ObjectMeta TemplateMeta `json:"metadata,omitempty,omitzero"`
	// +required
	Spec TerraformClusterSpec `json:"spec"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformClusterTemplateList is a list of TerraformClusterTemplates.
type TerraformClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformClusterTemplate `json:"items"`
}
