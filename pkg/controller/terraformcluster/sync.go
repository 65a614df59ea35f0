package terraformcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runner"
)

var gvk = infrav1.SchemeGroupVersion.WithKind("TerraformCluster")

// Ready reasons, besides the Cluster API ones.
const (
	ReasonWaitingForOwner = "WaitingForClusterOwner"
	ReasonApplying        = "Applying"
	ReasonApplied         = "Applied"
	ReasonApplyFailed     = "ApplyFailed"
	ReasonDestroying      = "Destroying"
	ReasonDestroyFailed   = "DestroyFailed"
	ReasonInvalidOutput   = "InvalidOutput"
	ReasonNotPaused       = "NotPaused"
	ReasonPaused          = "Paused"
)

// Well-known module outputs.
const (
	OutputControlPlaneEndpoint = "control_plane_endpoint"
	OutputFailureDomains       = "failure_domains"
)

// syncCtx is what one sync knows and decides.
type syncCtx struct {
	tc      *infrav1.TerraformCluster // a copy: safe to change
	key     cache.ObjectName
	cluster *unstructured.Unstructured
	jobs    []*batchv1.Job // of this object, newest first
	requeue time.Duration
}

func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.FromContext(ctx).WithValues("terraformCluster", key)
	ctx = klog.NewContext(ctx, logger)
	start := c.now()
	defer func() { logger.V(4).Info("Finished syncing", "duration", c.now().Sub(start)) }()

	cached, err := c.lister.TerraformClusters(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.expectations.Delete(key)
		c.written.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if _, ok := cached.Annotations[clusterv1ManagedBy]; ok {
		return nil // externally managed: hands off
	}
	if !c.written.Seen(key, cached.ResourceVersion) {
		// The cache has not caught up with our last write: deciding on it
		// would write again what is already written.
		c.queue.AddAfter(key, 250*time.Millisecond)
		return nil
	}
	if !c.expectations.Satisfied(key) {
		logger.V(4).Info("Waiting for the informer to see the Jobs created")
		return nil
	}
	s := &syncCtx{tc: cached.DeepCopy(), key: key}
	original := cached.Status.DeepCopy()
	s.jobs = c.objectJobs(cached)
	s.cluster = c.ownerCluster(cached)

	err = c.reconcile(ctx, s)
	if serr := c.writeStatus(ctx, s.tc, original); serr != nil && !apierrors.IsNotFound(serr) {
		err = errors.Join(err, serr)
	}
	if err == nil && s.requeue > 0 {
		c.queue.AddAfter(key, s.requeue)
	}
	return err
}

func (c *Controller) reconcile(ctx context.Context, s *syncCtx) error {
	tc := s.tc
	deleting := tc.DeletionTimestamp != nil
	if s.cluster == nil && !deleting {
		c.setReady(tc, metav1.ConditionFalse, ReasonWaitingForOwner, "Waiting for a Cluster to own this TerraformCluster: Cluster API sets the owner reference once the Cluster's spec.infrastructureRef names it")
		return nil
	}
	if !deleting && !slices.Contains(tc.Finalizers, infrav1.TerraformClusterFinalizer) {
		tc.Finalizers = append(tc.Finalizers, infrav1.TerraformClusterFinalizer)
		updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).Update(ctx, tc, metav1.UpdateOptions{FieldManager: ControllerName})
		if err != nil {
			return err
		}
		c.written.Wrote(s.key, updated.ResourceVersion)
		tc.ObjectMeta = updated.ObjectMeta
	}
	// Pause comes before deletion: clusterctl move pauses, then deletes and
	// strips finalizers; that must never destroy anything.
	if reason, paused := isPaused(s.cluster, tc); paused {
		meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{Type: infrav1.ConditionPaused, Status: metav1.ConditionTrue,
			Reason: ReasonPaused, Message: reason, ObservedGeneration: tc.Generation})
		return nil
	}
	meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{Type: infrav1.ConditionPaused, Status: metav1.ConditionFalse,
		Reason: ReasonNotPaused, ObservedGeneration: tc.Generation})
	if deleting {
		return c.reconcileDelete(ctx, s)
	}
	return c.reconcileNormal(ctx, s)
}

func (c *Controller) reconcileNormal(ctx context.Context, s *syncCtx) error {
	logger := klog.FromContext(ctx)
	tc := s.tc
	in, err := util.Render(ctx, c.kube, tc.Namespace, tc.Spec.WorkspaceSpec, c.captfInputs(s))
	if err != nil {
		var ie *util.InputError
		if errors.As(err, &ie) {
			c.setReady(tc, metav1.ConditionFalse, ie.Reason, ie.Message)
			c.recorder.Event(tc, corev1.EventTypeWarning, ie.Reason, ie.Message)
			s.requeue = time.Minute // the Secret or ConfigMap may appear; they are not watched
			return nil
		}
		return err
	}
	if active := activeJob(s.jobs); active != nil {
		c.recordJob(tc, active, "Running")
		if active.Labels[names.LabelOperation] == string(infrav1.OperationApply) {
			c.setApplying(tc, fmt.Sprintf("Job %s is applying the module", active.Name))
		}
		return nil
	}
	if err := c.cleanupHistory(ctx, s); err != nil {
		logger.Error(err, "Cleaning up old Jobs")
	}
	latest := latestJob(s.jobs, infrav1.OperationApply, in.Hash)
	if tc.Status.AppliedInputsHash == in.Hash && latest != nil {
		if ok, _ := util.JobFinished(latest); ok {
			c.recordJob(tc, latest, outcome(latest))
		}
		return nil
	}
	if latest == nil {
		if tc.Status.AppliedInputsHash == in.Hash {
			return nil // applied, and its Jobs are gone from history
		}
		return c.startApply(ctx, s, in, 0)
	}
	_, succeeded := util.JobFinished(latest)
	res, rerr := c.readResult(ctx, tc, latest)
	if succeeded {
		if rerr != nil {
			return rerr
		}
		return c.applySucceeded(ctx, s, in.Hash, latest, res)
	}
	// Failed: report once, then retry after a backoff, under a new name.
	c.recordJob(tc, latest, runner.OutcomeFailed)
	msg := util.JobFailureMessage(latest)
	if res != nil && res.Error != "" {
		msg = fmt.Sprintf("terraform failed in %s (Job %s): %s", res.Stage, latest.Name, res.Error)
	}
	if cond := meta.FindStatusCondition(tc.Status.Conditions, infrav1.ConditionReady); cond == nil || cond.Reason != ReasonApplyFailed || cond.Message != msg {
		c.recorder.Event(tc, corev1.EventTypeWarning, ReasonApplyFailed, msg)
	}
	c.setReady(tc, metav1.ConditionFalse, ReasonApplyFailed, msg)
	failures := util.Attempt(latest) + 1
	wait := util.Backoff(failures) - c.now().Sub(finishTime(latest))
	if wait > 0 {
		s.requeue = wait
		return nil
	}
	return c.startApply(ctx, s, in, util.Attempt(latest)+1)
}

func (c *Controller) startApply(ctx context.Context, s *syncCtx, in *util.Inputs, attempt int) error {
	tc := s.tc
	if ok, err := c.runnerAllowed(ctx, s); !ok {
		return err
	}
	job := c.buildJob(tc, infrav1.OperationApply, in.Hash, attempt, false)
	if err := c.createRunInputs(ctx, tc, job, in.SecretData()); err != nil {
		return err
	}
	if err := c.createJob(ctx, s.key, job); err != nil {
		return err
	}
	c.recordJob(tc, job, "Running")
	c.setApplying(tc, fmt.Sprintf("Job %s is applying the module", job.Name))
	return nil
}

// runnerAllowed checks spec.jobs.serviceAccountName; a refusal is a
// condition the user fixes, checked again within a minute.
func (c *Controller) runnerAllowed(ctx context.Context, s *syncCtx) (bool, error) {
	err := c.access.CheckServiceAccount(ctx, s.tc.Namespace, util.EffectivePolicy(s.tc.Spec.Jobs, nil).ServiceAccountName)
	var ie *util.InputError
	if errors.As(err, &ie) {
		c.setReady(s.tc, metav1.ConditionFalse, ie.Reason, ie.Message)
		c.recorder.Event(s.tc, corev1.EventTypeWarning, ie.Reason, ie.Message)
		s.requeue = time.Minute
		return false, nil
	}
	return err == nil, err
}

func (c *Controller) applySucceeded(ctx context.Context, s *syncCtx, hash string, job *batchv1.Job, res *runner.Result) error {
	tc := s.tc
	endpoint, domains, err := readClusterOutputs(res.Outputs)
	if err != nil {
		c.setReady(tc, metav1.ConditionFalse, ReasonInvalidOutput, err.Error())
		c.recorder.Event(tc, corev1.EventTypeWarning, ReasonInvalidOutput, err.Error())
		return nil
	}
	if tc.Spec.ControlPlaneEndpoint.IsZero() && endpoint != nil {
		tc.Spec.ControlPlaneEndpoint = *endpoint
		status := tc.Status
		updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).Update(ctx, tc, metav1.UpdateOptions{FieldManager: ControllerName})
		if err != nil {
			return err
		}
		c.written.Wrote(s.key, updated.ResourceVersion)
		*tc = *updated
		tc.Status = status
	}
	tc.Status.FailureDomains = domains
	tc.Status.Outputs = publicOutputs(res.Outputs)
	tc.Status.AppliedInputsHash = hash
	if res.Plan != nil {
		tc.Status.AppliedPlanHash = res.Plan.Hash
		tc.Status.LastPlan = &infrav1.PlanStatus{Hash: res.Plan.Hash, Operation: infrav1.OperationApply, Summary: res.Plan.Summary, Time: metav1.NewTime(finishTime(job))}
	}
	applied := metav1.NewTime(finishTime(job))
	tc.Status.LastAppliedTime = &applied
	provisioned := true
	tc.Status.Initialization = &infrav1.Initialization{Provisioned: &provisioned}
	tc.Status.Ready = true
	c.recordJob(tc, job, runner.OutcomeSucceeded)
	msg := "The module is applied"
	if res.Plan != nil {
		sum := res.Plan.Summary
		msg = fmt.Sprintf("The module is applied (plan %s: %d to add, %d to change, %d to destroy, %d to replace)", res.Plan.Hash, sum.Add, sum.Change, sum.Destroy, sum.Replace)
	}
	c.setReady(tc, metav1.ConditionTrue, ReasonApplied, msg)
	c.recorder.Event(tc, corev1.EventTypeNormal, ReasonApplied, msg)
	return nil
}

func (c *Controller) reconcileDelete(ctx context.Context, s *syncCtx) error {
	tc := s.tc
	if !slices.Contains(tc.Finalizers, infrav1.TerraformClusterFinalizer) {
		return nil
	}
	obj := objectNames(tc)
	if tc.Annotations[infrav1.AnnotationAbandonInfrastructure] == "true" {
		if err := c.abandon(ctx, tc); err != nil {
			return err
		}
		c.recorder.Eventf(tc, corev1.EventTypeNormal, "Abandoned", "Deleted without destroy (%s): state and backups are kept with label %s=true", infrav1.AnnotationAbandonInfrastructure, names.LabelAbandoned)
		return c.removeFinalizer(ctx, tc)
	}
	if active := activeJob(s.jobs); active != nil {
		c.recordJob(tc, active, "Running")
		c.setReady(tc, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Waiting for Job %s to finish before destroying", active.Name))
		return nil
	}
	secrets := c.kube.CoreV1().Secrets(tc.Namespace)
	durable, err := secrets.Get(ctx, obj.DurableInputs(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	hasDurable := err == nil
	if !hasDurable {
		if _, err := secrets.Get(ctx, obj.State(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
			// Never applied: nothing to destroy.
			return c.removeFinalizer(ctx, tc)
		} else if err != nil {
			return err
		}
	}
	var hash string
	var data map[string][]byte
	if hasDurable {
		hash = util.HashSecretData(durable.Data)
	} else {
		// A first apply failed half-way: destroy what its state holds with
		// the current inputs.
		in, err := util.Render(ctx, c.kube, tc.Namespace, tc.Spec.WorkspaceSpec, c.captfInputs(s))
		if err != nil {
			c.setReady(tc, metav1.ConditionFalse, ReasonDestroyFailed, "No inputs to destroy with: "+err.Error())
			s.requeue = time.Minute
			return nil
		}
		hash, data = in.Hash, in.SecretData()
	}
	latest := latestJob(s.jobs, infrav1.OperationDestroy, hash)
	attempt := 0
	if latest != nil {
		_, succeeded := util.JobFinished(latest)
		if succeeded {
			c.recorder.Event(tc, corev1.EventTypeNormal, "Destroyed", "The module's infrastructure is destroyed")
			return c.removeFinalizer(ctx, tc)
		}
		c.recordJob(tc, latest, runner.OutcomeFailed)
		msg := util.JobFailureMessage(latest)
		if res, _ := c.readResult(ctx, tc, latest); res != nil && res.Error != "" {
			msg = fmt.Sprintf("terraform destroy failed in %s (Job %s): %s", res.Stage, latest.Name, res.Error)
		}
		c.setReady(tc, metav1.ConditionFalse, ReasonDestroyFailed, msg)
		attempt = util.Attempt(latest) + 1
		if wait := util.Backoff(attempt) - c.now().Sub(finishTime(latest)); wait > 0 {
			s.requeue = wait
			return nil
		}
	}
	if ok, err := c.runnerAllowed(ctx, s); !ok {
		return err
	}
	job := c.buildJob(tc, infrav1.OperationDestroy, hash, attempt, hasDurable)
	if !hasDurable {
		if err := c.createRunInputs(ctx, tc, job, data); err != nil {
			return err
		}
	}
	if err := c.createJob(ctx, s.key, job); err != nil {
		return err
	}
	c.recordJob(tc, job, "Running")
	c.setReady(tc, metav1.ConditionFalse, ReasonDestroying, fmt.Sprintf("Job %s is destroying the module's infrastructure", job.Name))
	return nil
}

// abandon keeps state, backups and inputs: no owner (so no garbage
// collection), labelled so an operator finds them.
func (c *Controller) abandon(ctx context.Context, tc *infrav1.TerraformCluster) error {
	selector := names.LabelObjectUID + "=" + string(tc.UID)
	secrets, err := c.kube.CoreV1().Secrets(tc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err
	}
	for i := range secrets.Items {
		sec := &secrets.Items[i]
		switch sec.Labels[names.LabelSecretType] {
		case names.SecretTypeRunInputs, names.SecretTypeResult:
			continue // per-run: collected with the object
		}
		sec.OwnerReferences = nil
		sec.Labels[names.LabelAbandoned] = "true"
		if _, err := c.kube.CoreV1().Secrets(tc.Namespace).Update(ctx, sec, metav1.UpdateOptions{FieldManager: ControllerName}); err != nil {
			return fmt.Errorf("keeping secret %s: %w", sec.Name, err)
		}
	}
	return nil
}

func (c *Controller) removeFinalizer(ctx context.Context, tc *infrav1.TerraformCluster) error {
	tc.Finalizers = slices.DeleteFunc(tc.Finalizers, func(f string) bool { return f == infrav1.TerraformClusterFinalizer })
	updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).Update(ctx, tc, metav1.UpdateOptions{FieldManager: ControllerName})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	tc.ObjectMeta = updated.ObjectMeta
	return nil
}

func (c *Controller) buildJob(tc *infrav1.TerraformCluster, op infrav1.Operation, hash string, attempt int, durable bool) *batchv1.Job {
	return util.BuildJob(util.JobSpec{
		Owner: tc, OwnerGVK: gvk, Operation: op, InputsHash: hash, Attempt: attempt,
		Image: c.config.RunnerImage, Policy: util.EffectivePolicy(tc.Spec.Jobs, nil),
		Backups: c.config.StateBackups, DurableOnly: durable,
	})
}

func (c *Controller) createRunInputs(ctx context.Context, tc *infrav1.TerraformCluster, job *batchv1.Job, data map[string][]byte) error {
	labels := runner.ObjectLabels(gvk.Kind, tc.Name, tc.UID)
	labels[names.LabelSecretType] = names.SecretTypeRunInputs
	labels[names.LabelOperation] = job.Labels[names.LabelOperation]
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: objectNames(tc).RunInputs(job.Name), Namespace: tc.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(tc, gvk)}},
		Data: data,
	}
	_, err := c.kube.CoreV1().Secrets(tc.Namespace).Create(ctx, sec, metav1.CreateOptions{FieldManager: ControllerName})
	if apierrors.IsAlreadyExists(err) {
		return nil // same name, same hash: the same inputs
	}
	return err
}

func (c *Controller) createJob(ctx context.Context, key cache.ObjectName, job *batchv1.Job) error {
	if err := c.access.Ensure(ctx, job.Namespace); err != nil {
		return err
	}
	c.expectations.ExpectJob(key, job.Name)
	_, err := c.kube.BatchV1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: ControllerName})
	if apierrors.IsAlreadyExists(err) {
		// Ours: the name is deterministic. The informer will show it.
		return nil
	}
	if err != nil {
		c.expectations.JobObserved(key, job.Name)
		return fmt.Errorf("creating Job %s: %w", job.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Created Job", "job", klog.KObj(job))
	return nil
}

// readResult reads what the runner of job reported; nil when it wrote
// nothing (killed before it could).
func (c *Controller) readResult(ctx context.Context, tc *infrav1.TerraformCluster, job *batchv1.Job) (*runner.Result, error) {
	sec, err := c.kube.CoreV1().Secrets(tc.Namespace).Get(ctx, objectNames(tc).Result(job.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("job %s finished without a result", job.Name)
	}
	if err != nil {
		return nil, err
	}
	var res runner.Result
	if err := json.Unmarshal(sec.Data[runner.KeyResult], &res); err != nil {
		return nil, fmt.Errorf("result of Job %s: %w", job.Name, err)
	}
	return &res, nil
}

// cleanupHistory keeps the newest finished Jobs of each operation within
// the policy's limits, with their run Secrets.
func (c *Controller) cleanupHistory(ctx context.Context, s *syncCtx) error {
	policy := util.EffectivePolicy(s.tc.Spec.Jobs, nil)
	kept := map[string]int32{}
	var errs []error
	for _, job := range s.jobs { // newest first
		finished, succeeded := util.JobFinished(job)
		if !finished || job.DeletionTimestamp != nil {
			continue
		}
		limit := policy.FailedJobsHistoryLimit
		if succeeded {
			limit = policy.SuccessfulJobsHistoryLimit
		}
		k := job.Labels[names.LabelOperation] + strconv.FormatBool(succeeded)
		if kept[k] < limit {
			kept[k]++
			continue
		}
		obj := objectNames(s.tc)
		for _, name := range []string{obj.RunInputs(job.Name), obj.Result(job.Name)} {
			if err := c.kube.CoreV1().Secrets(job.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
		background := metav1.DeletePropagationBackground
		if err := c.kube.BatchV1().Jobs(job.Namespace).Delete(ctx, job.Name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) writeStatus(ctx context.Context, tc *infrav1.TerraformCluster, original *infrav1.TerraformClusterStatus) error {
	if tc.DeletionTimestamp != nil && !slices.Contains(tc.Finalizers, infrav1.TerraformClusterFinalizer) {
		return nil // gone once the finalizer went
	}
	tc.Status.ObservedGeneration = tc.Generation
	if equality.Semantic.DeepEqual(&tc.Status, original) {
		return nil
	}
	updated, err := c.captf.InfrastructureV1alpha1().TerraformClusters(tc.Namespace).UpdateStatus(ctx, tc, metav1.UpdateOptions{FieldManager: ControllerName})
	if err != nil {
		return err
	}
	c.written.Wrote(cache.MetaObjectToName(tc), updated.ResourceVersion)
	return nil
}

// captfInputs are the inputs CAPTF gives every cluster module (docs/inputs.md).
func (c *Controller) captfInputs(s *syncCtx) map[string]any {
	clusterName := s.tc.Labels["cluster.x-k8s.io/cluster-name"]
	if s.cluster != nil {
		clusterName = s.cluster.GetName()
	}
	return map[string]any{
		"captf_cluster_name": clusterName,
		"captf_namespace":    s.tc.Namespace,
		"captf_name":         s.tc.Name,
		"captf_kind":         gvk.Kind,
	}
}

func (c *Controller) setReady(tc *infrav1.TerraformCluster, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&tc.Status.Conditions, metav1.Condition{Type: infrav1.ConditionReady, Status: status,
		Reason: reason, Message: message, ObservedGeneration: tc.Generation})
}

// setApplying keeps Ready True while a provisioned cluster takes a change.
func (c *Controller) setApplying(tc *infrav1.TerraformCluster, message string) {
	status := metav1.ConditionFalse
	if tc.Status.Initialization != nil && tc.Status.Initialization.Provisioned != nil && *tc.Status.Initialization.Provisioned {
		status = metav1.ConditionTrue
	}
	c.setReady(tc, status, ReasonApplying, message)
}

func (c *Controller) recordJob(tc *infrav1.TerraformCluster, job *batchv1.Job, outcome string) {
	ref := infrav1.JobReference{Operation: infrav1.Operation(job.Labels[names.LabelOperation]), Name: job.Name, Outcome: outcome}
	// Times are recorded once the Job is done: a running Job's status
	// changes must not cost a status write each.
	if finished, _ := util.JobFinished(job); finished {
		t := metav1.NewTime(finishTime(job))
		ref.StartTime, ref.CompletionTime = job.Status.StartTime, &t
	}
	for i := range tc.Status.LastJobs {
		if tc.Status.LastJobs[i].Operation == ref.Operation {
			tc.Status.LastJobs[i] = ref
			return
		}
	}
	tc.Status.LastJobs = append(tc.Status.LastJobs, ref)
}

func (c *Controller) objectJobs(tc *infrav1.TerraformCluster) []*batchv1.Job {
	objs, err := c.jobIndex.ByIndex(util.JobsByObjectUID, string(tc.UID))
	if err != nil {
		return nil
	}
	jobs := make([]*batchv1.Job, 0, len(objs))
	for _, o := range objs {
		jobs = append(jobs, o.(*batchv1.Job))
	}
	util.SortJobs(jobs)
	return jobs
}

func (c *Controller) ownerCluster(tc *infrav1.TerraformCluster) *unstructured.Unstructured {
	for _, ref := range tc.OwnerReferences {
		if ref.Kind != "Cluster" || !strings.HasPrefix(ref.APIVersion, clusterv1Group+"/") {
			continue
		}
		obj, err := c.clusters.ByNamespace(tc.Namespace).Get(ref.Name)
		if err != nil {
			continue
		}
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetUID() == ref.UID {
			return u
		}
	}
	return nil
}

func objectNames(tc *infrav1.TerraformCluster) names.Object {
	return names.Object{Kind: runner.ShortKind(gvk.Kind), Name: tc.Name}
}

func activeJob(jobs []*batchv1.Job) *batchv1.Job {
	for _, j := range jobs {
		if finished, _ := util.JobFinished(j); !finished && j.DeletionTimestamp == nil {
			return j
		}
	}
	return nil
}

// latestJob is the newest attempt of op for hash.
func latestJob(jobs []*batchv1.Job, op infrav1.Operation, hash string) *batchv1.Job {
	var latest *batchv1.Job
	for _, j := range jobs {
		if j.Labels[names.LabelOperation] != string(op) || j.Labels[names.LabelInputsHash] != hash {
			continue
		}
		if latest == nil || util.Attempt(j) > util.Attempt(latest) {
			latest = j
		}
	}
	return latest
}

func outcome(job *batchv1.Job) string {
	if _, ok := util.JobFinished(job); ok {
		return runner.OutcomeSucceeded
	}
	return runner.OutcomeFailed
}

func finishTime(job *batchv1.Job) time.Time {
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.Time
	}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return job.CreationTimestamp.Time
}

func publicOutputs(outputs map[string]runner.Output) map[string]runtime.RawExtension {
	out := map[string]runtime.RawExtension{}
	for k, o := range outputs {
		if !o.Sensitive {
			out[k] = runtime.RawExtension{Raw: o.Value}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// readClusterOutputs reads control_plane_endpoint ("host:port", or an object
// with host and port) and failure_domains (a list in Cluster API's v1beta2
// shape, or a map from name to {controlPlane, attributes}).
func readClusterOutputs(outputs map[string]runner.Output) (*infrav1.APIEndpoint, []infrav1.FailureDomain, error) {
	var endpoint *infrav1.APIEndpoint
	if o, ok := outputs[OutputControlPlaneEndpoint]; ok {
		var asString string
		var asObject struct {
			Host string `json:"host"`
			Port int32  `json:"port"`
		}
		switch {
		case json.Unmarshal(o.Value, &asString) == nil:
			host, port, err := net.SplitHostPort(asString)
			p, perr := strconv.ParseInt(port, 10, 32)
			if err != nil || perr != nil || host == "" || p < 1 || p > 65535 {
				return nil, nil, fmt.Errorf("output %s = %q: want \"host:port\" or {host, port}", OutputControlPlaneEndpoint, asString)
			}
			endpoint = &infrav1.APIEndpoint{Host: host, Port: int32(p)}
		case json.Unmarshal(o.Value, &asObject) == nil && asObject.Host != "" && asObject.Port >= 1 && asObject.Port <= 65535:
			endpoint = &infrav1.APIEndpoint{Host: asObject.Host, Port: asObject.Port}
		default:
			return nil, nil, fmt.Errorf("output %s = %s: want \"host:port\" or {host, port} with a port from 1 to 65535", OutputControlPlaneEndpoint, o.Value)
		}
	}
	var domains []infrav1.FailureDomain
	if o, ok := outputs[OutputFailureDomains]; ok {
		if err := json.Unmarshal(o.Value, &domains); err != nil {
			var byName map[string]struct {
				ControlPlane *bool             `json:"controlPlane"`
				Attributes   map[string]string `json:"attributes"`
			}
			if err := json.Unmarshal(o.Value, &byName); err != nil {
				return nil, nil, fmt.Errorf("output %s: want a list of {name, controlPlane, attributes} or a map from name to {controlPlane, attributes}", OutputFailureDomains)
			}
			domains = nil
			for name, fd := range byName {
				domains = append(domains, infrav1.FailureDomain{Name: name, ControlPlane: fd.ControlPlane, Attributes: fd.Attributes})
			}
		}
		slices.SortFunc(domains, func(a, b infrav1.FailureDomain) int { return strings.Compare(a.Name, b.Name) })
		for _, fd := range domains {
			if fd.Name == "" {
				return nil, nil, fmt.Errorf("output %s: a failure domain has no name", OutputFailureDomains)
			}
		}
	}
	return endpoint, domains, nil
}
