package terraformmodule

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// Ready reasons of a catalog entry.
const (
	ReasonResolved      = "Resolved"
	ReasonResolving     = "Resolving"
	ReasonResolveFailed = "ResolveFailed"
	// ReasonInUse: the entry is being deleted, and objects still name it.
	ReasonInUse = "InUse"
)

// inUseRetry is when an entry being deleted looks for its users again
// (their own deletes also wake it).
const inUseRetry = 30 * time.Second

// deleteGrace is how long an entry being deleted is kept at least: an
// object the webhook admitted just before the delete (it read the entry
// then) may reach the API server up to the webhook's timeout later.
const deleteGrace = 30 * time.Second

// sourceRetry is when a source that could not be read is read again.
const sourceRetry = time.Minute

// keptFailedJobs is how many of a version's failed resolve Jobs are kept
// (with their results) for people to read; older ones are deleted.
const keptFailedJobs = 3

// kubeSecrets are the controller's reads and writes of Secrets and
// ConfigMaps in the manager's namespace.
type kubeSecrets interface {
	CreateSecret(ctx context.Context, sec *corev1.Secret) error
	DeleteSecret(ctx context.Context, namespace, name string) error
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

type apiSecrets struct{ kube kubernetes.Interface }

func (a apiSecrets) CreateSecret(ctx context.Context, sec *corev1.Secret) error {
	_, err := a.kube.CoreV1().Secrets(sec.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: ControllerName})
	return err
}

func (a apiSecrets) DeleteSecret(ctx context.Context, namespace, name string) error {
	err := a.kube.CoreV1().Secrets(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (a apiSecrets) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return a.kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// sync resolves the versions of one entry not resolved yet, and records
// what their Jobs found.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	cached, err := c.modules.Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !c.resolves(cached) {
		return nil
	}
	m := cached.DeepCopy()
	logger := klog.FromContext(ctx).WithValues("module", klog.KObj(m))
	if m.DeletionTimestamp != nil {
		return c.syncDelete(ctx, key, m, cached)
	}
	if !slices.Contains(m.Finalizers, infrav1.TerraformModuleFinalizer) {
		m.Finalizers = append(m.Finalizers, infrav1.TerraformModuleFinalizer)
		_, err := c.captf.InfrastructureV1alpha1().TerraformModules().Update(ctx, m, metav1.UpdateOptions{FieldManager: ControllerName})
		return err // the next sync, on the entry written, resolves
	}
	jobs := c.jobsOf(m)
	known := map[string]infrav1.CatalogVersionStatus{}
	for _, st := range m.Status.Versions {
		known[st.Name] = st
	}
	var versions []infrav1.CatalogVersionStatus
	wanted := map[string]bool{} // inputs hashes of versions being resolved
	var requeue time.Duration
	for _, v := range m.Spec.Versions {
		ref := cmp.Or(v.Ref, v.Name)
		st, ok := known[v.Name]
		if ok && st.Digest != "" && st.Ref == ref && (v.Digest == "" || v.Digest == st.Digest) {
			versions = append(versions, st) // resolved once, for good
			continue
		}
		if !ok || st.Ref != ref || st.Digest != "" {
			st = infrav1.CatalogVersionStatus{Name: v.Name, Ref: ref}
		}
		hash := inputsHash(m.Spec.Source, v.Name, ref)
		wanted[hash] = true
		after, err := c.resolveVersion(ctx, m, &st, v.Digest, hash, jobsWithHash(jobs, hash))
		if err != nil {
			return err
		}
		if after > 0 && (requeue == 0 || after < requeue) {
			requeue = after
		}
		versions = append(versions, st)
	}
	users := c.usersOf(m.Name)
	for i := range versions {
		versions[i].UsedBy = users[versions[i].Name]
	}
	m.Status.Versions = versions
	setReady(m)
	m.Status.ObservedGeneration = m.Generation
	if !equality.Semantic.DeepEqual(m.Status, cached.Status) {
		if _, err := c.captf.InfrastructureV1alpha1().TerraformModules().UpdateStatus(ctx, m, metav1.UpdateOptions{FieldManager: ControllerName}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		logger.V(2).Info("Recorded the catalog entry's versions", "ready", meta.FindStatusCondition(m.Status.Conditions, "Ready").Reason)
		return nil // the next sync, on the status written, cleans up
	}
	// Jobs of versions resolved (or gone) are done with once recorded;
	// of a version that keeps failing, the last few are kept to read.
	kept := map[string]int{}
	for _, job := range jobs { // newest first
		if wanted[job.InputsHash] {
			if kept[job.InputsHash]++; kept[job.InputsHash] <= keptFailedJobs {
				continue
			}
		}
		if err := c.Jobs.Delete(ctx, job, metav1.DeletePropagationBackground); err != nil {
			return err
		}
		obj := names.ObjectOf(GVK.Kind, m.Name)
		for _, sec := range []string{obj.Result(job.Name), obj.RunInputs(job.Name)} {
			if err := c.kube.DeleteSecret(ctx, c.Namespace, sec); err != nil {
				return err
			}
		}
	}
	if requeue > 0 {
		c.loop.Queue.AddAfter(key, requeue)
	}
	return nil
}

// syncDelete lets an entry go once nothing names it: an object's destroy
// fetches its module. Until then the entry serves the runs of the objects
// that name it, says who holds it, and new objects may not name it (nor
// the machines a template that names it would clone).
func (c *Controller) syncDelete(ctx context.Context, key cache.ObjectName, m, cached *infrav1.TerraformModule) error {
	if !slices.Contains(m.Finalizers, infrav1.TerraformModuleFinalizer) {
		return nil
	}
	users := c.cachedUsers(m.Name)
	if len(users) == 0 {
		// An object admitted just before the delete may not be cached
		// yet: the entry is not let go before the grace is over.
		if wait := m.DeletionTimestamp.Add(deleteGrace).Sub(c.clock.Now()); wait > 0 {
			c.loop.Queue.AddAfter(key, wait)
			return nil
		}
		var err error
		if users, err = c.liveUsers(ctx, m.Name); err != nil {
			return err
		}
	}
	if len(users) == 0 { // nothing names it: let go
		m.Finalizers = slices.DeleteFunc(m.Finalizers, func(f string) bool { return f == infrav1.TerraformModuleFinalizer })
		_, err := c.captf.InfrastructureV1alpha1().TerraformModules().Update(ctx, m, metav1.UpdateOptions{FieldManager: ControllerName})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	shown := users[:min(len(users), 5)]
	msg := fmt.Sprintf("deleting: waits for the %d objects and templates that name it: %s", len(users), strings.Join(shown, ", "))
	if len(users) > len(shown) {
		msg += ", ..."
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: ReasonInUse,
		ObservedGeneration: m.Generation, Message: msg})
	if !equality.Semantic.DeepEqual(m.Status, cached.Status) {
		if _, err := c.captf.InfrastructureV1alpha1().TerraformModules().UpdateStatus(ctx, m, metav1.UpdateOptions{FieldManager: ControllerName}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	c.loop.Queue.AddAfter(key, inUseRetry)
	return nil
}

// liveUsersPage is how many objects a page of liveUsers' lists holds: an
// object may carry a large inline module, and a fleet is many objects.
const liveUsersPage = 100

// liveUsers are the objects and templates of every namespace that name
// entry, read from the API server, not the caches: a manager caches its
// shard's (or its namespace's) objects only, and an entry let go too early
// strands the others'. It is read a page at a time, and only when the
// caches know of no user (cachedUsers).
func (c *Controller) liveUsers(ctx context.Context, entry string) ([]string, error) {
	api := c.captf.InfrastructureV1alpha1()
	var users []string
	add := func(kind, ns, name string, ref *infrav1.CatalogRef) {
		if ref != nil && ref.Name == entry {
			users = append(users, kind+" "+ns+"/"+name)
		}
	}
	// Each lister lists one page and says what comes next.
	listers := []func(metav1.ListOptions) (string, error){
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformClusters("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformCluster", x.Namespace, x.Name, x.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformMachines("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformMachine", x.Namespace, x.Name, x.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformMachinePools("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformMachinePool", x.Namespace, x.Name, x.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformClusterTemplates("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformClusterTemplate", x.Namespace, x.Name, x.Spec.Template.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformMachineTemplates("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformMachineTemplate", x.Namespace, x.Name, x.Spec.Template.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
		func(o metav1.ListOptions) (string, error) {
			l, err := api.TerraformMachinePoolTemplates("").List(ctx, o)
			if err != nil {
				return "", err
			}
			for _, x := range l.Items {
				add("TerraformMachinePoolTemplate", x.Namespace, x.Name, x.Spec.Template.Spec.Module.CatalogRef)
			}
			return l.Continue, nil
		},
	}
	for _, list := range listers {
		next := ""
		for {
			var err error
			if next, err = list(metav1.ListOptions{Limit: liveUsersPage, Continue: next}); err != nil {
				return nil, err
			}
			if next == "" {
				break
			}
		}
	}
	return users, nil
}

// cachedUsers are the objects of this manager's caches that name entry:
// while there are some, the API server need not be asked.
func (c *Controller) cachedUsers(entry string) []string {
	var users []string
	c.eachCachedUser(entry, func(obj any, _ *infrav1.CatalogRef) {
		if o, ok := obj.(metav1.Object); ok {
			kind := strings.TrimPrefix(fmt.Sprintf("%T", obj), "*v1alpha1.") // the cached kinds are infrav1's
			users = append(users, kind+" "+o.GetNamespace()+"/"+o.GetName())
		}
	})
	return users
}

// resolveVersion moves one version on: starts its Job, or records the
// result of the Job that ended, or retries after a failure's backoff. It
// returns when to look again.
func (c *Controller) resolveVersion(ctx context.Context, m *infrav1.TerraformModule, st *infrav1.CatalogVersionStatus, pin, hash string, jobs []*runnerjob.Cached) (time.Duration, error) {
	if len(jobs) == 0 {
		return c.startJob(ctx, m, st, hash, 0)
	}
	latest := jobs[0]
	finished, succeeded := runnerjob.Finished(latest)
	if !finished {
		return 0, nil
	}
	obj := names.ObjectOf(GVK.Kind, m.Name)
	res, err := c.Results.Read(ctx, c.Namespace, obj.Result(latest.Name), latest.UID)
	switch {
	case err == nil && succeeded && res.Outcome == run.OutcomeSucceeded && res.Resolved != nil && res.Module != nil && pin != "" && res.Module.Digest != pin:
		// No retry: the source holds other code than the pin, and will
		// until someone changes one of them.
		st.Error = fmt.Sprintf("the ref names code of digest %s, not the %s that spec.versions[].digest pins: the source no longer holds the pinned code", res.Module.Digest, pin)
		return 0, nil
	case err == nil && succeeded && res.Outcome == run.OutcomeSucceeded && res.Resolved != nil && res.Module != nil:
		now := metav1.NewTime(c.clock.Now())
		*st = infrav1.CatalogVersionStatus{Name: st.Name, Ref: st.Ref, Source: res.Resolved.Source, Commit: res.Resolved.Commit,
			Digest: res.Module.Digest, ResolvedTime: &now, Variables: res.Resolved.Variables, Outputs: res.Resolved.Outputs}
		return 0, nil
	case err == nil && res.Error != "":
		st.Error = res.Error
	case errors.Is(err, runnerjob.ErrUnreadableResult):
		st.Error = fmt.Sprintf("Job %s wrote no result CAPTF can read", latest.Name)
	case err != nil && !apierrors.IsNotFound(err):
		return 0, err
	default:
		st.Error = runnerjob.FailureMessage(latest)
	}
	// By attempt, not by the Jobs kept: the backoff grows however many
	// of them were deleted.
	retry := latest.Status.EndTime.Add(runnerjob.Backoff(latest.Attempt + 1))
	if wait := retry.Sub(c.clock.Now()); wait > 0 {
		return wait, nil
	}
	return c.startJob(ctx, m, st, hash, latest.Attempt+1)
}

// startJob creates the inputs and the Job of one attempt to resolve st. A
// source it cannot read (a ConfigMap not there yet) is the entry's to fix:
// its status says so, and it is read again after sourceRetry.
func (c *Controller) startJob(ctx context.Context, m *infrav1.TerraformModule, st *infrav1.CatalogVersionStatus, hash string, attempt int) (time.Duration, error) {
	module, err := c.moduleOf(ctx, m, st.Ref)
	if err != nil {
		st.Error = err.Error()
		return sourceRetry, nil
	}
	data, err := json.Marshal(module)
	if err != nil {
		return 0, err
	}
	if err := c.EnsureAccount(ctx, c.Namespace); err != nil {
		return 0, err
	}
	ca, err := c.RunnerAPI.CA()
	if err != nil {
		return 0, err
	}
	job := runnerjob.Build(runnerjob.Spec{Namespace: c.Namespace, Owner: m, OwnerGVK: GVK, Operation: infrav1.OperationResolve,
		InputsHash: hash, Attempt: attempt, Image: c.RunnerImage, ProviderMirrorImage: c.ProviderMirrorImage,
		Policy: runnerjob.EffectivePolicy(nil, nil), RunnerAPI: c.RunnerAPI.URL, RunnerAPICA: ca, RunnerPods: c.RunnerPods,
		WriteKey: run.NewWriteKey()})
	labels := maps.Clone(job.Labels)
	labels[names.LabelSecretType] = names.SecretTypeRunInputs
	inputs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.ObjectOf(GVK.Kind, m.Name).RunInputs(job.Name), Namespace: c.Namespace, Labels: labels},
		Data: map[string][]byte{run.KeyModule: data}}
	if err := c.kube.CreateSecret(ctx, inputs); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	if err := c.Jobs.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	klog.FromContext(ctx).Info("Resolving a catalog version", "module", klog.KObj(m), "version", st.Name, "ref", st.Ref, "job", klog.KObj(job))
	return 0, nil
}

// moduleOf is what the resolve Job of ref fetches, with the entry's
// credentials, which the runner reads through the runner API.
func (c *Controller) moduleOf(ctx context.Context, m *infrav1.TerraformModule, ref string) (*run.Module, error) {
	mod, err := c.sourceOf(ctx, m, ref)
	if err == nil && m.Spec.CredentialsSecretName != "" {
		mod.Credentials = &run.SecretRef{Namespace: c.Namespace, Name: m.Spec.CredentialsSecretName}
	}
	return mod, err
}

func (c *Controller) sourceOf(ctx context.Context, m *infrav1.TerraformModule, ref string) (*run.Module, error) {
	src := m.Spec.Source
	switch {
	case src.Git != nil:
		return &run.Module{Git: &run.GitModule{URL: src.Git.URL, Path: src.Git.Path, Ref: ref}}, nil
	case src.ConfigMap != nil:
		cm, err := c.kube.ConfigMap(ctx, c.Namespace, ref)
		if err != nil {
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", c.Namespace, ref, err)
		}
		return &run.Module{Files: maps.Clone(cm.Data)}, nil
	case src.Registry != nil:
		return &run.Module{Registry: &run.RegistryModule{Address: src.Registry.Address, Version: ref}}, nil
	case src.OCI != nil:
		return &run.Module{OCI: &run.OCIModule{Repository: src.OCI.Repository, Ref: ref}}, nil
	}
	return nil, fmt.Errorf("the entry names no source")
}

// jobsOf are the resolve Jobs of m, newest first: in the manager's
// namespace and controlled by m.
func (c *Controller) jobsOf(m *infrav1.TerraformModule) []*runnerjob.Cached {
	var jobs []*runnerjob.Cached
	for _, j := range runnerjob.OfUID(c.jobs, m.UID) {
		if j.Namespace == c.Namespace && j.Controller.UID == m.UID && j.Controller.Kind == GVK.Kind {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

func jobsWithHash(jobs []*runnerjob.Cached, hash string) []*runnerjob.Cached {
	var out []*runnerjob.Cached
	for _, j := range jobs {
		if j.InputsHash == hash {
			out = append(out, j)
		}
	}
	return out
}

// inputsHash names what one version's resolve fetches.
func inputsHash(src infrav1.CatalogSource, version, ref string) string {
	b, _ := json.Marshal(struct {
		Source       infrav1.CatalogSource
		Version, Ref string
	}{src, version, ref})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:16]
}

// setReady says whether every version is resolved.
func setReady(m *infrav1.TerraformModule) {
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: ReasonResolved, ObservedGeneration: m.Generation,
		Message: fmt.Sprintf("%d versions resolved", len(m.Status.Versions))}
	for _, st := range m.Status.Versions {
		switch {
		case st.Error != "":
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonResolveFailed
			cond.Message = fmt.Sprintf("version %s (%s): %s", st.Name, st.Ref, st.Error)
		case st.Digest == "" && cond.Reason != ReasonResolveFailed:
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonResolving
			cond.Message = fmt.Sprintf("version %s (%s) is being resolved", st.Name, st.Ref)
		}
	}
	meta.SetStatusCondition(&m.Status.Conditions, cond)
}

func ptr[T any](v T) *T { return &v }
