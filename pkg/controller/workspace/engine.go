// Package workspace is the controller every Terraform* kind shares
// (Controller[T], and its kind-independent part, the engine): rendering inputs into runner Jobs, one
// at a time, with deterministic names and expectations; reading results;
// retries with backoff; destroy with the durable inputs; abandon; and the
// conditions that report all of it. The Job itself is package runnerjob's.
package workspace

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	infralisters "github.com/captf/captf/pkg/generated/listers/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/runnerpod"
)

// Ready reasons every kind uses, besides Cluster API's.
const (
	ReasonApplying      = "Applying"
	ReasonApplied       = "Applied"
	ReasonApplyFailed   = "ApplyFailed"
	ReasonDestroying    = "Destroying"
	ReasonDestroyFailed = "DestroyFailed"
	ReasonInvalidOutput = "InvalidOutput"
	ReasonNotPaused     = "NotPaused"
	ReasonPaused        = "Paused"
	// ReasonNamespaceTerminating: no Job can be created in the namespace.
	ReasonNamespaceTerminating = "NamespaceTerminating"
	ReasonAbandoning           = "Abandoning"
)

// Event reasons, besides the Ready reasons above.
const (
	ReasonPlanApproved = "PlanApproved"
	// ReasonPlanPolicyChanged: the rules that denied a plan changed; it
	// is planned again.
	ReasonPlanPolicyChanged = "PlanPolicyChanged"
	ReasonAbandoned         = "Abandoned"
	ReasonDestroyed         = "Destroyed"
	ReasonRefreshFailed     = "RefreshFailed"
)

// Object is a Terraform* object the engine runs Terraform for.
type Object interface {
	metav1.Object
	runtime.Object
	Workspace() *infrav1.WorkspaceSpec
	WorkspaceStatus() *infrav1.WorkspaceStatus
}

// Config is what the manager tells every controller that runs Terraform.
type Config struct {
	Access      *RunnerAccess
	RunnerAPI   RunnerAPI
	RunnerPods  runnerpod.Rules
	RunnerImage string
	// ProviderMirrorImage, when set, is an image holding a provider
	// mirror: every runner pod mounts it read-only (an image volume) and
	// init installs from it.
	ProviderMirrorImage  string
	StateBackups         int
	DriftDefaultInterval time.Duration
	// MaxStateBytes bounds every state and backup read (manager and runner).
	MaxStateBytes int64
	// StateSecrets is the metadata of state and durable-inputs Secrets
	// (StateSecretsSelector): the checks before every Job read it, and its
	// events bring a missing state to light at once. Nil: read on demand.
	StateSecrets informers.GenericInformer
	// Metrics, if set, reports every controller's objects at each scrape.
	Metrics *Collector
	// Slots, if set, caps the Jobs that run at once.
	Slots *runnerjob.Slots
	// BootstrapConfigs reads the bootstrap configs Machines name; nil:
	// bootstrap data is read only from Secrets its Machine controls or
	// that are labelled as bootstrap data.
	BootstrapConfigs BootstrapConfigReader
	// Records lists and deletes run records; nil: none is pruned.
	Records RunRecords
	// Results reads runners' results, shared with the Job metrics; nil:
	// the controller reads its own.
	Results *runnerjob.Results
	// RunInputs, if set, keeps the run inputs the controllers create for
	// the runner API to serve.
	RunInputs *RunInputs
	// Catalog is the module catalog objects name; nil: none.
	Catalog *Catalog
}

// engine is the part of a Controller[T] that does not depend on T: it runs
// Terraform for the objects of one kind.
type engine struct {
	Kube         kubernetes.Interface
	JobControl   runnerjob.Control
	JobIndex     cache.Indexer
	Recorder     record.EventRecorder
	Expectations *controller.Expectations
	Access       *RunnerAccess
	RunnerAPI    RunnerAPI
	RunnerPods   runnerpod.Rules
	GVK          schema.GroupVersionKind
	// FieldManager names the engine's writes (fieldManager).
	FieldManager string
	RunnerImage  string
	// ProviderMirrorImage: Config.ProviderMirrorImage.
	ProviderMirrorImage string
	StateBackups        int
	MaxStateBytes       int64
	// StateSecrets holds the StateSecretMeta of state and durable-inputs
	// Secrets; nil reads them on demand.
	StateSecrets cache.Store
	// DriftDefaultInterval is the drift check interval of objects that
	// set none.
	DriftDefaultInterval time.Duration
	// Clock is the time of every decision (backoff, drift, grace).
	Clock clock.WithTicker
	// Slots caps the Jobs that run at once; nil: no cap.
	Slots *runnerjob.Slots
	// BootstrapConfigs reads bootstrap configs (Config.BootstrapConfigs).
	BootstrapConfigs BootstrapConfigReader
	// Results reads runners' results (Config.Results).
	Results *runnerjob.Results
	// Records prunes run records (Config.Records); nil keeps them all.
	Records RunRecords
	// RunInputs keeps the run inputs created (Config.RunInputs); nil
	// keeps none.
	RunInputs *RunInputs
	// Catalog: Config.Catalog.
	Catalog *Catalog
	// PlanPolicies are the platform's TerraformPlanPolicies.
	PlanPolicies infralisters.TerraformPlanPolicyLister
}

// Sync is what one sync of one object knows and decides.
type Sync struct {
	Obj    Object // a copy: safe to change
	Key    cache.ObjectName
	Names  names.Object // of its Secrets, Lease and Jobs
	Policy runnerjob.Policy
	Jobs   []*runnerjob.Cached // of this object, newest first
	// Gate holds a TerraformCluster's approval policy and approvals; nil
	// for machines and pools, which are never gated.
	Gate *approval.Gate
	// ReapplyAfter asks for an apply of inputs already applied when the
	// last apply Job was created before it: drift to remediate.
	ReapplyAfter time.Time
	// Requeue asks for a sync after this long.
	Requeue time.Duration
	// Update writes the object's metadata and spec, and keeps the status
	// being built.
	Update func(context.Context) error
	// Unwritten: the sync changed the object's metadata or spec without
	// an Update yet; the controller writes it at the sync's end.
	Unwritten bool
	// NoStatus: the sync has nothing to report yet, and writes no status.
	NoStatus bool
	// Owner is the object's Cluster API owner (a Cluster, Machine or
	// MachinePool), nil until Cluster API sets it.
	Owner *capi.Object
	// Cluster is the Cluster the object belongs to, and TerraformCluster
	// that Cluster's infrastructure when it is one.
	Cluster          *capi.Object
	TerraformCluster *infrav1.TerraformCluster
}

// requeueWithin asks for a sync after wait at the latest.
func (r *Sync) requeueWithin(wait time.Duration) {
	if r.Requeue == 0 || wait < r.Requeue {
		r.Requeue = wait
	}
}

// Names names the object's Secrets, Lease and Jobs.
func (e *engine) Names(obj metav1.Object) names.Object {
	return names.ObjectOf(e.GVK.Kind, obj.GetName())
}
