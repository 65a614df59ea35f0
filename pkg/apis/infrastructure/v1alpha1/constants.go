package v1alpha1

// Annotations users put on CAPTF objects. RBAC patch on the object is the
// right to approve.
const (
	// AnnotationApprovePlan approves exactly the plan whose hash it names.
	AnnotationApprovePlan = "captf.io/approve-plan"
	// AnnotationApproveDestructivePlan approves a plan that deletes or
	// replaces resources, by its hash.
	AnnotationApproveDestructivePlan = "captf.io/approve-destructive-plan"
	// AnnotationRestoreState names a state backup to make current, once.
	AnnotationRestoreState = "captf.io/restore-state"
	// AnnotationAbandonInfrastructure set to "true" lets a delete proceed
	// without destroy; the state is kept, orphaned and labelled.
	AnnotationAbandonInfrastructure = "captf.io/abandon-infrastructure"
	// AnnotationAdoptState set to the UID of the object a state was
	// protected for lets this object take the state up under its own
	// approval policy and spec.protect alone.
	AnnotationAdoptState = "captf.io/adopt-state"
	// AnnotationApproveModule approves the module code whose digest it
	// names: under an approval policy, no Job runs changed module code
	// (the source's files, the modules it calls, its lock file) before an
	// approver names its digest here.
	AnnotationApproveModule = "captf.io/approve-module"
)

// Condition types. Ready, Paused and the approval and drift types are fixed
// names; the others are documented in docs/troubleshooting.md.
const (
	ConditionReady                  = "Ready"
	ConditionPaused                 = "Paused"
	ConditionPlanAwaitingApproval   = "PlanAwaitingApproval"
	ConditionDestructivePlanBlocked = "DestructivePlanBlocked"
	// ConditionPlanDenied is True while a TerraformPlanPolicy denies the
	// object's plan.
	ConditionPlanDenied = "PlanDenied"
	ConditionDrifted    = "Drifted"
	// ConditionStateRestored reports the last captf.io/restore-state.
	ConditionStateRestored = "StateRestored"
	// ConditionStateMissing is True while an applied object's state Secret
	// is gone: nothing is applied or destroyed until a backup is restored.
	ConditionStateMissing = "StateMissing"
	// ConditionStateRescued is True when terraform could not save a state
	// and CAPTF kept it in a backup of its own.
	ConditionStateRescued = "StateRescued"
	// ConditionProtectionInherited is True while the object is held to the
	// approval policy and spec.protect its state was kept under for an
	// earlier object of its name, until an approver lets them go.
	ConditionProtectionInherited = "ProtectionInherited"
)

// Finalizers, one per kind that runs Terraform, domain-qualified with a path
// as the API server recommends.
const (
	TerraformClusterFinalizer     = "infrastructure.cluster.x-k8s.io/terraformcluster"
	TerraformMachineFinalizer     = "infrastructure.cluster.x-k8s.io/terraformmachine"
	TerraformMachinePoolFinalizer = "infrastructure.cluster.x-k8s.io/terraformmachinepool"
	// TerraformModuleFinalizer holds a catalog entry's delete until no
	// object or template names it: a destroy fetches the module too.
	TerraformModuleFinalizer = "infrastructure.cluster.x-k8s.io/terraformmodule"
)

// LabelBootstrapData ("true") on a Secret, set by someone who may write
// Secrets, lets any Machine or MachinePool of its namespace name it as its
// bootstrap data; without it CAPTF reads only a bootstrap data Secret
// controlled by the Machine (or pool) or by its bootstrap config.
const LabelBootstrapData = "captf.io/bootstrap-data"

// LabelCatalogCredentials on a Secret of the manager's namespace lets a
// catalog entry's spec.credentialsSecretName name it: only Secrets the
// platform team made for it reach runners.
const LabelCatalogCredentials = "captf.io/catalog-credentials"

// LabelRunnerServiceAccount on a ServiceAccount lets spec.jobs.serviceAccountName
// name it.
const LabelRunnerServiceAccount = "captf.io/runner"
