package runnerjob

import (
	"cmp"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/planpolicy"
)

// ServiceAccountFor is the ServiceAccount a Job runs as, and the field
// that names it: a Job that only plans may run as a read-only identity of
// its own.
func ServiceAccountFor(jp infrav1.JobPolicy, onlyPlans bool) ServiceAccount {
	if onlyPlans && jp.PlanServiceAccountName != "" {
		return ServiceAccount{"spec.jobs.planServiceAccountName", jp.PlanServiceAccountName}
	}
	return ServiceAccount{"spec.jobs.serviceAccountName", cmp.Or(jp.ServiceAccountName, names.RunnerServiceAccount)}
}

// OnlyPlans tells whether a Job of op can change nothing in the cloud: a
// drift check, or an apply under Manual whose Job holds no approval and
// no plan policy rule that may allow a plan, so that its runner applies
// no plan that changes anything (it waits). Such a Job's module code
// needs no right to change the cloud.
func OnlyPlans(op infrav1.Operation, gate infrav1.ApprovalPolicy, approvedPlan, approvedDestructivePlan string, policy *planpolicy.Input) bool {
	return op == infrav1.OperationDrift ||
		op == infrav1.OperationApply && gate == infrav1.ApprovalPolicyManual && approvedPlan == "" && approvedDestructivePlan == "" &&
			(policy == nil || !planpolicy.MayAllow(policy.Rules))
}

// ServiceAccount is a runner ServiceAccount and the field that names it.
type ServiceAccount struct{ Field, Name string }
