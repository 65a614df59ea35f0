package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// WorkspaceSpec is what every kind that runs Terraform has in common: the
// module, its variables, how its Jobs run and how drift is handled.
type WorkspaceSpec struct {
	// Module is the Terraform module that describes this object's infrastructure.
	// +required
	Module Module `json:"module"`

	// Variables are the module's input variables. CAPTF adds its own inputs, all
	// named captf_*, see docs/inputs.md.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Variables []Variable `json:"variables,omitempty"`

	// Jobs sets how the Jobs that run Terraform for this object are run. Unset
	// fields fall back to the TerraformCluster's spec.defaults.jobs, then to
	// CAPTF's defaults.
	// +optional
	Jobs *JobPolicy `json:"jobs,omitempty"`

	// Drift sets how often the infrastructure is compared with the module.
	// +optional
	Drift *DriftPolicy `json:"drift,omitempty"`
}

// Module names a Terraform module. Exactly one of source, configMap, inline
// and catalogRef is set.
// +kubebuilder:validation:XValidation:rule="[has(self.source), has(self.configMap), has(self.inline), has(self.catalogRef)].filter(x, x).size() == 1",message="exactly one of source, configMap, inline or catalogRef must be set"
type Module struct {
	// Source is a module source address as Terraform's module block takes it:
	// a registry address, a git URL, an https archive, ...
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Source string `json:"source,omitempty"`

	// ConfigMap takes the module's files from the keys of a ConfigMap in the
	// object's namespace; each key is a file name.
	// +optional
	ConfigMap *ConfigMapModule `json:"configMap,omitempty"`

	// Inline is a small module written in HCL, stored as main.tf.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=65536
	Inline string `json:"inline,omitempty"`

	// CatalogRef takes the module from the module catalog: a version of a
	// TerraformModule the object's namespace may use. Its code is the code
	// the catalog pinned, and its variables are checked when the object is
	// written.
	// +optional
	CatalogRef *CatalogRef `json:"catalogRef,omitempty"`
}

// ConfigMapModule names a ConfigMap that holds a module's files.
type ConfigMapModule struct {
	// Name of the ConfigMap, in the object's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Variable is one input variable of the module.
//
// Exactly one of value and valueFrom is set: the webhook checks it, as CEL
// cannot see a schemaless value.
type Variable struct {
	// Name of the Terraform variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_-]*$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('captf_')",message="names starting with captf_ are reserved for the inputs CAPTF provides"
	Name string `json:"name"`

	// Value is the variable's value as JSON: a string, number, bool, list or object.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Value *runtime.RawExtension `json:"value,omitempty"`

	// ValueFrom reads the value from a key of a Secret or ConfigMap in the
	// object's namespace.
	// +optional
	ValueFrom *VariableSource `json:"valueFrom,omitempty"`

	// Sensitive keeps the value out of plan output. Values from Secrets are
	// always sensitive.
	// +optional
	Sensitive bool `json:"sensitive,omitempty"`
}

// VariableSource is where a variable's value is read from.
// +kubebuilder:validation:XValidation:rule="has(self.secretKeyRef) != has(self.configMapKeyRef)",message="exactly one of secretKeyRef or configMapKeyRef must be set"
type VariableSource struct {
	// SecretKeyRef selects a key of a Secret.
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`

	// ConfigMapKeyRef selects a key of a ConfigMap.
	// +optional
	ConfigMapKeyRef *corev1.ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`

	// Format says how the key's content is read: String (default) passes it as
	// a string, JSON parses it as a JSON value.
	// +optional
	// +kubebuilder:default=String
	Format ValueFormat `json:"format,omitempty"`
}

// ValueFormat says how the content of a Secret or ConfigMap key becomes a value.
// +kubebuilder:validation:Enum=String;JSON
type ValueFormat string

const (
	ValueFormatString ValueFormat = "String"
	ValueFormatJSON   ValueFormat = "JSON"
)

// JobPolicy says how the Jobs that run Terraform are run. Every field is
// optional; an unset field is inherited.
// +kubebuilder:validation:XValidation:rule="!has(self.lockTimeout) || !has(self.activeDeadlineSeconds) || duration(self.lockTimeout).getSeconds() < self.activeDeadlineSeconds",message="lockTimeout must be shorter than activeDeadlineSeconds"
type JobPolicy struct {
	// Resources of the runner container. Default: requests 250m CPU and 512Mi
	// memory, a 2Gi memory limit and no CPU limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ActiveDeadlineSeconds bounds one Job's run. Default 3600.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`

	// LockTimeout is how long a run waits for the state lock. Default 5m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	LockTimeout *metav1.Duration `json:"lockTimeout,omitempty"`

	// SuccessfulJobsHistoryLimit is how many succeeded Jobs are kept per
	// operation. Default 3, but unless it is set a drift check that found
	// no drift is kept only until its result is in the status (the Drifted
	// condition, lastDriftCheckTime), and of those that found drift the
	// newest, while Drifted is True.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit,omitempty"`

	// FailedJobsHistoryLimit is how many failed Jobs are kept per operation.
	// Default 3.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedJobsHistoryLimit *int32 `json:"failedJobsHistoryLimit,omitempty"`

	// PodSecurityContext of the runner pod.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`

	// SecurityContext of the runner container.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`

	// NodeSelector of the runner pod.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the runner pod.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Env adds environment variables to the runner, typically provider
	// credentials (TF_VAR_*, AWS_*, ...) from Secrets.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []corev1.EnvVar `json:"env,omitempty"`

	// EnvFrom adds all keys of Secrets or ConfigMaps as environment variables.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// ServiceAccountName runs the runner as this ServiceAccount instead of
	// captf-runner, e.g. for cloud workload identity. The ServiceAccount must
	// carry the label captf.io/runner=true: that label is how a namespace's
	// owner allows CAPTF to run Terraform with its rights.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// PlanServiceAccountName runs the runs that only plan as this
	// ServiceAccount instead of serviceAccountName: drift checks and, under
	// approvalPolicy Manual, applies that hold no approval (their plan
	// waits). Give it a cloud identity that may only read, as plan and apply
	// roles are split. The ServiceAccount must carry the label
	// captf.io/runner=true.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PlanServiceAccountName string `json:"planServiceAccountName,omitempty"`
}

// DriftPolicy says how drift is detected and handled.
type DriftPolicy struct {
	// Enabled turns periodic drift checks on or off. Default true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Interval between drift checks. Default: the manager's
	// --drift-default-interval (30m).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="must be between 1s and 168h"
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Remediation is what happens when drift is found: None (default) only
	// reports it with the Drifted condition, Apply applies the module again.
	// On a TerraformCluster an apply goes through its approval policy.
	// +optional
	// +kubebuilder:default=None
	Remediation DriftRemediation `json:"remediation,omitempty"`
}

// DriftRemediation is what happens when drift is found.
// +kubebuilder:validation:Enum=None;Apply
type DriftRemediation string

const (
	DriftRemediationNone  DriftRemediation = "None"
	DriftRemediationApply DriftRemediation = "Apply"
)

// WorkspaceStatus is the status every kind that runs Terraform has in common.
type WorkspaceStatus struct {
	// Conditions: Ready, Paused, PlanAwaitingApproval, DestructivePlanBlocked,
	// Drifted and the conditions listed in docs/troubleshooting.md.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Initialization tells Cluster API when the infrastructure is provisioned.
	// +optional
	Initialization *Initialization `json:"initialization,omitempty"`

	// Ready is true once the infrastructure is provisioned and the last apply
	// succeeded. Cluster API v1beta1 consumers (and MachinePools) read it.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// ObservedGeneration is the generation the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AppliedInputsHash is the hash of the module reference and inputs of the
	// last successful apply.
	// +optional
	AppliedInputsHash string `json:"appliedInputsHash,omitempty"`

	// AppliedPlanHash is the hash of the plan the last successful apply carried
	// out.
	// +optional
	AppliedPlanHash string `json:"appliedPlanHash,omitempty"`

	// AppliedModule is the digest of the module code the last successful
	// apply ran: under an approval policy, code of another digest waits
	// for an approver (captf.io/approve-module).
	// +optional
	AppliedModule string `json:"appliedModule,omitempty"`

	// AppliedRecord is the run record of the last successful apply, and
	// AppliedRecordDigest the digest of what its runner wrote there: the
	// files of the applied code that kubectl captf compares a change with.
	// +optional
	AppliedRecord string `json:"appliedRecord,omitempty"`
	// +optional
	AppliedRecordDigest string `json:"appliedRecordDigest,omitempty"`

	// Outputs are the module's non-sensitive outputs after the last apply or
	// refresh. Sensitive outputs are never shown.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Outputs map[string]runtime.RawExtension `json:"outputs,omitempty"`

	// LastPlan is the latest plan of an apply or drift run.
	// +optional
	LastPlan *PlanStatus `json:"lastPlan,omitempty"`

	// LastJobs names the latest Job of each operation.
	// +optional
	// +listType=map
	// +listMapKey=operation
	// +kubebuilder:validation:MaxItems=8
	LastJobs []JobReference `json:"lastJobs,omitempty"`

	// LastAppliedTime is when an apply last succeeded.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`

	// LastRefreshTime is when a refresh last succeeded.
	// +optional
	LastRefreshTime *metav1.Time `json:"lastRefreshTime,omitempty"`

	// LastDriftCheckTime is when a drift check last finished.
	// +optional
	LastDriftCheckTime *metav1.Time `json:"lastDriftCheckTime,omitempty"`

	// LastRestore is the last restore of a state backup
	// (captf.io/restore-state).
	// +optional
	LastRestore *StateRestore `json:"lastRestore,omitempty"`
}

// StateRestore records a restore of a state backup.
type StateRestore struct {
	// Backup is the backup restored.
	Backup string `json:"backup"`
	// PreviousState is the backup the state before the restore became.
	// +optional
	PreviousState string `json:"previousState,omitempty"`
	// Time is when the restore was done.
	Time metav1.Time `json:"time"`
}

// Initialization is the part of the status the Cluster API contract reads.
type Initialization struct {
	// Provisioned is true once the infrastructure has been created.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// PlanStatus describes one plan.
type PlanStatus struct {
	// Hash is the digest of the exact planned changes. Approval annotations
	// name it.
	// +required
	Hash string `json:"hash"`

	// Operation that made the plan.
	// +required
	Operation Operation `json:"operation"`

	// Summary counts the planned changes.
	// +required
	Summary PlanSummary `json:"summary"`

	// Time the plan was made.
	// +required
	Time metav1.Time `json:"time"`
}

// PlanSummary counts a plan's resource changes and names a few of each kind.
type PlanSummary struct {
	Add     int32 `json:"add"`
	Change  int32 `json:"change"`
	Destroy int32 `json:"destroy"`
	Replace int32 `json:"replace"`
	// Forget counts resources that leave the state but not the cloud
	// (removed blocks with destroy = false): CAPTF stops managing them.
	// +optional
	Forget int32 `json:"forget,omitempty"`
	// Import counts resources that enter the state (import blocks).
	// +optional
	Import int32 `json:"import,omitempty"`

	// Addresses of up to five resources per kind of change.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=30
	Resources []PlannedResource `json:"resources,omitempty"`
}

// PlannedResource is one resource a plan changes.
type PlannedResource struct {
	// Address of the resource, e.g. module.vpc.aws_subnet.a[0].
	Address string `json:"address"`
	// Action is add, change, destroy, replace, forget or import.
	Action string `json:"action"`
}

// Operation is what a Job does.
// +kubebuilder:validation:Enum=apply;destroy;drift;refresh
type Operation string

const (
	OperationApply   Operation = "apply"
	OperationDestroy Operation = "destroy"
	OperationDrift   Operation = "drift"
	OperationRefresh Operation = "refresh"
	// OperationResolve is a module catalog's Job: it fetches one version
	// of a TerraformModule and reads its code; it plans nothing.
	OperationResolve Operation = "resolve"
)

// JobReference names the latest Job of one operation.
type JobReference struct {
	// Operation the Job ran.
	// +required
	Operation Operation `json:"operation"`
	// Name of the Job.
	// +required
	Name string `json:"name"`
	// Outcome is Running, Succeeded or Failed.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// StartTime of the Job.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime of the Job.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Record is the ConfigMap that keeps the run's plan and log, and
	// RecordDigest the digest of what its runner wrote there: kubectl
	// captf shows a record only while it still hashes to it.
	// +optional
	Record string `json:"record,omitempty"`
	// +optional
	RecordDigest string `json:"recordDigest,omitempty"`
}

// TemplateMeta is the metadata copied to objects made from a template.
type TemplateMeta struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}
