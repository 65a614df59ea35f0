package workspace_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// ownProtection is what a TerraformCluster of the fixtures records on its
// state head: its UID and default approval policy.
const ownProtection = `{"uid":"obj-uid","policy":"Destructive"}`

// TestStateChecks: the checks before every Job decide the same on a state
// head read from the API server and on what the state Secrets' cache keeps
// of it (StateSecretMeta).
func TestStateChecks(t *testing.T) {
	forKinds(t, func(t *testing.T, k kindCase) {
		obj := names.Object{Kind: k.short, Name: "prod"}
		head := func(mutate func(s *corev1.Secret)) *corev1.Secret {
			s := statestore.NewStateSecret("ns", obj.State(), obj, names.SecretTypeState, names.ObjectLabels(k.kind, "prod", "obj-uid"))
			s.Annotations["captf.io/encoding"] = "gzip"
			if k.kind == "TerraformCluster" {
				s.Annotations[names.AnnotationProtection] = ownProtection
			}
			if mutate != nil {
				mutate(s)
			}
			return s
		}
		applied := func(o workspace.Object) { o.WorkspaceStatus().AppliedInputsHash = "applied" }
		for name, tc := range map[string]struct {
			head       *corev1.Secret
			wantReady  string
			wantWrites []string
			wantJob    bool
		}{
			"the object's state: the drift check or apply runs": {head: head(nil), wantJob: true},
			"another object's state: stopped": {head: head(func(s *corev1.Secret) { s.Annotations[names.AnnotationObjectName] = "other" }),
				wantReady: workspace.ReasonStateOwnedByOther},
			"another kind's state: stopped": {head: head(func(s *corev1.Secret) { s.Labels[names.LabelKind] = "tfx" }),
				wantReady: workspace.ReasonStateOwnedByOther},
			"an abandoned state: stopped": {head: head(func(s *corev1.Secret) { s.Labels[names.LabelAbandoned] = "true" }),
				wantReady: workspace.ReasonStateAbandoned},
			"a head without its state: StateMissing": {head: head(func(s *corev1.Secret) { delete(s.Annotations, "captf.io/encoding") }),
				wantReady: workspace.ReasonStateMissing},
			"a state without its finalizer is protected again": {head: head(func(s *corev1.Secret) { s.Finalizers = nil }),
				wantWrites: []string{"patch secrets {k}-prod-state"}, wantJob: true},
		} {
			for _, cached := range []bool{false, true} {
				t.Run(name+map[bool]string{false: ", from the API", true: ", from the cache"}[cached], func(t *testing.T) {
					f := newFixture(t, k, newObject(k, withFinalizer(k), applied), k.capi, append(slices.Clone(k.kube), runtime.Object(tc.head))...)
					if cached {
						states := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
						if err := states.Add(workspace.CacheStateSecret(tc.head.DeepCopy())); err != nil {
							t.Fatal(err)
						}
						f.c.EngineForTest().StateSecrets = states
					}
					f.sync()
					if tc.wantReady != "" {
						if r := f.readyReason(); r != tc.wantReady {
							t.Errorf("Ready reason = %q, want %q", r, tc.wantReady)
						}
					}
					jobs := f.createdJobs()
					if got := len(jobs) > 0; got != tc.wantJob {
						t.Errorf("Jobs %v, want a Job: %v", jobNames(jobs), tc.wantJob)
					}
					var stateWrites []string
					for _, w := range f.writes() {
						if strings.HasSuffix(w, " secrets "+obj.State()) {
							stateWrites = append(stateWrites, w)
						}
					}
					f.wantPrefixes("state writes", stateWrites, tc.wantWrites)
				})
			}
		}
	})
}
