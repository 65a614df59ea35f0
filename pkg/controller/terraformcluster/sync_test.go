package terraformcluster

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/generated/clientset/versioned/fake"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runner"
)

var clustersGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}

type fixture struct {
	t     *testing.T
	kube  *k8sfake.Clientset
	captf *fake.Clientset
	c     *Controller
	tcs   cache.Indexer
}

func newFixture(t *testing.T, tc *infrav1.TerraformCluster, cluster *unstructured.Unstructured, kubeObjects ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	kube := k8sfake.NewClientset(kubeObjects...)
	captf := fake.NewSimpleClientset(tc)
	captfInformers := externalversions.NewSharedInformerFactory(captf, 0)
	kubeInformers := informers.NewSharedInformerFactory(kube, 0)
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{clustersGVR: "ClusterList"})
	clusterInformer := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0).ForResource(clustersGVR)
	jobInformer := kubeInformers.Batch().V1().Jobs()
	if err := jobInformer.Informer().AddIndexers(util.JobIndexers); err != nil {
		t.Fatal(err)
	}
	c, err := NewController(ctx, kube, captf, captfInformers.Infrastructure().V1alpha1().TerraformClusters(), jobInformer,
		clusterInformer.Informer(), clusterInformer.Lister(), &util.RunnerAccess{Client: kube}, Config{RunnerImage: "captf:test", StateBackups: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := captfInformers.Infrastructure().V1alpha1().TerraformClusters().Informer().GetIndexer().Add(tc); err != nil {
		t.Fatal(err)
	}
	if cluster != nil {
		if err := clusterInformer.Informer().GetIndexer().Add(cluster); err != nil {
			t.Fatal(err)
		}
	}
	kube.ClearActions()
	captf.ClearActions()
	return &fixture{t: t, kube: kube, captf: captf, c: c, tcs: captfInformers.Infrastructure().V1alpha1().TerraformClusters().Informer().GetIndexer()}
}

func (f *fixture) sync() {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	if err := f.c.sync(ctx, cache.ObjectName{Namespace: "ns", Name: "prod"}); err != nil {
		f.t.Fatal(err)
	}
}

// writes lists the write actions as "verb resource[/subresource] name".
func writes(actions []core.Action) []string {
	var out []string
	for _, a := range actions {
		if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
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
		}
		out = append(out, a.GetVerb()+" "+what+" "+name)
	}
	return out
}

func newTC(mutate ...func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "tc-uid", Generation: 1,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: "prod", UID: "cluster-uid"}}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: `output "x" { value = 1 }`}}},
	}
	for _, m := range mutate {
		m(tc)
	}
	return tc
}

func newCluster(paused bool) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": "prod", "namespace": "ns", "uid": "cluster-uid"},
		"spec":     map[string]any{"paused": paused},
	}}
}

func readyReason(t *testing.T, f *fixture) string {
	t.Helper()
	tc, err := f.captf.InfrastructureV1alpha1().TerraformClusters("ns").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

func TestSync(t *testing.T) {
	withFinalizer := func(tc *infrav1.TerraformCluster) { tc.Finalizers = []string{infrav1.TerraformClusterFinalizer} }
	deleting := func(tc *infrav1.TerraformCluster) {
		now := metav1.Now()
		tc.DeletionTimestamp = &now
	}
	obj := names.Object{Kind: "tfc", Name: "prod"}
	objLabels := runner.ObjectLabels("TerraformCluster", "prod", "tc-uid")
	stateSecret := runner.NewStateSecret("ns", "tfc-prod-state", obj, names.SecretTypeState, objLabels)
	stateSecret.Annotations["captf.io/encoding"] = "gzip"
	durable := runner.NewStateSecret("ns", "tfc-prod-inputs", obj, names.SecretTypeDurableInput, objLabels)
	durable.Data = map[string][]byte{"module.json": []byte(`{"inline":"x"}`), "terraform.tfvars.json": []byte(`{}`)}

	tests := map[string]struct {
		tc          *infrav1.TerraformCluster
		cluster     *unstructured.Unstructured
		objects     []runtime.Object
		wantWrites  []string // prefixes, in order
		wantReady   string
		wantNoJob   bool
		wantJobArgs string
		// wantServiceAcc is the runner pod's ServiceAccount.
		wantServiceAcc string
	}{
		"no owner Cluster: waits, writes only its status": {
			tc:         newTC(func(tc *infrav1.TerraformCluster) { tc.OwnerReferences = nil }),
			wantWrites: []string{"update terraformclusters/status prod"},
			wantReady:  ReasonWaitingForOwner,
			wantNoJob:  true,
		},
		"new: finalizer, run inputs, runner access, one Job, status": {
			tc:      newTC(),
			cluster: newCluster(false),
			wantWrites: []string{"update terraformclusters prod", "create secrets tfc-prod-apply-", "create serviceaccounts captf-runner",
				"create rolebindings captf-runner", "create jobs tfc-prod-apply-", "update terraformclusters/status prod"},
			wantReady: workspace.ReasonApplying,
		},
		"a runner ServiceAccount without the captf.io/runner label: refused": {
			tc: newTC(func(tc *infrav1.TerraformCluster) {
				tc.Spec.Jobs = &infrav1.JobPolicy{ServiceAccountName: "admin"}
			}),
			cluster:    newCluster(false),
			objects:    []runtime.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: "ns"}}},
			wantWrites: []string{"update terraformclusters prod", "update terraformclusters/status prod"},
			wantReady:  util.ReasonRunnerServiceAccountNotAllowed,
			wantNoJob:  true,
		},
		"a labelled runner ServiceAccount runs the Job": {
			tc: newTC(func(tc *infrav1.TerraformCluster) {
				tc.Spec.Jobs = &infrav1.JobPolicy{ServiceAccountName: "cloud"}
			}),
			cluster: newCluster(false),
			objects: []runtime.Object{&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Namespace: "ns",
				Labels: map[string]string{infrav1.LabelRunnerServiceAccount: "true"}}}},
			wantWrites: []string{"update terraformclusters prod", "create secrets tfc-prod-apply-", "create serviceaccounts captf-runner",
				"create rolebindings captf-runner", "create jobs tfc-prod-apply-", "update terraformclusters/status prod"},
			wantReady:      workspace.ReasonApplying,
			wantServiceAcc: "cloud",
		},
		"paused Cluster: nothing runs": {
			tc:         newTC(withFinalizer),
			cluster:    newCluster(true),
			wantWrites: []string{"update terraformclusters/status prod"},
			wantNoJob:  true,
		},
		"deleted while paused: nothing runs, the finalizer stays": {
			tc:         newTC(withFinalizer, deleting),
			cluster:    newCluster(true),
			objects:    []runtime.Object{stateSecret, durable},
			wantWrites: []string{"update terraformclusters/status prod"},
			wantNoJob:  true,
		},
		"deleted, abandoned: state kept, no destroy": {
			tc: newTC(withFinalizer, deleting, func(tc *infrav1.TerraformCluster) {
				tc.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "true"}
			}),
			cluster:    newCluster(false),
			objects:    []runtime.Object{stateSecret, durable},
			wantWrites: []string{"update terraformclusters prod", "update secrets tfc-prod-", "update secrets tfc-prod-"},
			wantNoJob:  true,
		},
		"deleted, never applied: the finalizer goes, and the lock": {
			tc:         newTC(withFinalizer, deleting),
			cluster:    newCluster(false),
			wantWrites: []string{"update terraformclusters prod", "delete leases tfc-prod-lock"},
			wantNoJob:  true,
		},
		"deleted after an apply, its state gone: StateMissing, no destroy, the finalizer stays": {
			tc:         newTC(withFinalizer, deleting),
			cluster:    newCluster(false),
			objects:    []runtime.Object{durable},
			wantWrites: []string{"update terraformclusters/status prod"},
			wantReady:  workspace.ReasonStateMissing,
			wantNoJob:  true,
		},
		"applied, its state gone: StateMissing, no apply": {
			tc: newTC(withFinalizer, func(tc *infrav1.TerraformCluster) {
				tc.Status.AppliedInputsHash = "another"
			}),
			cluster:    newCluster(false),
			wantWrites: []string{"update terraformclusters/status prod"},
			wantReady:  workspace.ReasonStateMissing,
			wantNoJob:  true,
		},
		"deleted, with the finalizer of an earlier release: it serves, and goes": {
			tc: newTC(deleting, func(tc *infrav1.TerraformCluster) {
				tc.Finalizers = []string{infrav1.LegacyFinalizers[infrav1.TerraformClusterFinalizer]}
			}),
			cluster:    newCluster(false),
			wantWrites: []string{"update terraformclusters prod", "delete leases tfc-prod-lock"},
			wantNoJob:  true,
		},
		"deleted after an apply: destroy with the durable inputs": {
			tc:      newTC(withFinalizer, deleting),
			cluster: newCluster(false),
			objects: []runtime.Object{stateSecret, durable},
			// The update is clusterctl's block-move annotation, set before the Job.
			wantWrites:  []string{"update terraformclusters prod", "create serviceaccounts captf-runner", "create rolebindings captf-runner", "create jobs tfc-prod-destroy-", "update terraformclusters/status prod"},
			wantReady:   workspace.ReasonDestroying,
			wantJobArgs: "--durable-inputs",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.tc, tc.cluster, tc.objects...)
			f.sync()
			got := writes(append(f.captf.Actions(), f.kube.Actions()...))
			slices.SortStableFunc(got, func(a, b string) int { return order(a) - order(b) })
			if len(got) != len(tc.wantWrites) {
				t.Fatalf("writes = %q, want %q", got, tc.wantWrites)
			}
			for i, w := range tc.wantWrites {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("write %d = %q, want %q...", i, got[i], w)
				}
			}
			if tc.wantReady != "" {
				if r := readyReason(t, f); r != tc.wantReady {
					t.Errorf("Ready reason = %q, want %q", r, tc.wantReady)
				}
			}
			jobs, _ := f.kube.BatchV1().Jobs("ns").List(context.Background(), metav1.ListOptions{})
			if tc.wantNoJob && len(jobs.Items) > 0 {
				t.Errorf("created Job %s", jobs.Items[0].Name)
			}
			if tc.wantServiceAcc != "" && (len(jobs.Items) != 1 || jobs.Items[0].Spec.Template.Spec.ServiceAccountName != tc.wantServiceAcc) {
				t.Errorf("Jobs %v, want one running as %s", jobs.Items, tc.wantServiceAcc)
			}
			if tc.wantJobArgs != "" && (len(jobs.Items) != 1 || !slices.Contains(jobs.Items[0].Spec.Template.Spec.Containers[0].Args, tc.wantJobArgs)) {
				t.Errorf("Jobs %v, want one with %s", jobs.Items, tc.wantJobArgs)
			}
		})
	}
}

// order sorts writes so captf and kube actions compare in the order the
// sync makes them.
func order(w string) int {
	for i, p := range []string{"update terraformclusters ", "update secrets", "create secrets", "create serviceaccounts", "create rolebindings", "create jobs", "update terraformclusters/status"} {
		if strings.HasPrefix(w, p) {
			return i
		}
	}
	return 99
}

// TestNoSecondJobOnALaggingCache: until the informer shows the Job it
// created, the controller creates nothing, however often it syncs.
func TestNoSecondJobOnALaggingCache(t *testing.T) {
	f := newFixture(t, newTC(), newCluster(false))
	for range 3 {
		f.sync()
	}
	var creates int
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "jobs" {
			creates++
		}
	}
	if creates != 1 {
		t.Fatalf("%d Job creates over 3 syncs, want 1", creates)
	}
	// Once the informer shows it, the controller waits for it: still one.
	jobs, _ := f.kube.BatchV1().Jobs("ns").List(context.Background(), metav1.ListOptions{})
	job := jobs.Items[0].DeepCopy()
	workspace.JobEventHandler(ktesting.NewLogger(t, ktesting.NewConfig()), gvk.Kind, f.c.queue, f.c.expectations).OnAdd(job, false)
	if err := f.c.engine.JobIndex.Add(job); err != nil {
		t.Fatal(err)
	}
	f.sync()
	creates = 0
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "jobs" {
			creates++
		}
	}
	if creates != 1 {
		t.Fatalf("%d Job creates, want 1", creates)
	}
}

// TestUpdateHandler: resyncs and spec or metadata changes sync; the
// controller's own status writes do not.
func TestUpdateHandler(t *testing.T) {
	base := newTC()
	base.ResourceVersion = "1"
	statusOnly := base.DeepCopy()
	statusOnly.ResourceVersion = "2"
	statusOnly.Status.Ready = true
	specChange := base.DeepCopy()
	specChange.ResourceVersion, specChange.Generation = "2", 2
	annotated := base.DeepCopy()
	annotated.ResourceVersion, annotated.Annotations = "2", map[string]string{"a": "b"}
	tests := map[string]struct {
		cur  *infrav1.TerraformCluster
		want int
	}{
		"resync":             {cur: base, want: 1},
		"own status write":   {cur: statusOnly, want: 0},
		"spec change":        {cur: specChange, want: 1},
		"annotation changed": {cur: annotated, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newTC(), newCluster(false))
			f.c.updateTerraformCluster(base, tc.cur)
			if got := f.c.queue.Len(); got != tc.want {
				t.Errorf("queued %d, want %d", got, tc.want)
			}
		})
	}
}
