package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TerraformModuleSpec is an entry of the module catalog: where a reviewed
// module comes from, the versions the platform team offers, who may use it
// and the credentials its source needs.
type TerraformModuleSpec struct {
	// Source is where every version of the module is fetched from.
	// +required
	Source CatalogSource `json:"source"`

	// Versions are the versions objects may name. Each is resolved once;
	// a version whose ref is changed is resolved again, so publish a new
	// version instead.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Versions []CatalogVersion `json:"versions"`

	// NamespaceSelector selects the namespaces whose objects may use the
	// module. Unset selects none; {} selects every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// CredentialsSecretName names a Secret in the manager's namespace whose
	// keys are the files the source needs: .git-credentials (git over
	// HTTPS), ssh-privatekey with known_hosts (git over SSH), token (a
	// registry's token). It must be labelled captf.io/catalog-credentials.
	// Runner pods read it only while fetching the module; tenants never
	// read it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecretName string `json:"credentialsSecretName,omitempty"`
}

// CatalogSource is where a catalog module comes from. Exactly one of git,
// registry and configMap is set.
// +kubebuilder:validation:XValidation:rule="[has(self.git), has(self.registry), has(self.oci), has(self.configMap)].filter(x, x).size() == 1",message="exactly one of git, registry, oci or configMap must be set"
type CatalogSource struct {
	// Git is a git repository over HTTPS (or HTTP), SSH or a file URL.
	// +optional
	Git *GitSource `json:"git,omitempty"`

	// Registry is a module in a registry that speaks Terraform's module
	// registry protocol.
	// +optional
	Registry *RegistrySource `json:"registry,omitempty"`

	// OCI is a repository of an OCI registry holding module packages as
	// OpenTofu publishes them (artifact type
	// application/vnd.opentofu.modulepkg, one archive/zip layer). The
	// runner fetches them itself, so they run under Terraform too.
	// +optional
	OCI *OCISource `json:"oci,omitempty"`

	// ConfigMap takes each version's files from a ConfigMap of the
	// manager's namespace (the version's ref names it); each key is a file.
	// +optional
	ConfigMap *CatalogConfigMapSource `json:"configMap,omitempty"`
}

// GitSource is a module in a git repository.
type GitSource struct {
	// URL of the repository, as git clones it (https://, ssh://, file://).
	// No credentials in it (they would show in status and errors): they
	// go in the entry's credentials Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^((https?|file)://[^\s?#@]+|ssh://[^\s?#]+)$`
	URL string `json:"url"`

	// Path is the module's directory inside the repository.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	Path string `json:"path,omitempty"`
}

// RegistrySource is a module of a module registry.
type RegistrySource struct {
	// Address is HOST/NAMESPACE/NAME/SYSTEM.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+(:[0-9]+)?/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+$`
	Address string `json:"address"`
}

// OCISource is a repository of an OCI registry.
type OCISource struct {
	// Repository is HOST[:PORT]/PATH, as in oci://HOST/PATH.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+$`
	Repository string `json:"repository"`
}

// CatalogConfigMapSource takes module files from ConfigMaps of the
// manager's namespace.
type CatalogConfigMapSource struct{}

// CatalogVersion is one version of a catalog module.
type CatalogVersion struct {
	// Name is what objects name in spec.module.catalogRef.version.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._+-]*$`
	Name string `json:"name"`

	// Ref is what the source calls the version: a git tag, branch or
	// commit; a registry version; an OCI tag or manifest digest
	// (sha256:...); a ConfigMap's name. Defaults to name.
	// Whatever it names is resolved once, to a commit or a digest recorded
	// in status, and runs take that.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._+/:-]*$`
	Ref string `json:"ref,omitempty"`

	// Digest, when set, is the only code the version may resolve to (as
	// status.versions[].digest records it): copy it from status to keep
	// the pin when the entry is made again (GitOps, a restore without
	// status), where the ref would otherwise be resolved anew.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest,omitempty"`
}

// TerraformModuleStatus is what the catalog learned of each version.
type TerraformModuleStatus struct {
	// Versions holds one entry per version of spec.versions once it was
	// resolved or failed to be.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Versions []CatalogVersionStatus `json:"versions,omitempty"`

	// Conditions: Ready is True when every version is resolved.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// CatalogVersionStatus is one version as resolved.
type CatalogVersionStatus struct {
	// Name of the version.
	// +required
	Name string `json:"name"`

	// Ref is the ref it was resolved from.
	// +optional
	Ref string `json:"ref,omitempty"`

	// Source is the pinned source address runs fetch (a git URL at a
	// commit). None for a registry version: runs ask the registry where
	// it is (a location may be a short-lived, signed URL), and run only
	// code of the digest.
	// +optional
	Source string `json:"source,omitempty"`

	// Commit is the git commit the ref named when it was resolved.
	// +optional
	Commit string `json:"commit,omitempty"`

	// Digest is the sha256 digest of the module's code as terraform init
	// leaves it (the same digest run records and module approvals name).
	// Runs of objects that use the version run only code of this digest.
	// +optional
	Digest string `json:"digest,omitempty"`

	// ResolvedTime is when the version was resolved.
	// +optional
	ResolvedTime *metav1.Time `json:"resolvedTime,omitempty"`

	// Error says why the version could not be resolved; empty once it is.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Error string `json:"error,omitempty"`

	// Variables are the module's input variables, as its code declares
	// them; the webhook checks objects' spec.variables against them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=512
	Variables []ModuleVariable `json:"variables,omitempty"`

	// Outputs are the module's outputs.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=512
	Outputs []ModuleOutput `json:"outputs,omitempty"`

	// UsedBy counts the objects that name the version.
	// +optional
	UsedBy int32 `json:"usedBy,omitempty"`
}

// ModuleVariable is an input variable a module declares.
type ModuleVariable struct {
	// +required
	Name string `json:"name"`
	// Type is the variable's type constraint as written (string,
	// list(string), object({...})); empty is any.
	// +optional
	Type string `json:"type,omitempty"`
	// Description is the module's own.
	// +optional
	Description string `json:"description,omitempty"`
	// Default is the default value as JSON; unset with required.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Default *runtime.RawExtension `json:"default,omitempty"`
	// Required: the variable has no default.
	// +optional
	Required bool `json:"required,omitempty"`
	// Sensitive: the module marks the variable sensitive.
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
}

// ModuleOutput is an output a module declares.
type ModuleOutput struct {
	// +required
	Name string `json:"name"`
	// +optional
	Description string `json:"description,omitempty"`
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
}

// CatalogRef names a catalog module and one of its versions.
type CatalogRef struct {
	// Name of the TerraformModule.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Version is one of the module's spec.versions names.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=terraformmodules,scope=Cluster,shortName=tfmod,categories=captf
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.git.url`
// +kubebuilder:printcolumn:name="Registry",type=string,JSONPath=`.spec.source.registry.address`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// TerraformModule is an entry of the module catalog: a module the platform
// team reviewed, the versions it offers, pinned to digests, and the
// namespaces that may use it. Objects name it in spec.module.catalogRef.
type TerraformModule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec TerraformModuleSpec `json:"spec"`
	// +optional
	Status TerraformModuleStatus `json:"status,omitempty,omitzero"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true

// TerraformModuleList is a list of TerraformModules.
type TerraformModuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TerraformModule `json:"items"`
}
