package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/controller/terraformcluster"
	"github.com/captf/captf/pkg/controller/terraformmachine"
	"github.com/captf/captf/pkg/controller/terraformmachinepool"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/generated/clientset/versioned/fake"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
	"github.com/captf/captf/pkg/manager"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
	"github.com/captf/captf/pkg/statestore"
)

// testable is a Controller[T] of any kind, as the fixture drives it.
type testable interface {
	SyncForTest(ctx context.Context, key cache.ObjectName) error
	EngineForTest() *workspace.EngineOfTest
	ExpectationsForTest() *controller.Expectations
	WrittenForTest() *controller.WrittenVersions
	UpdateObjectForTest(old, cur any)
	DeleteObjectForTest(obj any)
	HandleClusterForTest(obj any)
	QueueForTest() workqueue.TypedRateLimitingInterface[cache.ObjectName]
	UseForTest(jobs runnerjob.Control, recorder record.EventRecorder)
}

// kindCase is one kind as the fixture sets it up: an object named prod in
// namespace ns, its Cluster API owner ready for an apply, and what a
// successful apply outputs.
type kindCase struct {
	kind, resource, short string
	finalizer             string
	ownerWait             string
	newObject             func() workspace.Object
	// capi are Cluster API's objects: the owner first.
	capi []*unstructured.Unstructured
	// kube are the objects the owner refers to (bootstrap data).
	kube          []runtime.Object
	newController func(context.Context, controller.Context, workspace.Config) (testable, error)
	// outputs is what a successful apply of the kind's module outputs,
	// and applied checks that they reached the object.
	outputs map[string]run.Output
	applied func(t *testing.T, obj workspace.Object)
	// badOutputs is an apply's outputs the kind cannot read.
	badOutputs map[string]run.Output
}

var capiGVK = schema.GroupVersion{Group: capi.Group, Version: capi.Version}

func capiObject(kind, name string, spec, status map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": capiGVK.String(), "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": strings.ToLower(kind) + "-uid"},
		"spec":     spec, "status": status,
	}}
}

func ownerRef(kind string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: capiGVK.String(), Kind: kind, Name: "owner", UID: types.UID(strings.ToLower(kind) + "-uid")}}
}

func outputsOf(kv ...string) map[string]run.Output {
	m := map[string]run.Output{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = run.Output{Value: json.RawMessage(kv[i+1])}
	}
	return m
}

func workspaceSpec() infrav1.WorkspaceSpec {
	return infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: `output "x" { value = 1 }`}}
}

// A Cluster whose infrastructure and control plane are ready.
func readyCluster(name string) *unstructured.Unstructured {
	return capiObject("Cluster", name, map[string]any{}, map[string]any{"initialization": map[string]any{
		"infrastructureProvisioned": true, "controlPlaneInitialized": true}})
}

// bootstrapData is a plain Secret its writer labelled as bootstrap data.
var bootstrapData = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: "ns", Labels: map[string]string{infrav1.LabelBootstrapData: "true"}},
	Data: map[string][]byte{"value": []byte("#cloud-config")}}

var clusterLabel = map[string]string{capi.ClusterNameLabel: "work"}

var kinds = []kindCase{
	{
		kind: "TerraformCluster", resource: "terraformclusters", short: "tfc",
		finalizer: infrav1.TerraformClusterFinalizer, ownerWait: terraformcluster.ReasonWaitingForOwner,
		newObject: func() workspace.Object {
			return &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "obj-uid", Generation: 1, OwnerReferences: ownerRef("Cluster")},
				Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: workspaceSpec()}}
		},
		capi: []*unstructured.Unstructured{capiObject("Cluster", "owner", map[string]any{
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformCluster", "name": "prod"}}, nil)},
		newController: func(ctx context.Context, cc controller.Context, config workspace.Config) (testable, error) {
			return workspace.NewController(ctx, cc, config, terraformcluster.Kind)
		},
		outputs: outputsOf("control_plane_endpoint", `"10.0.0.1:6443"`, "failure_domains", `{"a":{"controlPlane":true}}`),
		applied: func(t *testing.T, obj workspace.Object) {
			tc := obj.(*infrav1.TerraformCluster)
			if tc.Spec.ControlPlaneEndpoint.Host != "10.0.0.1" || tc.Spec.ControlPlaneEndpoint.Port != 6443 || len(tc.Status.FailureDomains) != 1 {
				t.Errorf("endpoint %+v, failure domains %+v", tc.Spec.ControlPlaneEndpoint, tc.Status.FailureDomains)
			}
		},
		badOutputs: outputsOf("control_plane_endpoint", `"no port"`),
	},
	{
		kind: "TerraformMachine", resource: "terraformmachines", short: "tfm",
		finalizer: infrav1.TerraformMachineFinalizer, ownerWait: terraformmachine.ReasonWaitingForOwner,
		newObject: func() workspace.Object {
			return &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "obj-uid", Generation: 1,
				OwnerReferences: ownerRef("Machine"), Labels: clusterLabel},
				Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: workspaceSpec()}}
		},
		capi: []*unstructured.Unstructured{capiObject("Machine", "owner", map[string]any{"clusterName": "work",
			"bootstrap":         map[string]any{"dataSecretName": "boot"},
			"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachine", "name": "prod"}}, nil),
			readyCluster("work")},
		kube: []runtime.Object{bootstrapData},
		newController: func(ctx context.Context, cc controller.Context, config workspace.Config) (testable, error) {
			return workspace.NewController(ctx, cc, config, terraformmachine.Kind)
		},
		outputs: outputsOf("provider_id", `"aws:///a/i-1"`, "addresses", `["10.0.0.7"]`),
		applied: func(t *testing.T, obj workspace.Object) {
			tm := obj.(*infrav1.TerraformMachine)
			if tm.Spec.ProviderID != "aws:///a/i-1" || len(tm.Status.Addresses) != 1 {
				t.Errorf("providerID %q, addresses %+v", tm.Spec.ProviderID, tm.Status.Addresses)
			}
		},
		badOutputs: outputsOf("addresses", `[]`),
	},
	{
		kind: "TerraformMachinePool", resource: "terraformmachinepools", short: "tfmp",
		finalizer: infrav1.TerraformMachinePoolFinalizer, ownerWait: terraformmachinepool.ReasonWaitingForOwner,
		newObject: func() workspace.Object {
			return &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "obj-uid", Generation: 1,
				OwnerReferences: ownerRef("MachinePool"), Labels: clusterLabel},
				Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: workspaceSpec()}}
		},
		capi: []*unstructured.Unstructured{capiObject("MachinePool", "owner", map[string]any{"clusterName": "work", "replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{
				"bootstrap":         map[string]any{"dataSecretName": "boot"},
				"infrastructureRef": map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": "TerraformMachinePool", "name": "prod"}}}}, nil),
			readyCluster("work")},
		kube: []runtime.Object{bootstrapData},
		newController: func(ctx context.Context, cc controller.Context, config workspace.Config) (testable, error) {
			return workspace.NewController(ctx, cc, config, terraformmachinepool.Kind)
		},
		outputs: outputsOf("provider_ids", `["p://1","p://2"]`),
		applied: func(t *testing.T, obj workspace.Object) {
			p := obj.(*infrav1.TerraformMachinePool)
			if !slices.Equal(p.Spec.ProviderIDList, []string{"p://1", "p://2"}) || p.Status.Replicas != 2 {
				t.Errorf("providerIDList %v, replicas %d", p.Spec.ProviderIDList, p.Status.Replicas)
			}
		},
		badOutputs: outputsOf("provider_ids", `"p://1"`),
	},
}

// forKinds runs test once per kind.
func forKinds(t *testing.T, test func(t *testing.T, k kindCase)) {
	for _, k := range kinds {
		t.Run(k.kind, func(t *testing.T) { test(t, k) })
	}
}

// fakeJobControl records every attempt to create or delete a Job in the
// write log, in order, including a second create of a Job that exists (the
// API answers it AlreadyExists, which hides a duplicate from the engine but
// not from the test).
type fakeJobControl struct {
	created []*batchv1.Job
	deleted []string
	log     *writeLog
	// refuse, when set, is the API server's answer to every create.
	refuse error
}

func (f *fakeJobControl) Create(_ context.Context, job *batchv1.Job) error {
	f.log.add("create jobs " + job.Name)
	if f.refuse != nil {
		return f.refuse
	}
	key, _ := run.WriteKeyOf(&job.Spec.Template.Spec)
	for _, j := range f.created {
		if j.Name == job.Name {
			return apierrors.NewAlreadyExists(batchv1.Resource("jobs"), job.Name)
		}
		if other, _ := run.WriteKeyOf(&j.Spec.Template.Spec); other == key {
			return fmt.Errorf("job %s has the write key of job %s: each Job's runner has its own", job.Name, j.Name)
		}
	}
	if key == "" {
		return fmt.Errorf("job %s has no write key: the module's code of its pod would write", job.Name)
	}
	f.created = append(f.created, job.DeepCopy())
	return nil
}

func (f *fakeJobControl) Delete(_ context.Context, job *runnerjob.Cached, _ metav1.DeletionPropagation) error {
	f.log.add("delete jobs " + job.Name)
	f.deleted = append(f.deleted, job.Name)
	return nil
}

// writeLog is every write to the API, the Jobs' included, in the order the
// engine made them: "verb resource[/subresource] name".
type writeLog struct{ writes []string }

func (l *writeLog) add(w string) { l.writes = append(l.writes, w) }

// record is a reactor that logs each write and leaves it to the tracker.
func (l *writeLog) record(a core.Action) (bool, runtime.Object, error) {
	if v := a.GetVerb(); v == "get" || v == "list" || v == "watch" {
		return false, nil, nil
	}
	what := a.GetResource().Resource
	if a.GetSubresource() != "" {
		what += "/" + a.GetSubresource()
	}
	name := ""
	switch a := a.(type) {
	case core.CreateAction:
		name = a.GetObject().(metav1.Object).GetName()
	case core.UpdateAction:
		name = a.GetObject().(metav1.Object).GetName()
	case core.DeleteAction:
		name = a.GetName()
	case core.PatchAction:
		name = a.GetName()
	}
	l.add(a.GetVerb() + " " + what + " " + name)
	return false, nil, nil
}

type fixture struct {
	t       *testing.T
	k       kindCase
	kube    *k8sfake.Clientset
	captf   *fake.Clientset
	jobs    *fakeJobControl
	events  *record.FakeRecorder
	c       testable
	objects cache.Indexer
	cc      controller.Context
	capi    map[string]cache.Indexer
	// seen are the Jobs created before the last clear.
	seen int
	log  *writeLog
	// capiSources are the Cluster API objects put, before capi.Trim.
	capiSources map[string]*unstructured.Unstructured
	// clock is the controller's, its engine's, loop's and expectations'.
	clock *testingclock.FakeClock
	// transform is what the manager's informers do to what they cache.
	transform func(any) (any, error)
}

// cached is a copy of obj as the manager's informers cache it.
func (f *fixture) cached(obj runtime.Object) any {
	f.t.Helper()
	o, err := f.transform(obj.DeepCopyObject())
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

// newFixture sets up kind k's controller with obj in its cache and the API,
// Cluster API's objects capiObjects, and kube objects.
func newFixture(t *testing.T, k kindCase, obj workspace.Object, capiObjects []*unstructured.Unstructured, kubeObjects ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	kube := k8sfake.NewClientset(kubeObjects...)
	captf := fake.NewSimpleClientset(obj)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		capi.Cluster.Resource: "ClusterList", capi.Machine.Resource: "MachineList", capi.MachinePool.Resource: "MachinePoolList"})
	// The manager's caches (their indexes, transforms and selectors) and
	// one clock for the whole controller.
	clk := testingclock.NewFakeClock(time.Now())
	cc := controller.Context{Kube: kube, CAPTF: captf, Clock: clk}
	transform := manager.CacheTransform(manager.CacheFactories(&cc, dyn, "", 0, ""))
	c, err := k.newController(ctx, cc, workspace.Config{Access: &workspace.RunnerAccess{Client: kube}, RunnerImage: "captf:test", StateBackups: 5})
	if err != nil {
		t.Fatal(err)
	}
	log := &writeLog{}
	kube.PrependReactor("*", "*", log.record)
	captf.PrependReactor("*", "*", log.record)
	f := &fixture{t: t, k: k, kube: kube, captf: captf, c: c, jobs: &fakeJobControl{log: log}, events: record.NewFakeRecorder(100),
		capi: map[string]cache.Indexer{}, cc: cc, log: log, clock: clk, transform: transform}
	c.UseForTest(f.jobs, f.events)
	inf, err := cc.CAPTFInformers.ForResource(f.gvr())
	if err != nil {
		t.Fatal(err)
	}
	f.objects = inf.Informer().GetIndexer()
	if err := f.objects.Add(f.cached(obj)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []schema.GroupVersionResource{capi.Cluster.Resource, capi.Machine.Resource, capi.MachinePool.Resource} {
		f.capi[r.Resource] = cc.CAPIInformers.ForResource(r).Informer().GetIndexer()
	}
	for _, o := range capiObjects {
		f.putCAPI(o)
	}
	kube.ClearActions()
	captf.ClearActions()
	log.writes = nil
	return f
}

func (f *fixture) informers() externalversions.SharedInformerFactory { return f.cc.CAPTFInformers }

// putCAPI adds or updates a Cluster API object in the cache as the
// manager's informers hold it (capi.Trim); f.capiSource gives it back as
// it was put.
func (f *fixture) putCAPI(u *unstructured.Unstructured) {
	f.t.Helper()
	k, ok := capi.KindOf(u.GetKind())
	if !ok {
		f.t.Fatalf("not a Cluster API owner: %s", u.GetKind())
	}
	if f.capiSources == nil {
		f.capiSources = map[string]*unstructured.Unstructured{}
	}
	f.capiSources[k.Resource.Resource+"/"+u.GetName()] = u.DeepCopy()
	store, obj := f.capi[k.Resource.Resource], f.cached(u)
	_, exists, err := store.Get(obj)
	if err == nil {
		if exists {
			err = store.Update(obj)
		} else {
			err = store.Add(obj)
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// capiSource is the Cluster API object of resource and name as it was
// last put.
func (f *fixture) capiSource(resource, name string) *unstructured.Unstructured {
	f.t.Helper()
	u, ok := f.capiSources[resource+"/"+name]
	if !ok {
		f.t.Fatalf("no %s %s was put", resource, name)
	}
	return u.DeepCopy()
}

func (f *fixture) gvr() schema.GroupVersionResource {
	return infrav1.SchemeGroupVersion.WithResource(f.k.resource)
}

var key = cache.ObjectName{Namespace: "ns", Name: "prod"}

func (f *fixture) sync() {
	f.t.Helper()
	if err := f.trySync(); err != nil {
		f.t.Fatal(err)
	}
}

// trySync syncs and returns the error the queue would retry on.
func (f *fixture) trySync() error {
	_, ctx := ktesting.NewTestContext(f.t)
	return f.c.SyncForTest(ctx, key)
}

// backupState makes the object's current state a backup, as the next run
// would, and returns the backup's name.
func (f *fixture) backupState() string {
	f.t.Helper()
	ctx := context.Background()
	store := &statestore.StateStore{Client: f.kube, Namespace: "ns", Object: names.Object{Kind: f.k.short, Name: "prod"}, Backups: 5}
	if err := store.Write(ctx, []byte(`{"serial":2}`)); err != nil {
		f.t.Fatal(err)
	}
	backups, err := store.ListBackups(ctx)
	if err != nil || len(backups) != 1 {
		f.t.Fatalf("backups %v, %v; want 1", backups, err)
	}
	return backups[0]
}

// object is the object as the API holds it.
func (f *fixture) object() workspace.Object {
	f.t.Helper()
	o, err := f.captf.Tracker().Get(f.gvr(), "ns", "prod")
	if err != nil {
		f.t.Fatal(err)
	}
	return o.(workspace.Object)
}

func (f *fixture) condition(t string) *metav1.Condition {
	f.t.Helper()
	return meta.FindStatusCondition(f.object().WorkspaceStatus().Conditions, t)
}

func (f *fixture) readyReason() string {
	f.t.Helper()
	if c := f.condition(infrav1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// setCached puts obj into the informer's cache.
func (f *fixture) setCached(obj workspace.Object) {
	f.t.Helper()
	if err := f.objects.Update(f.cached(obj)); err != nil {
		f.t.Fatal(err)
	}
}

// change changes the object in the API and the cache.
func (f *fixture) change(mutate func(workspace.Object)) {
	f.t.Helper()
	obj := f.object().DeepCopyObject().(workspace.Object)
	mutate(obj)
	if err := f.captf.Tracker().Update(f.gvr(), obj, "ns"); err != nil {
		f.t.Fatal(err)
	}
	f.setCached(obj)
}

func (f *fixture) annotate(key, value string) {
	f.change(func(o workspace.Object) { o.SetAnnotations(map[string]string{key: value}) })
}

// createdJobs are the Jobs created since the last observe.
func (f *fixture) createdJobs() []*batchv1.Job { return f.jobs.created[f.seen:] }

func jobNames(jobs []*batchv1.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Name)
	}
	return out
}

// finishJob plays the Job controller and the runner: the newest Job ends
// with res, and the informers see it and the object's last status.
func (f *fixture) finishJob(res run.Result) *batchv1.Job {
	f.t.Helper()
	return f.endJob(res, true)
}

// failJob is finishJob for a Job that failed.
func (f *fixture) failJob(res run.Result) *batchv1.Job {
	f.t.Helper()
	return f.endJob(res, false)
}

func (f *fixture) endJob(res run.Result, succeeded bool) *batchv1.Job {
	f.t.Helper()
	ctx := context.Background()
	if len(f.jobs.created) == 0 {
		f.t.Fatal("no Job to finish")
	}
	job := f.jobs.created[len(f.jobs.created)-1].DeepCopy()
	// A run takes its time, on the API server's clock as the manager's.
	created := metav1.NewTime(f.clock.Now())
	f.clock.Step(time.Second)
	now := metav1.NewTime(f.clock.Now())
	job.CreationTimestamp = created
	if succeeded {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"}}
	}
	obj := names.Object{Kind: f.k.short, Name: "prod"}
	// The runner's state, as it writes it.
	store := &statestore.StateStore{Client: f.kube, Namespace: "ns", Object: obj}
	if err := store.Write(ctx, []byte(`{"serial":1}`)); err != nil {
		f.t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	result := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.Result(job.Name), Namespace: "ns"}, Data: map[string][]byte{run.KeyResult: b}}
	if _, err := f.kube.CoreV1().Secrets("ns").Create(ctx, result, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.observe(job)
	return job
}

// observe puts jobs and the object as the API holds it into the informers,
// and clears what the fakes recorded.
func (f *fixture) observe(jobs ...*batchv1.Job) {
	f.t.Helper()
	for _, job := range jobs {
		if err := f.c.EngineForTest().JobIndex.Update(f.cached(job)); err != nil {
			f.t.Fatal(err)
		}
		f.c.ExpectationsForTest().JobObserved(key, job.Name)
	}
	f.setCached(f.object())
	f.kube.ClearActions()
	f.captf.ClearActions()
	f.seen = len(f.jobs.created)
	f.jobs.deleted = nil
	f.log.writes = nil
	f.drainEvents()
}

// drainEvents returns the events recorded so far: "Type Reason message".
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// writes lists the writes to the API since the last observe, the Jobs'
// included, in the order the engine made them.
func (f *fixture) writes() []string { return slices.Clone(f.log.writes) }

// expand names the kind in a want: {res} is its resource, {k} its short kind.
func (f *fixture) expand(w string) string {
	return strings.NewReplacer("{res}", f.k.resource, "{k}", f.k.short).Replace(w)
}

// wantPrefixes checks got against want, each a prefix, in order.
func (f *fixture) wantPrefixes(what string, got, want []string) {
	f.t.Helper()
	if len(got) != len(want) {
		f.t.Fatalf("%s = %q, want %q", what, got, want)
	}
	for i, w := range want {
		if w = f.expand(w); !strings.HasPrefix(got[i], w) {
			f.t.Errorf("%s %d = %q, want %q...", what, i, got[i], w)
		}
	}
}
