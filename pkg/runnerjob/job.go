// Package runnerjob is the runner Job: how it is built (Build, Spec,
// Policy, the ServiceAccount it runs as), what the caches keep of it
// (Cached, Trim, Indexers), the one seam that creates and deletes it
// (Control), the slots that pace Jobs (Slots), which of an object's Jobs
// counts (Active, Latest, Unfinished) and what a Job's runner reported
// (Results). It holds no controller: the controllers and the manager use it.
package runnerjob

import (
	"cmp"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerpod"
)

// Policy is a job policy with every default filled in.
type Policy struct {
	infrav1.JobPolicy
	ActiveDeadlineSeconds      int64
	LockTimeout                time.Duration
	SuccessfulJobsHistoryLimit int32
	FailedJobsHistoryLimit     int32
	// CleanDriftChecksKept is how many drift checks that found no drift
	// are kept once recorded: none, unless successfulJobsHistoryLimit is
	// set (on the object or its cluster's defaults).
	CleanDriftChecksKept int32
}

// EffectivePolicy merges the object's policy over its cluster's defaults
// over CAPTF's defaults, field by field.
func EffectivePolicy(own, clusterDefaults *infrav1.JobPolicy) Policy {
	p := Policy{ActiveDeadlineSeconds: 3600, LockTimeout: 5 * time.Minute, SuccessfulJobsHistoryLimit: 3, FailedJobsHistoryLimit: 3}
	p.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
	}
	for _, src := range []*infrav1.JobPolicy{clusterDefaults, own} {
		if src == nil {
			continue
		}
		if src.Resources != nil {
			p.Resources = src.Resources.DeepCopy()
		}
		if src.ActiveDeadlineSeconds != nil {
			p.ActiveDeadlineSeconds = *src.ActiveDeadlineSeconds
		}
		if src.LockTimeout != nil {
			p.LockTimeout = src.LockTimeout.Duration
		}
		if src.SuccessfulJobsHistoryLimit != nil {
			p.SuccessfulJobsHistoryLimit = *src.SuccessfulJobsHistoryLimit
			p.CleanDriftChecksKept = *src.SuccessfulJobsHistoryLimit
		}
		if src.FailedJobsHistoryLimit != nil {
			p.FailedJobsHistoryLimit = *src.FailedJobsHistoryLimit
		}
		if src.PodSecurityContext != nil {
			p.PodSecurityContext = src.PodSecurityContext.DeepCopy()
		}
		if src.SecurityContext != nil {
			p.SecurityContext = src.SecurityContext.DeepCopy()
		}
		if src.NodeSelector != nil {
			p.NodeSelector = src.NodeSelector
		}
		if src.Tolerations != nil {
			p.Tolerations = src.Tolerations
		}
		if src.Env != nil {
			p.Env = src.Env
		}
		if src.EnvFrom != nil {
			p.EnvFrom = src.EnvFrom
		}
		if src.ServiceAccountName != "" {
			p.ServiceAccountName = src.ServiceAccountName
		}
		if src.PlanServiceAccountName != "" {
			p.PlanServiceAccountName = src.PlanServiceAccountName
		}
	}
	return p
}

// Spec is what one runner Job does.
type Spec struct {
	// Namespace is where the Job runs: the owner's namespace when empty
	// (a catalog entry, cluster-scoped, runs its Jobs in the manager's).
	Namespace  string
	Owner      metav1.Object
	OwnerGVK   schema.GroupVersionKind
	Operation  infrav1.Operation
	InputsHash string
	// InputsBytes is the size of the rendered inputs; 0 when the Job runs
	// with the durable inputs.
	InputsBytes int
	Attempt     int
	Image       string
	// ProviderMirrorImage is mounted at run.ProviderMirrorDir when set.
	ProviderMirrorImage string
	Policy              Policy
	Backups             int
	DurableOnly         bool // run with the durable inputs (destroy)
	// ExpectState: the object was applied; the runner refuses a missing
	// state.
	ExpectState   bool
	MaxStateBytes int64
	// RunnerAPI is the URL of the manager's runner API, RunnerAPICA the
	// PEM bundle that signs its certificate.
	RunnerAPI, RunnerAPICA string
	// RunnerPods fills in what the Pod Security level needs.
	RunnerPods runnerpod.Rules
	// Gate is the approval policy of an apply and the plan hashes the
	// object's approvals name (TerraformCluster only).
	Gate                                  infrav1.ApprovalPolicy
	ApprovedPlan, ApprovedDestructivePlan string
	// Protect is spec.protect of an apply or a destroy.
	Protect []string
	// ApprovedModules are the digests of the module code the Job may run
	// (nil: any).
	ApprovedModules []string
	// WriteKey is the Job's run.EnvWriteKey: only its runner writes.
	WriteKey string
	// PlanPolicy is the plan policy rules of an apply, and the object as
	// they read it.
	PlanPolicy *planpolicy.Input
}

// runnerTokenSeconds is the life of a runner pod's token: the shortest the
// API server issues; the kubelet renews it while the pod runs.
const runnerTokenSeconds = 600

// RunnerCommand is the runner's entrypoint in the image.
const RunnerCommand = "/captf"

// Build makes the runner Job. Its pod meets the Pod Security level of
// s.RunnerPods once the policy passed its Check.
func Build(s Spec) *batchv1.Job {
	obj := names.ObjectOf(s.OwnerGVK.Kind, s.Owner.GetName())
	name := obj.Job(string(s.Owner.GetUID()), string(s.Operation), s.InputsHash, s.Attempt)
	labels := names.ObjectLabels(s.OwnerGVK.Kind, s.Owner.GetName(), s.Owner.GetUID())
	labels[names.LabelOperation] = string(s.Operation)
	labels[names.LabelInputsHash] = s.InputsHash
	labels[names.LabelAttempt] = strconv.Itoa(s.Attempt)
	sa := ServiceAccountFor(s.Policy.JobPolicy, OnlyPlans(s.Operation, s.Gate, s.ApprovedPlan, s.ApprovedDestructivePlan, s.PlanPolicy)).Name
	podSC, sc := s.RunnerPods.Secure(s.Policy.PodSecurityContext, s.Policy.SecurityContext)
	if approved := cmp.Or(s.ApprovedDestructivePlan, s.ApprovedPlan); s.Gate != "" && approved != "" {
		labels[names.LabelApprovedPlan] = approved
	}
	if len(s.Protect) > 0 {
		labels[names.LabelProtect] = names.ProtectHash(s.Protect)
	}
	args := escapeExpansion(append([]string{"runner"}, runnerSpec(s, name).Args()...))
	env := runnerEnv(s)
	mounts := []corev1.VolumeMount{{Name: "workspace", MountPath: run.JobWorkDir},
		{Name: "runner-token", MountPath: filepath.Dir(run.TokenFile), ReadOnly: true}}
	volumes := []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "runner-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: names.RunnerTokenAudience, ExpirationSeconds: ptr(int64(runnerTokenSeconds)), Path: filepath.Base(run.TokenFile)}}},
		}}}}
	if s.ProviderMirrorImage != "" {
		// An image volume (GA in Kubernetes 1.36): the mirror's files are
		// on the node once per image, not copied per run.
		mounts = append(mounts, corev1.VolumeMount{Name: "providers", MountPath: run.ProviderMirrorDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "providers", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: s.ProviderMirrorImage, PullPolicy: corev1.PullIfNotPresent}}})
	}
	var annotations map[string]string
	if s.InputsBytes > 0 {
		annotations = map[string]string{names.AnnotationInputsBytes: strconv.Itoa(s.InputsBytes)}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: cmp.Or(s.Namespace, s.Owner.GetNamespace()), Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s.Owner, s.OwnerGVK)},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr(int32(0)), // the manager retries, with backoff and a new name
			ActiveDeadlineSeconds: &s.Policy.ActiveDeadlineSeconds,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: sa,
					// No token the API server accepts: the pod runs the
					// user's module code. It reaches its state through the
					// runner API with a token only that API takes.
					AutomountServiceAccountToken: ptr(false),
					RestartPolicy:                corev1.RestartPolicyNever,
					// Time for terraform to stop gracefully and write its state.
					TerminationGracePeriodSeconds: ptr(int64(120)),
					SecurityContext:               podSC,
					NodeSelector:                  s.Policy.NodeSelector,
					Tolerations:                   s.Policy.Tolerations,
					Containers: []corev1.Container{{
						Name:                     "runner",
						Image:                    s.Image,
						Command:                  []string{RunnerCommand},
						Args:                     args,
						Env:                      env,
						EnvFrom:                  s.Policy.EnvFrom,
						WorkingDir:               run.JobWorkDir,
						Resources:                *s.Policy.Resources,
						SecurityContext:          sc,
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						VolumeMounts:             mounts,
					}},
					Volumes: volumes,
				},
			},
		},
	}
}

// runnerSpec is what the Job named name tells its runner.
func runnerSpec(s Spec, name string) run.Spec {
	spec := run.Spec{Namespace: cmp.Or(s.Namespace, s.Owner.GetNamespace()), ObjectKind: s.OwnerGVK.Kind, ObjectName: s.Owner.GetName(), ObjectUID: s.Owner.GetUID(),
		ObjectAPIVersion: s.OwnerGVK.GroupVersion().String(), Operation: s.Operation, Job: name, WorkDir: run.JobWorkDir,
		StateBackups: s.Backups, LockTimeout: s.Policy.LockTimeout, UseDurableInputs: s.DurableOnly, ExpectState: s.ExpectState,
		MaxStateBytes: s.MaxStateBytes}
	if s.ProviderMirrorImage != "" {
		spec.ProviderMirror = run.ProviderMirrorDir
	}
	if s.Gate != "" {
		spec.Gate, spec.ApprovedPlan, spec.ApprovedDestructivePlan = s.Gate, s.ApprovedPlan, s.ApprovedDestructivePlan
	}
	spec.Protect = s.Protect
	spec.ApprovedModules = s.ApprovedModules
	spec.PlanPolicy = s.PlanPolicy
	spec.SensitiveEnv, spec.PlainEnv = envFromSecrets(runnerEnv(s), s.Policy.EnvFrom)
	return spec
}

// envFromSecrets names the runner's environment variables whose values
// come from Secrets, and the env entries that override an envFrom: the
// runner redacts those values (run.Spec.SensitiveEnv).
func envFromSecrets(env []corev1.EnvVar, envFrom []corev1.EnvFromSource) (sensitive, plain []string) {
	for _, e := range env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			sensitive = append(sensitive, e.Name)
		} else {
			plain = append(plain, e.Name)
		}
	}
	fromSecret := false
	for _, e := range envFrom {
		if e.SecretRef != nil {
			sensitive = append(sensitive, e.Prefix+"*")
			fromSecret = true
		}
	}
	if !fromSecret {
		plain = nil // nothing to tell apart from
	}
	return sensitive, plain
}

// escapeExpansion escapes each $ of args as $$: the kubelet expands $(NAME)
// in a container's args from its environment, and the args carry what a
// writer wrote (spec.protect, an envFrom prefix). Unescaped, a pattern
// $(CAPTF_WRITE_KEY) would put the Job's write key on the runner's command
// line, which every process of the pod may read.
func escapeExpansion(args []string) []string {
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return args
}

// runnerEnv is the runner container's environment: its pod, where the
// runner API is and the CA that signs it, then the user's.
func runnerEnv(s Spec) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
	}
	// Set even when empty: an env entry wins over an envFrom's key, and
	// these say where the runner sends its token.
	env = append(env, corev1.EnvVar{Name: run.EnvRunnerAPI, Value: s.RunnerAPI}, corev1.EnvVar{Name: run.EnvRunnerAPICA, Value: s.RunnerAPICA})
	env = append(env, s.Policy.Env...)
	// Last: of duplicate names the kubelet takes the last, and so does
	// run.WriteKeyOf.
	return append(env, corev1.EnvVar{Name: run.EnvWriteKey, Value: s.WriteKey})
}

// Finished returns whether job is done and whether it succeeded.
func Finished(job *Cached) (finished, succeeded bool) {
	return job.Status.Finished, job.Status.Finished && job.Status.Complete
}

// FailureMessage says why a finished Job failed.
func FailureMessage(job *Cached) string {
	if st := job.Status; st.Finished && !st.Complete {
		return fmt.Sprintf("Job %s failed: %s: %s", job.Name, st.EndReason, st.EndMessage)
	}
	return "Job " + job.Name + " failed"
}

// Sort orders Jobs newest first.
func Sort(jobs []*Cached) {
	sort.Slice(jobs, func(i, j int) bool {
		ti, tj := jobs[i].CreationTimestamp, jobs[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return jobs[i].Name > jobs[j].Name
	})
}

// Backoff is the wait before retrying after failures consecutive failed
// attempts: 10s doubling, at most 10m.
func Backoff(failures int) time.Duration {
	d := 10 * time.Second
	for i := 1; i < failures && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}

func ptr[T any](v T) *T { return &v }

// Cached is what the Job informer keeps of a runner Job: what CAPTF
// reads of it. A finished Job's metadata and status took 2.1 KB in the
// cache (its label and annotation maps, two conditions with their
// messages); with a whole ObjectMeta and the Job's status type 1.1 KB,
// now 0.8 KB (BenchmarkJobCache), and a fleet with drift checks keeps up
// to six Jobs an object.
type Cached struct {
	// No labels, annotations, finalizers or other owners: the fields below
	// say what CAPTF reads of those.
	Name, Namespace   string
	UID               types.UID
	ResourceVersion   string
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	// Controller is its controller reference; zero when it has none.
	Controller JobController

	ObjectUID    types.UID         // names.LabelObjectUID
	Operation    infrav1.Operation // names.LabelOperation
	InputsHash   string            // names.LabelInputsHash
	ApprovedPlan string            // names.LabelApprovedPlan
	Protect      string            // names.LabelProtect
	Attempt      int               // names.LabelAttempt
	InputsBytes  int32             // names.AnnotationInputsBytes; 0 when absent
	WriteKey     string            // run.WriteKeyOf its pod template
	Keyed        bool              // it has a write key entry, maybe empty

	Status CachedStatus
}

// JobController is a Job's controller reference.
type JobController struct {
	APIVersion, Kind, Name string
	UID                    types.UID
}

// CachedStatus is what CAPTF reads of a Job's status: its pod counts,
// start and completion, and the condition that ended it.
type CachedStatus struct {
	StartTime, CompletionTime              *metav1.Time
	Active, Succeeded, Failed, Terminating int32
	// Uncounted: a pod ended that the Job controller has not counted yet.
	// The Job is then neither active nor finished for a moment (longer
	// when the controller is busy), and it has a pod.
	Uncounted bool
	// Finished: its Complete or Failed condition is true; Complete: the
	// Complete one. The condition's reason, its message (only a failure's)
	// and its time are kept.
	Finished, Complete bool
	EndReason          string
	EndMessage         string
	EndTime            metav1.Time
}

// GetName, GetNamespace and GetObjectMeta are what logs (klog.KObj) and a
// cache (meta.Accessor) read; GetObjectMeta makes the metadata on each
// call: a cache takes it once an event.
func (j *Cached) GetName() string      { return j.Name }
func (j *Cached) GetNamespace() string { return j.Namespace }
func (j *Cached) GetObjectMeta() metav1.Object {
	m := &metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, UID: j.UID, ResourceVersion: j.ResourceVersion,
		CreationTimestamp: j.CreationTimestamp, DeletionTimestamp: j.DeletionTimestamp}
	if ref, ok := j.ControllerRef(); ok {
		m.OwnerReferences = []metav1.OwnerReference{ref}
	}
	return m
}

// Key is the Job's cache key.
func (j *Cached) Key() cache.ObjectName {
	return cache.ObjectName{Namespace: j.Namespace, Name: j.Name}
}

// ControllerRef is the Job's controller reference, if it has one.
func (j *Cached) ControllerRef() (metav1.OwnerReference, bool) {
	c := j.Controller
	if c == (JobController{}) {
		return metav1.OwnerReference{}, false
	}
	return metav1.OwnerReference{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, UID: c.UID, Controller: ptr(true)}, true
}

// Trim is the Job informer's transform: a Job becomes a Cached.
func Trim(obj any) any {
	if job, ok := obj.(*batchv1.Job); ok {
		return CachedFrom(job)
	}
	return obj
}

// CachedFrom is what the cache keeps of job.
func CachedFrom(job *batchv1.Job) *Cached {
	labels := job.Labels
	c := &Cached{Name: job.Name, Namespace: job.Namespace, UID: job.UID, ResourceVersion: job.ResourceVersion,
		CreationTimestamp: job.CreationTimestamp, DeletionTimestamp: job.DeletionTimestamp,
		ObjectUID: types.UID(labels[names.LabelObjectUID]), Operation: infrav1.Operation(labels[names.LabelOperation]),
		InputsHash: labels[names.LabelInputsHash], ApprovedPlan: labels[names.LabelApprovedPlan], Protect: labels[names.LabelProtect]}
	if owner := metav1.GetControllerOf(job); owner != nil {
		c.Controller = JobController{APIVersion: owner.APIVersion, Kind: owner.Kind, Name: owner.Name, UID: owner.UID}
		if owner.UID == c.ObjectUID {
			c.ObjectUID = owner.UID // one string for both
		}
	}
	c.Attempt = int(atoi32(labels[names.LabelAttempt]))
	c.WriteKey, c.Keyed = run.WriteKeyOf(&job.Spec.Template.Spec)
	c.InputsBytes = atoi32(job.Annotations[names.AnnotationInputsBytes])
	st := job.Status
	c.Status = CachedStatus{StartTime: st.StartTime, CompletionTime: st.CompletionTime, Active: st.Active, Succeeded: st.Succeeded, Failed: st.Failed}
	if st.Terminating != nil && *st.Terminating > 0 {
		c.Status.Terminating = *st.Terminating
	}
	if u := st.UncountedTerminatedPods; u != nil && len(u.Succeeded)+len(u.Failed) > 0 {
		c.Status.Uncounted = true
	}
	for _, cond := range st.Conditions {
		if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
			c.Status.Finished, c.Status.Complete = true, cond.Type == batchv1.JobComplete
			c.Status.EndReason, c.Status.EndTime = cond.Reason, cond.LastTransitionTime
			if !c.Status.Complete {
				c.Status.EndMessage = cond.Message
			}
			break
		}
	}
	return c
}

// atoi32 is s as a number; 0 when it is none (a label anyone may write).
func atoi32(s string) int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0
	}
	return int32(n)
}

// OfObject are the cached Jobs of obj, newest first: those its label
// names, in its namespace and controlled by it. The label alone is anyone's
// to write: a Job in another namespace naming this object's UID (with a
// result Secret of its own there) would otherwise be read as its run.
func OfObject(index cache.Indexer, obj metav1.Object) []*Cached {
	var jobs []*Cached
	objs, _ := index.ByIndex(ByObjectUID, uidBucket(obj.GetUID())) // an error: no such index, no Jobs
	for _, o := range objs {
		job, ok := o.(*Cached)
		if !ok || job.ObjectUID != obj.GetUID() || job.Namespace != obj.GetNamespace() {
			continue
		}
		if job.Controller.UID != obj.GetUID() {
			continue
		}
		jobs = append(jobs, job)
	}
	Sort(jobs)
	return jobs
}

// OfUID are the cached Jobs labelled with the object UID uid, newest
// first, wherever they are and whatever controls them: the caller checks.
func OfUID(index cache.Indexer, uid types.UID) []*Cached {
	var jobs []*Cached
	objs, _ := index.ByIndex(ByObjectUID, uidBucket(uid))
	for _, o := range objs {
		if job, ok := o.(*Cached); ok && job.ObjectUID == uid {
			jobs = append(jobs, job)
		}
	}
	Sort(jobs)
	return jobs
}

// ByObjectUID indexes runner Jobs by the UID of their Terraform*
// object, in 4,096 buckets (uidBucket). An index holds a set for each of
// its values: one per object took about 250 B an object, most of a Go map
// for one or two Jobs. A lookup copies its bucket's Jobs, and the metrics
// collector looks up every object's at each scrape: 4,096 buckets keep
// that to a few Jobs a lookup at 10,000 objects (256 made it 40).
const ByObjectUID = "captf-object-uid-bucket"

// uidBucket is the bucket of the object of uid: the UID's first three
// characters, hexadecimal digits for a UID the API server gave.
func uidBucket(uid types.UID) string {
	if len(uid) < 3 {
		return string(uid)
	}
	return string(uid[:3])
}

// Indexers are the indexers the controllers need on the Job informer.
var Indexers = cache.Indexers{ByObjectUID: func(obj any) ([]string, error) {
	job, ok := obj.(*Cached)
	if !ok {
		return nil, nil
	}
	if job.ObjectUID != "" {
		return []string{uidBucket(job.ObjectUID)}, nil
	}
	return nil, nil
}}
