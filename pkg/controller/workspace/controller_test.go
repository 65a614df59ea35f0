package workspace_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/statestore"
)

func withFinalizer(k kindCase) func(workspace.Object) {
	return func(o workspace.Object) { o.SetFinalizers([]string{k.finalizer}) }
}

func deleting(o workspace.Object) {
	now := metav1.Now()
	o.SetDeletionTimestamp(&now)
}

func newObject(k kindCase, mutate ...func(workspace.Object)) workspace.Object {
	o := k.newObject()
	for _, m := range mutate {
		m(o)
	}
	return o
}

// paused: the Cluster the object belongs to is paused.
func paused(k kindCase) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range k.capi {
		o = o.DeepCopy()
		if o.GetKind() == "Cluster" {
			_ = unstructured.SetNestedField(o.Object, true, "spec", "paused")
		}
		out = append(out, o)
	}
	return out
}

// TestSync: one sync of each kind, as the API and its informers hold it.
func TestSync(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		obj := names.Object{Kind: k.short, Name: "prod"}
		objLabels := names.ObjectLabels(k.kind, "prod", "obj-uid")
		stateSecret := statestore.NewStateSecret("ns", obj.State(), obj, names.SecretTypeState, objLabels)
		stateSecret.Annotations["captf.io/encoding"] = "gzip"
		if k.kind == "TerraformCluster" {
			stateSecret.Annotations[names.AnnotationProtection] = ownProtection
		}
		durable := statestore.NewStateSecret("ns", obj.DurableInputs(), obj, names.SecretTypeDurableInput, objLabels)
		durable.Data = map[string][]byte{"module.json": []byte(`{"inline":"x"}`), "terraform.tfvars.json": []byte(`{}`)}
		fin := withFinalizer(k)
		// Run inputs a killed runner left: nothing owns them.
		leftover := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.RunInputs(k.short + "-prod-apply-0123456789abcdef-0"), Namespace: "ns",
			Labels: names.ObjectLabels(k.kind, "prod", "obj-uid")}}
		leftover.Labels[names.LabelSecretType] = names.SecretTypeRunInputs

		type syncCase struct {
			obj        workspace.Object
			capi       []*unstructured.Unstructured
			objects    []runtime.Object
			wantWrites []string // prefixes, in order; {res} and {k} name the kind
			wantReady  string
			wantEvents []string // prefixes
			wantNoJob  bool
			wantArgs   string
			// wantServiceAcc is the runner pod's ServiceAccount.
			wantServiceAcc string
			// wantDurable checks the durable inputs Secret after the sync.
			wantDurable func(t *testing.T, s *corev1.Secret)
			// wantNoGets are resources the sync must not read.
			wantNoGets []string
		}
		tests := map[string]syncCase{
			"no owner: waits, writes only its status": {
				obj:        newObject(k, func(o workspace.Object) { o.SetOwnerReferences(nil) }),
				wantWrites: []string{"update {res}/status prod"},
				wantReady:  k.ownerWait,
				wantNoJob:  true,
			},
			"new: finalizer, run inputs, runner access, one Job, status": {
				obj:  newObject(k),
				capi: k.capi,
				wantWrites: []string{"patch {res} prod", "create secrets {k}-prod-apply-", "create serviceaccounts captf-runner",
					"create jobs {k}-prod-apply-", "update {res}/status prod"},
				wantReady: workspace.ReasonApplying,
			},
			"a runner ServiceAccount without the captf.io/runner label: refused": {
				obj:        newObject(k, func(o workspace.Object) { o.Workspace().Jobs = &infrav1.JobPolicy{ServiceAccountName: "admin"} }),
				capi:       k.capi,
				objects:    []runtime.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: "ns"}}},
				wantWrites: []string{"patch {res} prod", "update {res}/status prod"},
				wantReady:  workspace.ReasonRunnerServiceAccountNotAllowed,
				wantEvents: []string{"Warning RunnerServiceAccountNotAllowed"},
				wantNoJob:  true,
			},
			"a rescued state holds the Job before anything is read": {
				obj: newObject(k, func(o workspace.Object) {
					o.Workspace().Jobs = &infrav1.JobPolicy{ServiceAccountName: "admin"}
					o.WorkspaceStatus().Conditions = []metav1.Condition{{Type: infrav1.ConditionStateRescued, Status: metav1.ConditionTrue,
						Reason: workspace.ReasonStateRescued, Message: "rescued into b-1", LastTransitionTime: metav1.Now()}}
				}),
				capi:       k.capi,
				wantWrites: []string{"patch {res} prod", "update {res}/status prod"},
				wantReady:  workspace.ReasonStateRescued,
				wantNoJob:  true,
				wantNoGets: []string{"serviceaccounts"},
			},
			"a labelled runner ServiceAccount runs the Job": {
				obj:  newObject(k, func(o workspace.Object) { o.Workspace().Jobs = &infrav1.JobPolicy{ServiceAccountName: "cloud"} }),
				capi: k.capi,
				objects: []runtime.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Namespace: "ns",
					Labels: map[string]string{infrav1.LabelRunnerServiceAccount: "true"}}}},
				wantWrites: []string{"patch {res} prod", "create secrets {k}-prod-apply-", "create serviceaccounts captf-runner",
					"create jobs {k}-prod-apply-", "update {res}/status prod"},
				wantReady:      workspace.ReasonApplying,
				wantServiceAcc: "cloud",
			},
			"paused Cluster: nothing runs": {
				obj:        newObject(k, fin),
				capi:       paused(k),
				wantWrites: []string{"update {res}/status prod"},
				wantNoJob:  true,
			},
			"deleted while paused: nothing runs, the finalizer stays": {
				obj:        newObject(k, fin, deleting),
				capi:       paused(k),
				objects:    []runtime.Object{stateSecret, durable},
				wantWrites: []string{"update {res}/status prod"},
				wantNoJob:  true,
			},
			"deleted, abandoned: state kept, no destroy": {
				obj: newObject(k, fin, deleting, func(o workspace.Object) {
					o.SetAnnotations(map[string]string{infrav1.AnnotationAbandonInfrastructure: "true"})
				}),
				capi:       k.capi,
				objects:    []runtime.Object{stateSecret, durable, leftover},
				wantWrites: []string{"delete secrets {k}-prod-apply-", "patch secrets {k}-prod-", "patch secrets {k}-prod-", "patch {res} prod"},
				wantEvents: []string{"Normal Abandoned"},
				wantNoJob:  true,
				// Listed without their data (a state can be large), the
				// Secrets are labelled and released, their data kept.
				wantDurable: func(t *testing.T, s *corev1.Secret) {
					if s.Labels[names.LabelAbandoned] != "true" || slices.Contains(s.Finalizers, names.StateFinalizer) || len(s.Data) != 2 {
						t.Errorf("abandoned durable inputs: labels %v, finalizers %v, %d data keys; want abandoned, released, both keys kept", s.Labels, s.Finalizers, len(s.Data))
					}
				},
			},
			"deleted, never applied: the finalizer goes, and the lock and left run inputs": {
				obj:     newObject(k, fin, deleting),
				capi:    k.capi,
				objects: []runtime.Object{leftover},
				// The finalizer goes last, once nothing is left.
				wantWrites: []string{"delete secrets {k}-prod-apply-", "delete leases {k}-prod-lock", "patch {res} prod"},
				wantNoJob:  true,
			},
			"deleted after an apply, its state gone: StateMissing, no destroy, the finalizer stays": {
				obj:        newObject(k, fin, deleting),
				capi:       k.capi,
				objects:    []runtime.Object{durable},
				wantWrites: []string{"update {res}/status prod"},
				wantReady:  workspace.ReasonStateMissing,
				wantEvents: []string{"Warning StateMissing"},
				wantNoJob:  true,
			},
			"applied, its state gone: StateMissing, no apply": {
				obj:        newObject(k, fin, func(o workspace.Object) { o.WorkspaceStatus().AppliedInputsHash = "another" }),
				capi:       k.capi,
				wantWrites: []string{"update {res}/status prod"},
				wantReady:  workspace.ReasonStateMissing,
				wantEvents: []string{"Warning StateMissing"},
				wantNoJob:  true,
			},
			"deleted after an apply: destroy with the durable inputs": {
				obj:     newObject(k, fin, deleting),
				capi:    k.capi,
				objects: []runtime.Object{stateSecret, durable},
				// The update is clusterctl's block-move annotation, set before the Job.
				wantWrites: []string{"patch {res} prod", "create serviceaccounts captf-runner",
					"create jobs {k}-prod-destroy-", "update {res}/status prod"},
				wantReady: workspace.ReasonDestroying,
				wantArgs:  "--durable-inputs",
			},
		}
		if k.kind != "TerraformCluster" {
			// A restore that brought the object but not its Secrets: its
			// provider IDs say instances exist, and an apply would make
			// them a second time.
			tests["restored with provider IDs, without status or Secrets: StateMissing, no apply"] = syncCase{
				obj: newObject(k, fin, func(o workspace.Object) {
					switch o := o.(type) {
					case *infrav1.TerraformMachine:
						o.Spec.ProviderID = "local:///i-1"
					case *infrav1.TerraformMachinePool:
						o.Spec.ProviderIDList = []string{"local:///i-1"}
					}
				}),
				capi:       k.capi,
				wantWrites: []string{"update {res}/status prod"},
				wantReady:  workspace.ReasonStateMissing,
				wantEvents: []string{"Warning StateMissing"},
				wantNoJob:  true,
			}
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, k, tc.obj, tc.capi, append(slices.Clone(k.kube), tc.objects...)...)
				f.sync()
				f.wantPrefixes("writes", f.writes(), tc.wantWrites)
				f.wantPrefixes("events", f.drainEvents(), tc.wantEvents)
				if tc.wantReady != "" {
					if r := f.readyReason(); r != tc.wantReady {
						t.Errorf("Ready reason = %q, want %q", r, tc.wantReady)
					}
				}
				for _, a := range f.kube.Actions() {
					if g, ok := a.(k8stesting.GetAction); ok && slices.Contains(tc.wantNoGets, g.GetResource().Resource) {
						t.Errorf("read %s %s", g.GetResource().Resource, g.GetName())
					}
				}
				jobs := f.createdJobs()
				if tc.wantNoJob && len(jobs) > 0 {
					t.Errorf("created Job %s", jobs[0].Name)
				}
				if tc.wantServiceAcc != "" && (len(jobs) != 1 || jobs[0].Spec.Template.Spec.ServiceAccountName != tc.wantServiceAcc) {
					t.Errorf("Jobs %v, want one running as %s", jobNames(jobs), tc.wantServiceAcc)
				}
				if tc.wantArgs != "" && (len(jobs) != 1 || !slices.Contains(jobs[0].Spec.Template.Spec.Containers[0].Args, tc.wantArgs)) {
					t.Errorf("Jobs %v, want one with %s", jobNames(jobs), tc.wantArgs)
				}
				if tc.wantDurable != nil {
					s, err := f.kube.CoreV1().Secrets("ns").Get(context.Background(), obj.DurableInputs(), metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					tc.wantDurable(t, s)
				}
			})
		}
	})
}

// TestApplyOutputs: a successful apply's outputs reach the object; ones the
// kind cannot read make InvalidOutput, once.
func TestApplyOutputs(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		if r := f.readyReason(); r != workspace.ReasonApplied {
			t.Fatalf("Ready reason %q after the apply", r)
		}
		k.applied(t, f.object())
		f.wantPrefixes("events", f.drainEvents(), []string{"Normal Applied"})
		if st := f.object().WorkspaceStatus(); st.Initialization == nil || !*st.Initialization.Provisioned || !st.Ready {
			t.Errorf("not provisioned: %+v", st)
		}

		f = newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.badOutputs})
		f.sync()
		if r := f.readyReason(); r != workspace.ReasonInvalidOutput {
			t.Fatalf("Ready reason %q with outputs %v", r, k.badOutputs)
		}
		f.wantPrefixes("events", f.drainEvents(), []string{"Warning InvalidOutput"})
		f.observe()
		f.sync()
		f.wantPrefixes("writes of a sync that changes nothing", f.writes(), nil)
		f.wantPrefixes("events of a sync that changes nothing", f.drainEvents(), nil)
	})
}

// TestLongOutputKeepsTheStatusWritable: a module that outputs a 40 KiB
// provider ID (none at all: it has no scheme) gets InvalidOutput with the
// message cut, under the 32 KiB the API server admits in a condition, and
// one warning: a message quoting it whole would fail every status write.
func TestLongOutputKeepsTheStatusWritable(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		long := strings.Repeat("é", 20<<10) // 40 KiB, two bytes a rune
		outputs := map[string]run.Output{}
		for name, o := range k.outputs {
			outputs[name] = o
		}
		switch k.kind {
		case "TerraformMachine":
			outputs["provider_id"] = run.Output{Value: json.RawMessage(strconv.Quote(long))}
		case "TerraformMachinePool":
			outputs["provider_ids"] = run.Output{Value: json.RawMessage("[" + strconv.Quote(long) + "]")}
		default:
			t.Skip("no provider IDs")
		}
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: outputs})
		f.sync()
		c := f.condition(infrav1.ConditionReady)
		if c == nil || c.Reason != workspace.ReasonInvalidOutput {
			t.Fatalf("Ready = %+v, want InvalidOutput", c)
		}
		if len(c.Message) > 4<<10 || !utf8.ValidString(c.Message) || !strings.HasSuffix(c.Message, "…") {
			t.Errorf("the message is %d bytes (valid UTF-8: %v), want at most 4 KiB, cut at a rune and marked", len(c.Message), utf8.ValidString(c.Message))
		}
		f.wantPrefixes("events", f.drainEvents(), []string{"Warning InvalidOutput"})
		f.observe()
		f.sync()
		f.wantPrefixes("writes of the next sync", f.writes(), nil)
		f.wantPrefixes("events of the next sync", f.drainEvents(), nil)
	})
}

// TestProviderIDHeldElsewhere: a module output claiming an instance another
// machine or pool of its namespace already holds is InvalidOutput naming
// the holder, and the spec keeps no provider ID. A holder in another
// namespace blocks nothing and is not named (issue 30, item 7): Cluster API
// ties provider IDs to Nodes of the Machine's own Cluster.
func TestProviderIDHeldElsewhere(t *testing.T) {
	for _, tc := range []struct {
		holderNamespace string
		wantReady       string
	}{
		{"ns", workspace.ReasonInvalidOutput},
		{"another-tenant", workspace.ReasonApplied},
	} {
		forKinds(t, func(t *testing.T, k kindCase) {
			if k.kind == "TerraformCluster" {
				return
			}
			f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
			holder := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: tc.holderNamespace, UID: "uid-holder"}}
			holder.Spec.ProviderIDList = []string{"aws:///a/i-1", "p://2"}
			if err := f.informers().Infrastructure().V1alpha1().TerraformMachinePools().Informer().GetIndexer().Add(holder); err != nil {
				t.Fatal(err)
			}
			f.sync()
			f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
			f.sync()
			c := f.condition(infrav1.ConditionReady)
			if c == nil || c.Reason != tc.wantReady {
				t.Fatalf("holder in %s: Ready = %+v, want %s", tc.holderNamespace, c, tc.wantReady)
			}
			if tc.wantReady == workspace.ReasonApplied {
				if strings.Contains(c.Message, "holder") {
					t.Errorf("the message names another namespace's holder: %s", c.Message)
				}
				return
			}
			if !strings.Contains(c.Message, "already held by TerraformMachinePool holder in this namespace") {
				t.Errorf("Ready message %q does not name the holder", c.Message)
			}
			switch o := f.object().(type) {
			case *infrav1.TerraformMachine:
				if o.Spec.ProviderID != "" {
					t.Errorf("spec.providerID = %q", o.Spec.ProviderID)
				}
			case *infrav1.TerraformMachinePool:
				if len(o.Spec.ProviderIDList) != 0 {
					t.Errorf("spec.providerIDList = %v", o.Spec.ProviderIDList)
				}
			}
		})
	}
}

// TestInputErrorOnce: a variable from a missing Secret is a condition and
// one event; the checks that follow every minute write nothing new.
func TestInputErrorOnce(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		obj := newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Variables = []infrav1.Variable{{Name: "token", ValueFrom: &infrav1.VariableSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Key: "token"}}}}
		})
		f := newFixture(t, k, obj, k.capi, k.kube...)
		f.sync()
		if r := f.readyReason(); r != workspace.ReasonVariableUnavailable {
			t.Fatalf("Ready reason %q", r)
		}
		f.wantPrefixes("events", f.drainEvents(), []string{"Warning " + workspace.ReasonVariableUnavailable})
		for range 3 {
			f.observe()
			f.sync()
			f.wantPrefixes("writes of a repeated check", f.writes(), nil)
			f.wantPrefixes("events of a repeated check", f.drainEvents(), nil)
		}
	})
}

// TestWaiting: machines and pools wait for what Cluster API says they wait
// for, with its reasons.
func TestWaiting(t *testing.T) {
	for _, k := range kinds[1:] {
		t.Run(k.kind, func(t *testing.T) {
			owner := k.capi[0]
			withoutData := owner.DeepCopy()
			unstructured.RemoveNestedField(withoutData.Object, capi.Machine.BootstrapDataSecretPath...)
			unstructured.RemoveNestedField(withoutData.Object, capi.MachinePool.BootstrapDataSecretPath...)
			controlPlane := withoutData.DeepCopy()
			controlPlane.SetLabels(map[string]string{capi.ControlPlaneLabel: ""})
			cluster := func(provisioned, initialized bool) *unstructured.Unstructured {
				c := readyCluster("work")
				c.Object["status"] = map[string]any{"initialization": map[string]any{"infrastructureProvisioned": provisioned, "controlPlaneInitialized": initialized}}
				return c
			}
			tests := map[string]struct {
				capi []*unstructured.Unstructured
				want string
			}{
				"no Cluster":                       {capi: []*unstructured.Unstructured{owner}, want: workspace.ReasonWaitingForClusterInfrastructureReady},
				"Cluster infrastructure not ready": {capi: []*unstructured.Unstructured{owner, cluster(false, false)}, want: workspace.ReasonWaitingForClusterInfrastructureReady},
				"worker before the control plane":  {capi: []*unstructured.Unstructured{withoutData, cluster(true, false)}, want: workspace.ReasonWaitingForControlPlaneInitialized},
				"worker after the control plane":   {capi: []*unstructured.Unstructured{withoutData, cluster(true, true)}, want: workspace.ReasonWaitingForBootstrapData},
				"control plane without data":       {capi: []*unstructured.Unstructured{controlPlane, cluster(true, false)}, want: workspace.ReasonWaitingForBootstrapData},
				"ready to apply":                   {capi: []*unstructured.Unstructured{owner, cluster(true, false)}, want: workspace.ReasonApplying},
			}
			for name, tc := range tests {
				t.Run(name, func(t *testing.T) {
					f := newFixture(t, k, newObject(k, withFinalizer(k)), tc.capi, k.kube...)
					f.sync()
					if r := f.readyReason(); r != tc.want {
						t.Errorf("Ready reason %q, want %q", r, tc.want)
					}
				})
			}
		})
	}
}

// TestOwnerMustNameTheObject: an owner reference that someone wrote to a
// Machine, MachinePool or Cluster whose infrastructureRef names another
// object (or nothing) makes no owner: the object waits for its owner, and
// no Job gets the owner's bootstrap data.
func TestOwnerMustNameTheObject(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		for name, ref := range map[string]map[string]any{
			"names another object": {"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": k.kind, "name": "other"},
			"names another kind":   {"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformOther", "name": "prod"},
			"names another group":  {"apiGroup": "infrastructure.example.com", "kind": k.kind, "name": "prod"},
			"names nothing":        nil,
		} {
			t.Run(name, func(t *testing.T) {
				capiObjects := slices.Clone(k.capi)
				owner := capiObjects[0].DeepCopy()
				path := []string{"spec", "infrastructureRef"}
				if owner.GetKind() == "MachinePool" {
					path = []string{"spec", "template", "spec", "infrastructureRef"}
				}
				if ref == nil {
					unstructured.RemoveNestedField(owner.Object, path...)
				} else if err := unstructured.SetNestedMap(owner.Object, ref, path...); err != nil {
					t.Fatal(err)
				}
				capiObjects[0] = owner
				f := newFixture(t, k, newObject(k, withFinalizer(k)), capiObjects, k.kube...)
				f.sync()
				if jobs := f.createdJobs(); len(jobs) != 0 {
					t.Errorf("Jobs %v for an object its owner does not name", jobNames(jobs))
				}
				if r := f.readyReason(); r != k.ownerWait {
					t.Errorf("Ready reason %q, want %q", r, k.ownerWait)
				}
			})
		}
	})
}

// TestInputs: the captf_* inputs of each kind, with the bootstrap data and
// the cluster's exports.
func TestInputs(t *testing.T) {
	want := map[string][]string{
		"TerraformCluster": {`"captf_cluster_name": "owner"`, `"captf_kind": "TerraformCluster"`, `"captf_name": "prod"`, `"captf_namespace": "ns"`},
		"TerraformMachine": {`"captf_bootstrap_data": "#cloud-config"`, `"captf_bootstrap_format": "cloud-config"`, `"captf_control_plane": false`,
			`"captf_machine_name": "owner"`, `"captf_cluster_name": "work"`, `"vpc_id": "vpc-1"`},
		"TerraformMachinePool": {`"captf_bootstrap_data": "#cloud-config"`, `"captf_replicas": 2`, `"captf_machine_pool_name": "owner"`, `"vpc_id": "vpc-1"`},
	}
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		// The Cluster's TerraformCluster, whose outputs machines and pools get.
		tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "work-infra", Namespace: "ns"},
			Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Outputs: map[string]runtime.RawExtension{"vpc_id": {Raw: []byte(`"vpc-1"`)}}}}}
		if k.kind != "TerraformCluster" { // whose Cluster names it
			f.putCAPI(withInfrastructure(f.k, "work-infra"))
			f.addTerraformCluster(tc)
		}
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 {
			t.Fatalf("Jobs %v", jobNames(jobs))
		}
		sec, err := f.kube.CoreV1().Secrets("ns").Get(context.Background(), names.Object{Kind: k.short, Name: "prod"}.RunInputs(jobs[0].Name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// No owner: clusterctl move would copy it, and fail when the runner
		// deletes it meanwhile.
		if len(sec.OwnerReferences) != 0 {
			t.Errorf("run inputs owned by %v, want no owner", sec.OwnerReferences)
		}
		vars := string(sec.Data["terraform.tfvars.json"])
		for _, w := range want[k.kind] {
			if !strings.Contains(vars, w) {
				t.Errorf("inputs lack %s:\n%s", w, vars)
			}
		}
	})
}

// withInfrastructure is the kind's Cluster, with a TerraformCluster named
// name as its infrastructure.
func withInfrastructure(k kindCase, name string) *unstructured.Unstructured {
	var c *unstructured.Unstructured
	for _, o := range k.capi {
		if o.GetKind() == "Cluster" {
			c = o.DeepCopy()
		}
	}
	_ = unstructured.SetNestedStringMap(c.Object, map[string]string{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": name}, "spec", "infrastructureRef")
	return c
}

// TestNoSecondJobOnALaggingCache: until the informer shows the Job it
// created, the controller creates nothing, however often it syncs.
func TestNoSecondJobOnALaggingCache(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k), k.capi, k.kube...)
		for range 3 {
			f.sync()
		}
		// Attempts, not Jobs: a second create answered AlreadyExists is a
		// duplicate all the same.
		if creates := jobCreates(f.writes()); len(creates) != 1 {
			t.Fatalf("Job creates over 3 syncs: %q, want 1", creates)
		}
		// Once the informer shows it, the controller waits for it: still one.
		job := f.jobs.created[0].DeepCopy()
		workspace.JobEventHandler(ktesting.NewLogger(t, ktesting.NewConfig()), k.kind, f.c.QueueForTest(), f.c.ExpectationsForTest()).OnAdd(runnerjob.Trim(job), false)
		if err := f.c.EngineForTest().JobIndex.Add(runnerjob.Trim(job)); err != nil {
			t.Fatal(err)
		}
		f.sync()
		if creates := jobCreates(f.writes()); len(creates) != 1 {
			t.Fatalf("Job creates: %q, want 1", creates)
		}
	})
}

// TestNoSecondWriteOnALaggingCache: the Job handler tells the
// expectations the Job it shows was created; and a sync on a cache that
// does not show the controller's own last write yet (its Job seen, the
// object not) writes nothing again, neither the object nor its status,
// whichever of the two the last write was.
func TestNoSecondWriteOnALaggingCache(t *testing.T) {
	refuseStatus := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			return true, nil, apierrors.NewConflict(schema.GroupResource{}, "x", errors.New("changed"))
		}
		return false, nil, nil
	}
	tests := map[string]struct {
		mutate   func(k kindCase) func(workspace.Object)
		refuse   k8stesting.ReactionFunc
		wantJob  bool
		wantLast string
	}{
		"the object, then its status":    {wantJob: true, wantLast: "update {res}/status"},
		"the object; its status refused": {refuse: refuseStatus, wantJob: true, wantLast: "patch {res}"},
		"only the status (paused)": {mutate: func(k kindCase) func(workspace.Object) {
			return func(o workspace.Object) {
				o.SetFinalizers([]string{k.finalizer})
				o.SetAnnotations(map[string]string{capi.PausedAnnotation: ""})
			}
		}, wantLast: "update {res}/status"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			forKinds(t, func(t *testing.T, k kindCase) {
				mutate := []func(workspace.Object){func(o workspace.Object) { o.SetResourceVersion("1") }}
				if tc.mutate != nil {
					mutate = append(mutate, tc.mutate(k))
				}
				f := newFixture(t, k, newObject(k, mutate...), k.capi, k.kube...)
				// Each write gives the object a new resourceVersion, as the
				// API server does.
				rv := 1
				newVersion := func(a k8stesting.Action) (bool, runtime.Object, error) {
					_, _, _ = f.log.record(a) // handled here, before the log's reactor
					handled, obj, err := k8stesting.ObjectReaction(f.captf.Tracker())(a)
					if err != nil || !handled {
						return handled, obj, err
					}
					rv++
					obj.(metav1.Object).SetResourceVersion(strconv.Itoa(rv))
					return true, obj, f.captf.Tracker().Update(f.gvr(), obj, obj.(metav1.Object).GetNamespace())
				}
				f.captf.PrependReactor("patch", k.resource, newVersion)
				f.captf.PrependReactor("update", k.resource, newVersion)
				if tc.refuse != nil {
					f.captf.PrependReactor("update", k.resource, tc.refuse)
				}
				_ = f.trySync()
				writes, last := f.writes(), ""
				for _, w := range writes {
					if strings.Contains(w, " "+k.resource) {
						last = w // the object's or its status's
					}
				}
				if !strings.HasPrefix(last, f.expand(tc.wantLast)) {
					t.Fatalf("the first sync wrote %q: want its last write of the object %q", writes, f.expand(tc.wantLast))
				}
				if tc.wantJob {
					if f.c.ExpectationsForTest().Satisfied(key) {
						t.Fatal("the expectations are satisfied before the Job was seen")
					}
					job := runnerjob.Trim(f.jobs.created[0].DeepCopy())
					workspace.JobEventHandler(ktesting.NewLogger(t, ktesting.NewConfig()), k.kind, f.c.QueueForTest(), f.c.ExpectationsForTest()).OnAdd(job, false)
					if !f.c.ExpectationsForTest().Satisfied(key) {
						t.Fatal("the Job handler showed the Job it created, and the expectations still wait for it")
					}
					if err := f.c.EngineForTest().JobIndex.Add(job); err != nil {
						t.Fatal(err)
					}
				}
				_ = f.trySync() // the object's cache still holds it as it was before
				f.wantPrefixes("writes of a sync on the cache before the first sync's writes", f.writes()[len(writes):], nil)
			})
		})
	}
}

// jobCreates are the attempts to create a Job among writes.
func jobCreates(writes []string) []string {
	var out []string
	for _, w := range writes {
		if strings.HasPrefix(w, "create jobs ") {
			out = append(out, w)
		}
	}
	return out
}

// TestResultGonePlansAgain: an apply Job whose result Secret is deleted
// before the manager read it (by hand, by a cleanup tool) is planned again
// with the next attempt, not taken as applied and not retried forever.
func TestResultGonePlansAgain(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		job := f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: f.k.outputs})
		result := names.Object{Kind: k.short, Name: "prod"}.Result(job.Name)
		if err := f.kube.CoreV1().Secrets("ns").Delete(context.Background(), result, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || jobs[0].Labels[names.LabelAttempt] != "1" || jobs[0].Labels[names.LabelOperation] != string(infrav1.OperationApply) {
			t.Fatalf("created %v, want the apply's next attempt", jobNames(jobs))
		}
		if st := f.object().WorkspaceStatus(); st.AppliedInputsHash != "" {
			t.Errorf("applied inputs %q recorded without a result", st.AppliedInputsHash)
		}
	})
}

// TestHandlers: resyncs and spec or metadata changes sync; the controller's
// own status writes do not; a delete syncs and forgets the object.
func TestHandlers(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		base := newObject(k)
		base.SetResourceVersion("1")
		variant := func(mutate func(workspace.Object)) workspace.Object {
			o := base.DeepCopyObject().(workspace.Object)
			o.SetResourceVersion("2")
			mutate(o)
			return o
		}
		tests := map[string]struct {
			cur  workspace.Object
			want int
		}{
			"resync":             {cur: base, want: 1},
			"own status write":   {cur: variant(func(o workspace.Object) { o.WorkspaceStatus().Ready = true }), want: 0},
			"spec change":        {cur: variant(func(o workspace.Object) { o.SetGeneration(2) }), want: 1},
			"annotation changed": {cur: variant(func(o workspace.Object) { o.SetAnnotations(map[string]string{"a": "b"}) }), want: 1},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, k, newObject(k), k.capi)
				f.c.UpdateObjectForTest(base, tc.cur)
				if got := f.c.QueueForTest().Len(); got != tc.want {
					t.Errorf("queued %d, want %d", got, tc.want)
				}
			})
		}
		t.Run("delete", func(t *testing.T) {
			f := newFixture(t, k, newObject(k), k.capi)
			f.c.WrittenForTest().Wrote(key, "10")
			f.c.ExpectationsForTest().ExpectJob(key, "job")
			f.c.DeleteObjectForTest(base)
			if f.c.QueueForTest().Len() != 1 || f.c.WrittenForTest().Behind(key, "5") || !f.c.ExpectationsForTest().Satisfied(key) {
				t.Errorf("after the delete: queued %d, still waits for a write or a Job", f.c.QueueForTest().Len())
			}
		})
	})
}

// TestDriftNeverHoldsUpAnApply: a drift check is due after the interval
// and plans with the durable inputs; a spec change while it runs stops it
// and the apply follows.
func TestDriftNeverHoldsUpAnApply(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
		}), k.capi, k.kube...)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()
		if r := f.readyReason(); r != workspace.ReasonApplied {
			t.Fatalf("Ready reason %q", r)
		}
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 0 {
			t.Fatalf("a drift check before its time: %v", jobNames(jobs))
		}
		f.clock.Step(2 * time.Minute) // past the interval and its jitter
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || !strings.Contains(jobs[0].Name, "-drift-") {
			t.Fatalf("due: created %v, want a drift check", jobNames(jobs))
		}
		drift := jobs[0]
		if !slices.Contains(drift.Spec.Template.Spec.Containers[0].Args, "--durable-inputs") {
			t.Errorf("the drift check does not plan with the durable inputs: %v", drift.Spec.Template.Spec.Containers[0].Args)
		}
		f.observe(drift)

		// The spec changes while the check runs: the check is stopped.
		f.change(func(o workspace.Object) {
			o.Workspace().Module.Inline += "\n# changed"
			o.SetGeneration(o.GetGeneration() + 1)
		})
		f.sync()
		if !slices.Equal(f.jobs.deleted, []string{drift.Name}) || len(f.createdJobs()) != 0 {
			t.Fatalf("with a check running and the spec changed: deleted %v, created %v; want the check deleted and no Job yet", f.jobs.deleted, jobNames(f.createdJobs()))
		}
		if err := f.c.EngineForTest().JobIndex.Delete(runnerjob.Trim(drift)); err != nil {
			t.Fatal(err)
		}
		f.observe()
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 1 || !strings.Contains(jobs[0].Name, "-apply-") {
			t.Fatalf("after the check went: created %v, want the apply", jobNames(jobs))
		}
	})
}

// TestRemediation: a drifted object whose policy remediates applies again;
// a TerraformCluster's apply goes through its gate, a machine's never.
func TestRemediation(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Hour}, Remediation: infrav1.DriftRemediationApply}
		}), k.capi, k.kube...)
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()

		// A drift check after the apply found a replacement.
		f.change(func(o workspace.Object) {
			st := o.WorkspaceStatus()
			checked := metav1.NewTime(time.Now().Add(time.Minute)) // after the apply Job
			st.LastDriftCheckTime = &checked
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: infrav1.ConditionDrifted, Status: metav1.ConditionTrue, Reason: workspace.ReasonDriftDetected})
		})
		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || !strings.HasSuffix(jobs[0].Name, "-1") {
			t.Fatalf("remediation created %v, want attempt 1 of the apply", jobNames(jobs))
		}
		gated := slices.Contains(jobs[0].Spec.Template.Spec.Containers[0].Args, "--gate=Destructive")
		if want := k.kind == "TerraformCluster"; gated != want {
			t.Errorf("remediation gated: %v, want %v (%v)", gated, want, jobs[0].Spec.Template.Spec.Containers[0].Args)
		}
	})
}

// addTerraformCluster puts a TerraformCluster into the informer machines
// and pools read it from.
func (f *fixture) addTerraformCluster(tc *infrav1.TerraformCluster) {
	f.t.Helper()
	inf, err := f.informers().ForResource(infrav1.SchemeGroupVersion.WithResource("terraformclusters"))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := inf.Informer().GetIndexer().Add(tc); err != nil {
		f.t.Fatal(err)
	}
}

// TestDocumentedReasons: what the troubleshooting guide says a user sees,
// for each kind.
func TestDocumentedReasons(t *testing.T) {
	applied := func(f *fixture) {
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: f.k.outputs})
		f.sync()
		f.observe()
	}
	// later makes the engine's clock d ahead.
	later := func(f *fixture, d time.Duration) {
		f.clock.SetTime(time.Now().Add(d))
	}
	tests := map[string]struct {
		mutate    func(workspace.Object)
		run       func(f *fixture)
		condition string // Ready unless set
		want      string
		// wantEvent is the reason of the one warning event.
		wantEvent string
		wantNoJob bool
	}{
		"a module ConfigMap that does not exist": {
			mutate: func(o workspace.Object) {
				o.Workspace().Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "missing"}}
			},
			run:  func(f *fixture) { f.sync() },
			want: workspace.ReasonModuleUnavailable, wantEvent: workspace.ReasonModuleUnavailable, wantNoJob: true,
		},
		"inputs larger than a Secret holds": {
			mutate: func(o workspace.Object) {
				big, _ := json.Marshal(strings.Repeat("x", workspace.MaxInputBytes))
				o.Workspace().Variables = []infrav1.Variable{{Name: "big", Value: &runtime.RawExtension{Raw: big}}}
			},
			run:  func(f *fixture) { f.sync() },
			want: workspace.ReasonInputsTooLarge, wantEvent: workspace.ReasonInputsTooLarge, wantNoJob: true,
		},
		"a privileged runner pod, admitted before the rule": {
			mutate: func(o workspace.Object) {
				o.Workspace().Jobs = &infrav1.JobPolicy{SecurityContext: &corev1.SecurityContext{Privileged: ptrTo(true)}}
			},
			run:  func(f *fixture) { f.sync() },
			want: workspace.ReasonRunnerPodNotAllowed, wantEvent: workspace.ReasonRunnerPodNotAllowed, wantNoJob: true,
		},
		"drift checks disabled: none, however late": {
			mutate: func(o workspace.Object) {
				o.Workspace().Drift = &infrav1.DriftPolicy{Enabled: ptrTo(false), Interval: &metav1.Duration{Duration: time.Minute}}
			},
			run: func(f *fixture) {
				applied(f)
				later(f, time.Hour)
				f.sync()
			},
			want: workspace.ReasonApplied, wantNoJob: true,
		},
		"a drift check that fails": {
			mutate: func(o workspace.Object) {
				o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
			},
			run: func(f *fixture) {
				applied(f)
				later(f, 2*time.Minute)
				f.sync()
				f.failJob(run.Result{Operation: infrav1.OperationDrift, Stage: run.StagePlan, Error: "provider unreachable"})
				f.sync()
			},
			condition: infrav1.ConditionDrifted, want: workspace.ReasonDriftCheckFailed, wantEvent: workspace.ReasonDriftCheckFailed,
		},
		"a destroy that fails: reported, retried after a backoff": {
			run: func(f *fixture) {
				applied(f)
				f.change(deleting)
				f.sync()
				f.failJob(run.Result{Operation: infrav1.OperationDestroy, Stage: string(infrav1.OperationDestroy), Error: "instance is protected"})
				f.sync()
			},
			want: workspace.ReasonDestroyFailed, wantNoJob: true,
		},
		"a Job a ResourceQuota refuses": {
			run: func(f *fixture) {
				f.jobs.refuse = apierrors.NewForbidden(batchv1.Resource("jobs"), "x",
					errors.New("exceeded quota: runner-jobs, requested: count/jobs.batch=1, used: count/jobs.batch=2, limited: count/jobs.batch=2"))
				f.sync()
				if msg := f.condition(infrav1.ConditionReady).Message; !strings.Contains(msg, "exceeded quota: runner-jobs") {
					f.t.Errorf("Ready message %q does not name the quota", msg)
				}
			},
			want: workspace.ReasonQuotaExceeded, wantEvent: workspace.ReasonQuotaExceeded, wantNoJob: true,
		},
		"a runner pod a ResourceQuota refuses": {
			run: func(f *fixture) {
				f.sync()
				job := f.createdJobs()[0].DeepCopy()
				job.UID = "job-uid"
				job.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
				job.Status.StartTime = &job.CreationTimestamp // the Job controller tried its pod
				f.observe(job)
				ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "job.1", Namespace: "ns"}, Reason: "FailedCreate", Type: corev1.EventTypeWarning,
					InvolvedObject: corev1.ObjectReference{Kind: "Job", Name: job.Name, UID: job.UID}, LastTimestamp: metav1.Now(),
					Message: `Error creating: pods "x" is forbidden: exceeded quota: runner-cpu, requested: requests.cpu=500m, used: requests.cpu=2, limited: requests.cpu=2`}
				if _, err := f.kube.CoreV1().Events("ns").Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
					f.t.Fatal(err)
				}
				f.sync()
				if msg := f.condition(infrav1.ConditionReady).Message; !strings.Contains(msg, "exceeded quota: runner-cpu") || !strings.Contains(msg, job.Name) {
					f.t.Errorf("Ready message %q does not name the Job and the quota", msg)
				}
			},
			want: workspace.ReasonQuotaExceeded, wantEvent: workspace.ReasonQuotaExceeded, wantNoJob: true,
		},
		"a restore asked while a Job runs waits for it": {
			run: func(f *fixture) {
				f.sync() // the first apply's Job runs
				f.observe(f.jobs.created...)
				f.annotate(infrav1.AnnotationRestoreState, "some-backup")
				f.sync()
			},
			condition: infrav1.ConditionStateRestored, want: workspace.ReasonRestoreWaiting, wantNoJob: true,
		},
		"a restore of a backup that is not there": {
			run: func(f *fixture) {
				applied(f)
				f.annotate(infrav1.AnnotationRestoreState, "no-such-backup")
				f.sync()
			},
			condition: infrav1.ConditionStateRestored, want: workspace.ReasonBackupNotFound, wantEvent: workspace.ReasonBackupNotFound,
		},
		"a restore the API server refuses: reported, the annotation kept for a retry": {
			run: func(f *fixture) {
				applied(f)
				backup := f.backupState()
				f.kube.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("admission webhook denied the request")
				})
				f.annotate(infrav1.AnnotationRestoreState, backup)
				if err := f.trySync(); err == nil || !strings.Contains(err.Error(), "denied") {
					f.t.Fatalf("sync error = %v, want the refusal", err)
				}
				if _, ok := f.object().GetAnnotations()[infrav1.AnnotationRestoreState]; !ok {
					f.t.Error("the restore annotation is gone after a failed restore")
				}
			},
			condition: infrav1.ConditionStateRestored, want: workspace.ReasonRestoreFailed, wantEvent: workspace.ReasonRestoreFailed,
		},
	}
	forKinds(t, func(t *testing.T, k kindCase) {
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				mutate := []func(workspace.Object){withFinalizer(k)}
				if tc.mutate != nil {
					mutate = append(mutate, tc.mutate)
				}
				f := newFixture(t, k, newObject(k, mutate...), k.capi, k.kube...)
				tc.run(f)
				condition := cmp.Or(tc.condition, infrav1.ConditionReady)
				if c := f.condition(condition); c == nil || c.Reason != tc.want {
					t.Fatalf("%s = %+v, want reason %s", condition, c, tc.want)
				}
				var warnings []string
				for _, e := range f.drainEvents() {
					if strings.HasPrefix(e, "Warning ") {
						warnings = append(warnings, e)
					}
				}
				if tc.wantEvent != "" {
					f.wantPrefixes("warnings", warnings, []string{"Warning " + tc.wantEvent + " "})
				}
				if tc.wantNoJob && len(f.createdJobs()) > 0 {
					t.Errorf("created %v", jobNames(f.createdJobs()))
				}
			})
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

// TestInputsReadOncePerRender: syncs that only ask whether the applied
// inputs are current take their hash from the last render (the module's
// ConfigMap and the bootstrap data Secret are not read again); a Job always
// runs inputs read when it starts; a changed ConfigMap is read at the
// object's next resync, and when a Job is to start, which then decides
// again on what it read.
func TestInputsReadOncePerRender(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		ctx := context.Background()
		module := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mod", Namespace: "ns"}, Data: map[string]string{"main.tf": "# one"}}
		obj := newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "mod"}}
		})
		f := newFixture(t, k, obj, k.capi, append([]runtime.Object{module}, k.kube...)...)
		// inputReads are the reads of the module and the bootstrap data
		// since the last observe.
		inputReads := func() []string {
			var out []string
			for _, a := range f.kube.Actions() {
				if g, ok := a.(k8stesting.GetAction); ok && (g.GetName() == "mod" || g.GetName() == bootstrapData.Name) {
					out = append(out, g.GetResource().Resource+"/"+g.GetName())
				}
			}
			return out
		}
		// runs is the module file a Job's run-inputs Secret holds.
		runs := func(job *batchv1.Job) string {
			t.Helper()
			sec, err := f.kube.CoreV1().Secrets("ns").Get(ctx, names.Object{Kind: k.short, Name: "prod"}.RunInputs(job.Name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var m run.Module
			if err := json.Unmarshal(sec.Data[run.KeyModule], &m); err != nil {
				t.Fatal(err)
			}
			return m.Files["main.tf"]
		}
		setModule := func(content string) {
			t.Helper()
			cm := module.DeepCopy()
			cm.Data["main.tf"] = content
			if err := f.kube.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, "ns"); err != nil {
				t.Fatal(err)
			}
		}

		// finishWithoutResult ends the newest Job with its result gone: its
		// object plans again.
		finishWithoutResult := func() *batchv1.Job {
			t.Helper()
			job := f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.outputs})
			if err := f.kube.CoreV1().Secrets("ns").Delete(ctx, names.Object{Kind: k.short, Name: "prod"}.Result(job.Name), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			f.kube.ClearActions()
			return job
		}

		f.sync()
		jobs := f.createdJobs()
		if len(jobs) != 1 || runs(jobs[0]) != "# one" {
			t.Fatalf("created %v, want one apply of the module", jobNames(jobs))
		}
		first := jobs[0]
		// A Job to start (the result is gone: plan again) runs inputs read
		// now, not a hash.
		finishWithoutResult()
		f.sync()
		jobs = f.createdJobs()
		if len(jobs) != 1 || runs(jobs[0]) != "# one" || jobs[0].Labels[names.LabelInputsHash] != first.Labels[names.LabelInputsHash] {
			t.Fatalf("created %v, want a Job of the same inputs", jobNames(jobs))
		}
		if reads := inputReads(); len(reads) == 0 {
			t.Error("a Job started without its inputs being read")
		}
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.outputs})
		f.sync()
		if st := f.object().WorkspaceStatus(); st.AppliedInputsHash != first.Labels[names.LabelInputsHash] {
			t.Fatalf("applied %q, want the Job's %q", st.AppliedInputsHash, first.Labels[names.LabelInputsHash])
		}
		if reads := inputReads(); len(reads) > 0 {
			t.Errorf("the sync that recorded the apply read %v: the inputs were read when its Job started", reads)
		}
		f.observe()
		f.sync()
		if reads := inputReads(); len(reads) > 0 || len(f.createdJobs()) > 0 {
			t.Errorf("a sync of an applied object read %v and created %v", reads, jobNames(f.createdJobs()))
		}
		// A spec change that is no input (the provider ID the apply wrote)
		// reads nothing either.
		f.change(func(o workspace.Object) { o.SetGeneration(o.GetGeneration() + 1) })
		f.sync()
		if reads := inputReads(); len(reads) > 0 || len(f.createdJobs()) > 0 {
			t.Errorf("a sync after the provider ID was written read %v and created %v", reads, jobNames(f.createdJobs()))
		}

		// A changed module: not read by a sync for the object's status...
		setModule("# two")
		f.sync()
		if reads := inputReads(); len(reads) > 0 || len(f.createdJobs()) > 0 {
			t.Errorf("a sync of an applied object read %v and created %v", reads, jobNames(f.createdJobs()))
		}
		// ...but at its resync, which applies it.
		cached := f.object()
		f.c.UpdateObjectForTest(cached, cached)
		f.sync()
		jobs = f.createdJobs()
		if len(jobs) != 1 || runs(jobs[0]) != "# two" {
			t.Fatalf("after a resync created %v, want an apply of the changed module", jobNames(jobs))
		}
		second := jobs[0]

		// A module changed when a Job is to start: the Job is not started
		// on the remembered hash; the next sync decides on the new module.
		finishWithoutResult()
		setModule("# three")
		f.sync()
		if jobs := f.createdJobs(); len(jobs) > 0 {
			t.Fatalf("created %v on inputs that changed since their hash was taken", jobNames(jobs))
		}
		f.sync()
		jobs = f.createdJobs()
		if len(jobs) != 1 || runs(jobs[0]) != "# three" || jobs[0].Labels[names.LabelInputsHash] == second.Labels[names.LabelInputsHash] {
			t.Fatalf("created %v, want an apply of the module as it is now", jobNames(jobs))
		}
		third := jobs[0]

		// What CAPTF's inputs take from the owner is no Secret: a change of
		// it is seen at once.
		if k.kind != "TerraformMachine" {
			return
		}
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.outputs})
		f.sync()
		f.observe()
		owner := f.capiSource("machines", f.capi["machines"].List()[0].(*capi.Object).Name)
		if err := unstructured.SetNestedField(owner.Object, "v1.37.3", "spec", "version"); err != nil {
			t.Fatal(err)
		}
		f.putCAPI(owner)
		f.sync()
		jobs = f.createdJobs()
		if len(jobs) != 1 || jobs[0].Labels[names.LabelInputsHash] == third.Labels[names.LabelInputsHash] {
			t.Fatalf("after the Machine's version changed created %v, want an apply of the new version", jobNames(jobs))
		}
		fourth := jobs[0]
		// Nor is which Secret holds its bootstrap data.
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.outputs})
		f.sync()
		f.observe()
		other := bootstrapData.DeepCopy()
		other.Name, other.Data = "boot-2", map[string][]byte{"value": []byte("#cloud-config\n# 2")}
		if _, err := f.kube.CoreV1().Secrets("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		owner = owner.DeepCopy()
		if err := unstructured.SetNestedField(owner.Object, other.Name, "spec", "bootstrap", "dataSecretName"); err != nil {
			t.Fatal(err)
		}
		f.putCAPI(owner)
		f.sync()
		if jobs := f.createdJobs(); len(jobs) != 1 || jobs[0].Labels[names.LabelInputsHash] == fourth.Labels[names.LabelInputsHash] {
			t.Fatalf("after the Machine's bootstrap data Secret changed created %v, want an apply of its data", jobNames(jobs))
		}
	})
}

// TestMoveUnblockedOnceNoJobRuns: clusterctl's block-move annotation is set
// with the first Job and removed once no Job runs, in the same update as
// the outputs the apply wrote into the spec, or alone when the sync
// writes nothing else (a failed apply).
func TestMoveUnblockedOnceNoJobRuns(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		for _, succeeded := range []bool{true, false} {
			f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
			f.sync()
			if _, ok := f.object().GetAnnotations()[capi.BlockMoveAnnotation]; !ok || len(f.createdJobs()) != 1 {
				t.Fatalf("created %v with annotations %v, want a Job and the block-move annotation", jobNames(f.createdJobs()), f.object().GetAnnotations())
			}
			f.endJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Outputs: k.outputs}, succeeded)
			f.sync()
			if _, ok := f.object().GetAnnotations()[capi.BlockMoveAnnotation]; ok {
				t.Errorf("succeeded %v: the block-move annotation stays once no Job runs", succeeded)
			}
			var updates []string
			for _, w := range f.writes() {
				if strings.HasPrefix(w, f.expand("patch {res} ")) {
					updates = append(updates, w)
				}
			}
			if len(updates) != 1 {
				t.Errorf("succeeded %v: updates of the object %q, want one", succeeded, updates)
			}
		}
	})
}

// TestCleanDriftChecksLeaveNoJob: a drift check that found no drift keeps
// no Job (nor result) once the status holds its result, the apply's Job
// stays, and the next check is still due at its slot; the newest check
// that found drift is kept while Drifted is True.
func TestCleanDriftChecksLeaveNoJob(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		ctx := context.Background()
		f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
			o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
		}), k.capi, k.kube...)
		f.sync()
		apply := f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()
		clk := f.clock
		n := names.Object{Kind: k.short, Name: "prod"}
		// check runs the next drift check, on time, ending with plan.
		check := func(plan *run.Plan) *batchv1.Job {
			t.Helper()
			start := clk.Now()
			for len(f.createdJobs()) == 0 && clk.Since(start) < 2*time.Minute {
				clk.Step(5 * time.Second)
				f.sync()
			}
			jobs := f.createdJobs()
			if len(jobs) != 1 || !strings.Contains(jobs[0].Name, "-drift-") || clk.Since(start) < 30*time.Second {
				t.Fatalf("%s later: created %v, want a drift check after half an interval at least", clk.Since(start), jobNames(jobs))
			}
			f.observe(jobs[0])
			job := f.finishJob(run.Result{Operation: infrav1.OperationDrift, Outcome: run.OutcomeSucceeded, Plan: plan})
			f.sync() // records it
			if len(f.jobs.deleted) != 0 {
				t.Fatalf("Jobs deleted before the check was recorded: %v", f.jobs.deleted)
			}
			f.observe()
			f.sync() // with its result in the status
			return job
		}
		clean := check(&run.Plan{Hash: "2222222222222222"})
		if !slices.Equal(f.jobs.deleted, []string{clean.Name}) {
			t.Fatalf("deleted %v once the clean check was recorded, want its Job alone (not the apply's %s)", f.jobs.deleted, apply.Name)
		}
		if _, err := f.kube.CoreV1().Secrets("ns").Get(ctx, n.Result(clean.Name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the clean check's result after its Job went: %v, want deleted", err)
		}
		if c := f.condition(infrav1.ConditionDrifted); c == nil || c.Reason != workspace.ReasonNoDrift {
			t.Fatalf("Drifted %+v, want NoDrift", c)
		}
		if err := f.c.EngineForTest().JobIndex.Delete(runnerjob.Trim(clean)); err != nil {
			t.Fatal(err)
		}
		f.observe()
		drifted := check(&run.Plan{Hash: "3333333333333333", Summary: infrav1.PlanSummary{Change: 1}})
		if len(f.jobs.deleted) != 0 {
			t.Errorf("deleted %v while Drifted is True, want the check that found it kept", f.jobs.deleted)
		}
		if c := f.condition(infrav1.ConditionDrifted); c == nil || c.Reason != workspace.ReasonDriftDetected {
			t.Errorf("Drifted %+v after %s, want DriftDetected", c, drifted.Name)
		}
	})
}

// TestANewObjectWaitsForItsOwnerQuietly: Cluster API makes a machine
// before the Machine that owns it; for its first seconds the missing owner
// costs no status write, and a wait that lasts is reported.
func TestANewObjectWaitsForItsOwnerQuietly(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		clk := testingclock.NewFakeClock(time.Now())
		f := newFixture(t, k, newObject(k, func(o workspace.Object) {
			o.SetOwnerReferences(nil)
			o.SetCreationTimestamp(metav1.NewTime(clk.Now()))
		}), nil, k.kube...)
		f.clock.SetTime(clk.Now())
		clk = f.clock
		f.sync()
		f.wantPrefixes("writes of a new object waiting for its owner", f.writes(), nil)
		clk.Step(10 * time.Second)
		f.sync()
		f.wantPrefixes("writes once the wait lasted", f.writes(), []string{"update {res}/status prod"})
		if r := f.readyReason(); r != k.ownerWait {
			t.Errorf("Ready reason %q, want %q", r, k.ownerWait)
		}
	})
}

// TestAFinishedPodNotYetCountedIsNoRefusal: a Job whose pod ended, and
// that the Job controller has not counted yet, is neither active nor
// finished; it has had its pod, so nothing reads events for why it has
// none (a busy Job controller made that read for a run in three).
func TestAFinishedPodNotYetCountedIsNoRefusal(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		job := f.createdJobs()[0].DeepCopy()
		job.UID = "job-uid"
		job.Status.StartTime = &metav1.Time{Time: time.Now().Add(-time.Minute)}
		job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"pod-uid"}}
		f.observe(job)
		f.sync()
		for _, a := range f.kube.Actions() {
			if a.GetResource().Resource == "events" && a.GetVerb() == "list" {
				t.Errorf("listed the events of Job %s, whose pod ended", job.Name)
			}
		}
		if r := f.readyReason(); r == workspace.ReasonQuotaExceeded || r == workspace.ReasonRunnerPodRefused {
			t.Errorf("Ready reason %s for a Job whose pod ended", r)
		}
	})
}

// TestTheApplyLeavesTheNextSyncNothingToWrite: the sync that records an
// apply writes the spec (a machine's provider ID), which the API server
// counts as a new generation; the conditions it set saw that spec, so the
// next sync has no status to write (it once wrote every condition's
// observedGeneration again: a status write more per machine).
func TestTheApplyLeavesTheNextSyncNothingToWrite(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		// The API server's generation: one more for each change of the spec.
		f.captf.PrependReactor("patch", k.resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "" {
				return false, nil, nil
			}
			_, _, _ = f.log.record(a) // handled here, before the log's reactor
			stored, err := f.captf.Tracker().Get(f.gvr(), a.GetNamespace(), a.(k8stesting.PatchAction).GetName())
			if err != nil {
				return false, nil, nil
			}
			old := stored.(workspace.Object)
			handled, patched, err := k8stesting.ObjectReaction(f.captf.Tracker())(a)
			if err != nil || !handled {
				return handled, patched, err
			}
			obj := patched.(workspace.Object)
			obj.SetGeneration(old.GetGeneration())
			if !equality.Semantic.DeepEqual(specOf(t, old), specOf(t, obj)) {
				obj.SetGeneration(old.GetGeneration() + 1)
			}
			return true, obj, f.captf.Tracker().Update(f.gvr(), obj, obj.GetNamespace())
		})
		f.sync()
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
		f.sync()
		f.observe()
		f.sync()
		f.wantPrefixes("writes of the sync after the apply's", f.writes(), nil)
	})
}

// specOf is obj's spec, as the API server compares it.
func specOf(t *testing.T, obj workspace.Object) any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u["spec"]
}

// TestPlanServiceAccount: with spec.jobs.planServiceAccountName, drift
// checks (runs that only plan) run as that ServiceAccount and applies as
// serviceAccountName; an account without captf.io/runner=true is refused,
// the field that names it said.
func TestPlanServiceAccount(t *testing.T) {
	k := kinds[0]
	for name, readerLabelled := range map[string]bool{"labelled": true, "unlabelled": false} {
		t.Run(name, func(t *testing.T) {
			sa := func(name string, labelled bool) *corev1.ServiceAccount {
				s := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
				if labelled {
					s.Labels = map[string]string{infrav1.LabelRunnerServiceAccount: "true"}
				}
				return s
			}
			f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
				o.Workspace().Jobs = &infrav1.JobPolicy{ServiceAccountName: "cloud", PlanServiceAccountName: "reader"}
				o.Workspace().Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Minute}}
			}), k.capi, sa("cloud", true), sa("reader", readerLabelled))
			f.sync()
			if jobs := f.createdJobs(); len(jobs) != 1 || jobs[0].Spec.Template.Spec.ServiceAccountName != "cloud" {
				t.Fatalf("the apply: %v, want one Job running as cloud", jobNames(jobs))
			}
			f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: k.outputs})
			f.sync()
			f.observe()
			clk := f.clock
			start := clk.Now()
			for len(f.createdJobs()) == 0 && f.readyReason() != workspace.ReasonRunnerServiceAccountNotAllowed && clk.Since(start) < 2*time.Minute {
				clk.Step(5 * time.Second)
				f.sync()
			}
			jobs := f.createdJobs()
			if !readerLabelled {
				c := f.condition(infrav1.ConditionReady)
				if len(jobs) != 0 || c == nil || c.Reason != workspace.ReasonRunnerServiceAccountNotAllowed || !strings.Contains(c.Message, "spec.jobs.planServiceAccountName: ServiceAccount reader lacks the label") {
					t.Errorf("an unlabelled plan account: Jobs %v, Ready %+v", jobNames(jobs), c)
				}
				return
			}
			if len(jobs) != 1 || !strings.Contains(jobs[0].Name, "-drift-") || jobs[0].Spec.Template.Spec.ServiceAccountName != "reader" {
				t.Errorf("the drift check: %v, want one Job running as reader", jobNames(jobs))
			}
		})
	}
}

// TestPlanServiceAccountUnderManual: under approvalPolicy Manual an apply
// Job that holds no approval can only plan (its runner applies no change
// without one), so it runs as planServiceAccountName, checked as any
// runner's account; the Job an approval starts runs as serviceAccountName.
// Destructive lets a plan that creates apply unasked: its applies run as
// serviceAccountName.
func TestPlanServiceAccountUnderManual(t *testing.T) {
	k := kinds[0]
	for name, tc := range map[string]struct {
		policy               infrav1.ApprovalPolicy
		readerLabelled       bool
		first, afterApproval string
		// mayAllow: a TerraformPlanPolicy has a rule that may let a plan
		// apply without a person: the Job must be able to apply it.
		mayAllow bool
	}{
		"Manual":                               {policy: infrav1.ApprovalPolicyManual, readerLabelled: true, first: "reader", afterApproval: "cloud"},
		"Manual, reader unlabelled":            {policy: infrav1.ApprovalPolicyManual},
		"Destructive":                          {policy: infrav1.ApprovalPolicyDestructive, readerLabelled: true, first: "cloud", afterApproval: "cloud"},
		"Manual, a plan policy that may allow": {policy: infrav1.ApprovalPolicyManual, readerLabelled: true, first: "cloud", afterApproval: "cloud", mayAllow: true},
	} {
		t.Run(name, func(t *testing.T) {
			runner := map[string]string{infrav1.LabelRunnerServiceAccount: "true"}
			reader := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "ns"}}
			if tc.readerLabelled {
				reader.Labels = runner
			}
			f := newFixture(t, k, newObject(k, withFinalizer(k), func(o workspace.Object) {
				o.(*infrav1.TerraformCluster).Spec.ApprovalPolicy = tc.policy
				o.Workspace().Jobs = &infrav1.JobPolicy{ServiceAccountName: "cloud", PlanServiceAccountName: "reader"}
			}), k.capi, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Namespace: "ns", Labels: runner}}, reader)
			if tc.mayAllow {
				policy := &infrav1.TerraformPlanPolicy{ObjectMeta: metav1.ObjectMeta{Name: "adds"}, Spec: infrav1.TerraformPlanPolicySpec{
					Rules: []infrav1.PlanRule{{Name: "adds", Expression: "summary.destroy == 0", Action: infrav1.PlanActionAllow, Message: "m"}}}}
				if err := f.informers().Infrastructure().V1alpha1().TerraformPlanPolicies().Informer().GetIndexer().Add(policy); err != nil {
					t.Fatal(err)
				}
			}
			f.sync()
			jobs := f.createdJobs()
			if !tc.readerLabelled {
				c := f.condition(infrav1.ConditionReady)
				if len(jobs) != 0 || c == nil || c.Reason != workspace.ReasonRunnerServiceAccountNotAllowed || !strings.Contains(c.Message, "spec.jobs.planServiceAccountName: ServiceAccount reader lacks the label") {
					t.Errorf("an unlabelled plan account: Jobs %v, Ready %+v", jobNames(jobs), c)
				}
				return
			}
			if len(jobs) != 1 || jobs[0].Spec.Template.Spec.ServiceAccountName != tc.first {
				t.Fatalf("the first apply: %v, want one Job running as %s", jobNames(jobs), tc.first)
			}
			if carries := slices.ContainsFunc(jobs[0].Spec.Template.Spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--plan-policy=") }); carries != tc.mayAllow {
				t.Errorf("the first apply carries the plan policy: %v, want %v", carries, tc.mayAllow)
			}
			destroyOne := infrav1.PlanSummary{Destroy: 1, Resources: []infrav1.PlannedResource{{Address: "terraform_data.instance[1]", Action: "destroy"}}}
			f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeBlocked, Stage: "gate",
				Plan: &run.Plan{Hash: "1111111111111111", Summary: destroyOne}})
			f.sync()
			f.observe()
			f.annotate(infrav1.AnnotationApproveDestructivePlan, "1111111111111111")
			f.sync()
			jobs = f.createdJobs()
			if len(jobs) != 1 || jobs[0].Spec.Template.Spec.ServiceAccountName != tc.afterApproval {
				t.Errorf("the approved apply: %v, want one Job running as %s", jobNames(jobs), tc.afterApproval)
			}
		})
	}
}

// TestRunnerEnvWinsOverEnvFrom: where the runner sends its token is set
// in the pod's env, even when empty, so that no key of an envFrom (a
// ConfigMap a writer edits) can say it.
func TestRunnerEnvWinsOverEnvFrom(t *testing.T) {
	k := kinds[0]
	f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi)
	f.sync()
	jobs := f.createdJobs()
	if len(jobs) != 1 {
		t.Fatalf("created %v", jobNames(jobs))
	}
	set := map[string]bool{}
	for _, e := range jobs[0].Spec.Template.Spec.Containers[0].Env {
		set[e.Name] = true
	}
	for _, name := range []string{run.EnvRunnerAPI, run.EnvRunnerAPICA, "POD_NAME", "POD_NAMESPACE", "POD_UID"} {
		if !set[name] {
			t.Errorf("the runner's env does not set %s: an envFrom could", name)
		}
	}
}

// TestClusterChangeEnqueuesItsMembers: a Cluster's change (its pause, its
// infrastructure ready) enqueues its machines or pools, and no other
// cluster's, from the caches the manager builds (no namespace index).
func TestClusterChangeEnqueuesItsMembers(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		if k.kind == "TerraformCluster" {
			return
		}
		f := newFixture(t, k, newObject(k), k.capi, k.kube...)
		for _, o := range []struct{ name, namespace, cluster string }{{"sibling", "ns", "work"}, {"elsewhere", "ns", "other"}, {"namesake", "other-ns", "work"}} {
			obj := k.newObject()
			obj.SetName(o.name)
			obj.SetNamespace(o.namespace)
			obj.SetUID(types.UID("uid-" + o.name))
			obj.SetLabels(map[string]string{capi.ClusterNameLabel: o.cluster})
			if err := f.objects.Add(obj); err != nil {
				t.Fatal(err)
			}
		}
		q := f.c.QueueForTest()
		for q.Len() > 0 {
			key, _ := q.Get()
			q.Done(key)
			q.Forget(key)
		}
		f.c.HandleClusterForTest(&capi.Object{ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: "ns"}})
		var got []string
		for q.Len() > 0 {
			key, _ := q.Get()
			got = append(got, key.String())
			q.Done(key)
		}
		slices.Sort(got)
		if want := []string{"ns/prod", "ns/sibling"}; !slices.Equal(got, want) {
			t.Errorf("a change of Cluster ns/work enqueued %v, want %v", got, want)
		}
	})
}

// TestOutputsBounded (issue 50, item 4): a module's non-sensitive outputs
// beyond what a status holds are InvalidOutput, and none reaches the
// status (and so the manager's cache); sensitive ones never do.
func TestOutputsBounded(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		f := newFixture(t, k, newObject(k, withFinalizer(k)), k.capi, k.kube...)
		f.sync()
		big := strconv.Quote(strings.Repeat("o", workspace.MaxStatusOutputBytes))
		outputs := maps.Clone(k.outputs)
		outputs["secret_blob"] = run.Output{Value: json.RawMessage(big), Sensitive: true}
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "1111111111111111"}, Outputs: outputs})
		f.sync()
		if r := f.readyReason(); r != workspace.ReasonApplied {
			t.Fatalf("a big sensitive output: Ready's reason %q, want Applied", r)
		}
		f.observe()
		f.change(func(o workspace.Object) {
			o.SetGeneration(o.GetGeneration() + 1)
			o.Workspace().Module.Inline += "\n# more"
		})
		f.sync()
		outputs["blob"] = run.Output{Value: json.RawMessage(big)}
		f.finishJob(run.Result{Operation: infrav1.OperationApply, Outcome: run.OutcomeSucceeded, Plan: &run.Plan{Hash: "2222222222222222"}, Outputs: outputs})
		f.sync()
		c := f.condition(infrav1.ConditionReady)
		if c == nil || c.Reason != workspace.ReasonInvalidOutput || !strings.Contains(c.Message, "mark large outputs sensitive") {
			t.Errorf("Ready = %+v, want InvalidOutput saying what to do", c)
		}
		if _, ok := f.object().WorkspaceStatus().Outputs["blob"]; ok {
			t.Error("the big output reached the status")
		}
	})
}
