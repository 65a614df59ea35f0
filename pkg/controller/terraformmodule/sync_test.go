package terraformmodule

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/generated/clientset/versioned/fake"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// fakes records every side effect in order: "verb what name".
type fakes struct {
	log        []string
	configMaps map[string]*corev1.ConfigMap
}

func (f *fakes) CreateSecret(_ context.Context, sec *corev1.Secret) error {
	f.log = append(f.log, "create secret "+sec.Name)
	return nil
}

func (f *fakes) DeleteSecret(_ context.Context, _, name string) error {
	f.log = append(f.log, "delete secret "+name)
	return nil
}

func (f *fakes) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := f.configMaps[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(corev1.Resource("configmaps"), name)
}

func (f *fakes) Create(_ context.Context, job *batchv1.Job) error {
	f.log = append(f.log, "create job "+job.Name)
	return nil
}

func (f *fakes) Delete(_ context.Context, job *runnerjob.Cached, _ metav1.DeletionPropagation) error {
	f.log = append(f.log, "delete job "+job.Name)
	return nil
}

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func entry(status ...infrav1.CatalogVersionStatus) *infrav1.TerraformModule {
	return &infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "vpc", UID: "uid-vpc", Generation: 1, Finalizers: []string{infrav1.TerraformModuleFinalizer}},
		Spec: infrav1.TerraformModuleSpec{Source: infrav1.CatalogSource{Git: &infrav1.GitSource{URL: "https://git.example.com/vpc.git"}},
			Versions: []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}}, NamespaceSelector: &metav1.LabelSelector{}},
		Status: infrav1.TerraformModuleStatus{Versions: status}}
}

// resolveJob is the resolve Job of v1 at attempt, ended as ended ("" runs).
func resolveJob(m *infrav1.TerraformModule, attempt int, ended string) *runnerjob.Cached {
	hash := inputsHash(m.Spec.Source, "v1", "main")
	job := runnerjob.Build(runnerjob.Spec{Namespace: "captf-system", Owner: m, OwnerGVK: GVK, Operation: infrav1.OperationResolve,
		InputsHash: hash, Attempt: attempt, Policy: runnerjob.EffectivePolicy(nil, nil), WriteKey: "k"})
	job.UID = types.UID(fmt.Sprint("uid-job-", attempt))
	job.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour + time.Duration(attempt)*time.Minute))
	c := runnerjob.CachedFrom(job)
	if ended != "" {
		c.Status.Finished, c.Status.Complete = true, ended == "Complete"
		c.Status.EndReason, c.Status.EndTime = ended, metav1.NewTime(now.Add(-5*time.Second))
	}
	return c
}

func TestSync(t *testing.T) {
	resolved := infrav1.CatalogVersionStatus{Name: "v1", Ref: "main", Digest: "sha256:aa", Commit: strings.Repeat("a", 40)}
	okResult := &run.Result{Operation: infrav1.OperationResolve, Outcome: run.OutcomeSucceeded, Module: &run.ModuleCode{Digest: "sha256:bb"},
		Resolved: &run.Resolved{Source: "git::https://git.example.com/vpc.git?ref=" + strings.Repeat("b", 40), Commit: strings.Repeat("b", 40),
			Variables: []infrav1.ModuleVariable{{Name: "region", Type: "string", Required: true}}}}
	failed := &run.Result{Operation: infrav1.OperationResolve, Outcome: run.OutcomeFailed, Error: "git ls-remote: authentication failed"}
	tests := map[string]struct {
		status  []infrav1.CatalogVersionStatus
		jobs    func(m *infrav1.TerraformModule) []*runnerjob.Cached
		results map[int]*run.Result // by attempt
		users   int
		pin     string // spec.versions[0].digest
		// watchFilter is the manager's; shard labels the entry for one.
		watchFilter, shard string
		// noFinalizer: a new entry; deleting: one being deleted (a
		// minute ago, or deletedAgo); templates: templates naming it, in
		// another namespace.
		noFinalizer, deleting bool
		deletedAgo            time.Duration
		templates             int
		wantFinalizer         *bool // nil: not checked
		// wantLog: the side effects in order; wantVersion: v1's status.
		wantLog     []string
		wantReady   string
		wantVersion func(t *testing.T, st infrav1.CatalogVersionStatus)
	}{
		"a new version: inputs, then its Job": {
			wantLog: []string{"create secret %job0", "create job %job0"}, wantReady: ReasonResolving,
		},
		"a new entry: its finalizer first": {
			noFinalizer: true, wantFinalizer: ptr(true),
		},
		"deleting, named by an object: kept, says by whom": {
			deleting: true, users: 2, wantReady: ReasonInUse, wantFinalizer: ptr(true),
		},
		"deleting, named by none: let go": {
			deleting: true, wantFinalizer: ptr(false),
		},
		"deleting, named by a template only: kept": {
			deleting: true, templates: 1, wantReady: ReasonInUse, wantFinalizer: ptr(true),
		},
		"deleted a moment ago, named by none: kept for an object admitted just before": {
			deleting: true, deletedAgo: 5 * time.Second, wantFinalizer: ptr(true),
		},
		"deleted a moment ago, named by an object: says so at once": {
			deleting: true, deletedAgo: time.Second, users: 1, wantReady: ReasonInUse, wantFinalizer: ptr(true),
		},
		"a sharded manager: another shard's entry is not its to resolve": {
			watchFilter: "canary", shard: "stable",
		},
		"a sharded manager: its own entry": {
			watchFilter: "canary", shard: "canary",
			wantLog: []string{"create secret %job0", "create job %job0"}, wantReady: ReasonResolving,
		},
		"a Job that runs: nothing to do": {
			jobs:      func(m *infrav1.TerraformModule) []*runnerjob.Cached { return []*runnerjob.Cached{resolveJob(m, 0, "")} },
			wantReady: ReasonResolving,
		},
		"a Job that succeeded: recorded, cleaned up at the next sync": {
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				return []*runnerjob.Cached{resolveJob(m, 0, "Complete")}
			},
			results: map[int]*run.Result{0: okResult}, users: 2, wantReady: ReasonResolved,
			wantVersion: func(t *testing.T, st infrav1.CatalogVersionStatus) {
				if st.Digest != "sha256:bb" || st.Commit != strings.Repeat("b", 40) || len(st.Variables) != 1 || st.ResolvedTime == nil || st.UsedBy != 2 {
					t.Errorf("v1 = %+v", st)
				}
			},
		},
		"resolved once: never again, its Jobs go": {
			status: []infrav1.CatalogVersionStatus{resolved},
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				return []*runnerjob.Cached{resolveJob(m, 0, "Complete")}
			},
			// The status is current but for the Ready condition; the
			// next sync deletes.
			wantReady: ReasonResolved,
			wantVersion: func(t *testing.T, st infrav1.CatalogVersionStatus) {
				if st.Digest != resolved.Digest || st.Commit != resolved.Commit {
					t.Errorf("a resolved version changed: %+v", st)
				}
			},
		},
		"a pin the source no longer holds: the error, no retry": {
			pin: "sha256:" + strings.Repeat("c", 64),
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				return []*runnerjob.Cached{resolveJob(m, 0, "Complete")}
			},
			results: map[int]*run.Result{0: okResult}, wantReady: ReasonResolveFailed,
			wantVersion: func(t *testing.T, st infrav1.CatalogVersionStatus) {
				if st.Digest != "" || !strings.Contains(st.Error, "not the sha256:ccc") {
					t.Errorf("v1 = %+v", st)
				}
			},
		},
		"the pin the source holds": {
			pin: "sha256:bb",
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				return []*runnerjob.Cached{resolveJob(m, 0, "Complete")}
			},
			results: map[int]*run.Result{0: okResult}, wantReady: ReasonResolved,
		},
		"a failure: the error, and a retry after its backoff": {
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				return []*runnerjob.Cached{resolveJob(m, 0, "Failed")}
			},
			results:   map[int]*run.Result{0: failed},
			wantReady: ReasonResolveFailed,
			wantVersion: func(t *testing.T, st infrav1.CatalogVersionStatus) {
				if st.Error != failed.Error || st.Digest != "" {
					t.Errorf("v1 = %+v", st)
				}
			},
		},
		"a failure whose backoff is over: the next attempt": {
			jobs: func(m *infrav1.TerraformModule) []*runnerjob.Cached {
				j := resolveJob(m, 0, "Failed")
				j.Status.EndTime = metav1.NewTime(now.Add(-time.Minute))
				return []*runnerjob.Cached{j}
			},
			results: map[int]*run.Result{0: failed},
			wantLog: []string{"create secret %job1", "create job %job1"}, wantReady: ReasonResolveFailed,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			m := entry(tc.status...)
			m.Spec.Versions[0].Digest = tc.pin
			if tc.noFinalizer {
				m.Finalizers = nil
			}
			if tc.deleting {
				m.DeletionTimestamp = &metav1.Time{Time: now.Add(-cmp.Or(tc.deletedAgo, time.Minute))}
			}
			if tc.shard != "" {
				m.Labels = map[string]string{capi.WatchFilterLabel: tc.shard}
			}
			if tc.status != nil {
				setReady(m)
			}
			captf := fake.NewSimpleClientset(m)
			informers := externalversions.NewSharedInformerFactory(captf, 0)
			modules := informers.Infrastructure().V1alpha1().TerraformModules()
			if err := modules.Informer().GetIndexer().Add(m); err != nil {
				t.Fatal(err)
			}
			tcs := informers.Infrastructure().V1alpha1().TerraformClusters().Informer()
			for i := range tc.users {
				user := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("c", i), Namespace: "team"}}
				user.Spec.Module.CatalogRef = &infrav1.CatalogRef{Name: "vpc", Version: "v1"}
				if err := tcs.GetStore().Add(user); err != nil {
					t.Fatal(err)
				}
				if _, err := captf.InfrastructureV1alpha1().TerraformClusters("team").Create(ctx, user, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range tc.templates {
				tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("t", i), Namespace: "elsewhere"}}
				tmpl.Spec.Template.Spec.Module.CatalogRef = &infrav1.CatalogRef{Name: "vpc", Version: "v1"}
				if _, err := captf.InfrastructureV1alpha1().TerraformMachineTemplates("elsewhere").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			kube := k8sfake.NewClientset()
			jobs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, runnerjob.Indexers)
			if tc.jobs != nil {
				for _, j := range tc.jobs(m) {
					if err := jobs.Add(j); err != nil {
						t.Fatal(err)
					}
					if res := tc.results[j.Attempt]; res != nil {
						data, err := run.ResultData(res)
						if err != nil {
							t.Fatal(err)
						}
						sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.ObjectOf(GVK.Kind, "vpc").Result(j.Name), Namespace: "captf-system"}, Data: data}
						if _, err := kube.CoreV1().Secrets("captf-system").Create(ctx, sec, metav1.CreateOptions{}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			f := &fakes{}
			c := &Controller{Config: Config{Namespace: "captf-system", Jobs: f, Results: &runnerjob.Results{Kube: kube},
				EnsureAccount: func(context.Context, string) error { return nil }, WatchFilter: tc.watchFilter},
				captf: captf, kube: f, modules: modules.Lister(), jobs: jobs, users: []cache.SharedIndexInformer{tcs},
				clock: clocktesting.NewFakeClock(now), loop: controller.NewLoop(ctx, ControllerName, controller.Context{Kube: kube})}
			if err := c.sync(ctx, cache.ObjectName{Name: "vpc"}); err != nil {
				t.Fatal(err)
			}
			hash := inputsHash(m.Spec.Source, "v1", "main")
			var want []string
			for _, w := range tc.wantLog {
				for i := range 3 {
					w = strings.ReplaceAll(w, fmt.Sprint("%job", i), names.ObjectOf(GVK.Kind, "vpc").Job("uid-vpc", "resolve", hash, i))
				}
				want = append(want, w)
			}
			if strings.Join(f.log, "\n") != strings.Join(want, "\n") {
				t.Errorf("side effects:\n%s\nwant:\n%s", strings.Join(f.log, "\n"), strings.Join(want, "\n"))
			}
			got, err := captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, "vpc", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ready := ""
			for _, cond := range got.Status.Conditions {
				if cond.Type == "Ready" {
					ready = cond.Reason
				}
			}
			if ready != tc.wantReady {
				t.Errorf("Ready %q, want %q", ready, tc.wantReady)
			}
			if want := tc.wantFinalizer; want != nil && slices.Contains(got.Finalizers, infrav1.TerraformModuleFinalizer) != *want {
				t.Errorf("finalizers %v, want ours: %v", got.Finalizers, *want)
			}
			if tc.wantVersion != nil {
				if len(got.Status.Versions) != 1 {
					t.Fatalf("versions %+v", got.Status.Versions)
				}
				tc.wantVersion(t, got.Status.Versions[0])
			}
		})
	}
}

// TestResolvedJobsGo: once the status records a version, the next sync
// deletes its Jobs and their results, and writes nothing.
func TestResolvedJobsGo(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	m := entry(infrav1.CatalogVersionStatus{Name: "v1", Ref: "main", Digest: "sha256:aa"})
	setReady(m)
	m.Status.ObservedGeneration = m.Generation
	captf := fake.NewSimpleClientset(m)
	informers := externalversions.NewSharedInformerFactory(captf, 0)
	modules := informers.Infrastructure().V1alpha1().TerraformModules()
	if err := modules.Informer().GetIndexer().Add(m); err != nil {
		t.Fatal(err)
	}
	jobs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, runnerjob.Indexers)
	job := resolveJob(m, 0, "Complete")
	if err := jobs.Add(job); err != nil {
		t.Fatal(err)
	}
	f := &fakes{}
	kube := k8sfake.NewClientset()
	c := &Controller{Config: Config{Namespace: "captf-system", Jobs: f, Results: &runnerjob.Results{Kube: kube}},
		captf: captf, kube: f, modules: modules.Lister(), jobs: jobs, clock: clocktesting.NewFakeClock(now),
		loop: controller.NewLoop(ctx, ControllerName, controller.Context{Kube: kube})}
	captf.ClearActions()
	if err := c.sync(ctx, cache.ObjectName{Name: "vpc"}); err != nil {
		t.Fatal(err)
	}
	want := "delete job " + job.Name + "\ndelete secret " + job.Name + "-result\ndelete secret " + job.Name
	if got := strings.Join(f.log, "\n"); got != want {
		t.Errorf("side effects:\n%s\nwant:\n%s", got, want)
	}
	if n := len(captf.Actions()); n != 0 {
		t.Errorf("%d writes of the entry, want none: %v", n, captf.Actions())
	}
}

// TestLiveUsersPaged: an entry's users are read a page at a time (objects
// may carry large inline modules), every page of every kind.
func TestLiveUsersPaged(t *testing.T) {
	captf := fake.NewSimpleClientset()
	var limits []int64
	captf.PrependReactor("list", "terraformclusters", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		limits = append(limits, opts.Limit)
		page := &infrav1.TerraformClusterList{}
		c := infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c" + opts.Continue, Namespace: "team"}}
		c.Spec.Module.CatalogRef = &infrav1.CatalogRef{Name: "vpc", Version: "v1"}
		page.Items = append(page.Items, c)
		if opts.Continue == "" {
			page.Continue = "2"
		}
		return true, page, nil
	})
	c := &Controller{captf: captf}
	users, err := c.liveUsers(context.Background(), "vpc")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"TerraformCluster team/c", "TerraformCluster team/c2"}; !slices.Equal(users, want) {
		t.Errorf("users %v, want %v (both pages)", users, want)
	}
	if len(limits) != 2 || limits[0] != liveUsersPage || limits[1] != liveUsersPage {
		t.Errorf("lists with limits %v, want two pages of %d", limits, liveUsersPage)
	}
}
