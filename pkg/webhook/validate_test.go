package webhook

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

func validCluster() *infrav1.TerraformCluster {
	return &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "work", Namespace: "ns"},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module:    infrav1.Module{Source: "git::https://example.com/m.git//cluster?ref=v1"},
			Variables: []infrav1.Variable{{Name: "zones", Value: &runtime.RawExtension{Raw: []byte(`["a"]`)}}},
		}},
	}
}

// TestValidateTerraformCluster: each invalid case is refused with a message
// naming the field.
func TestValidateTerraformCluster(t *testing.T) {
	cases := []struct {
		name   string
		change func(*infrav1.TerraformCluster)
		old    func(*infrav1.TerraformCluster)
		want   string // "" = valid
	}{
		{name: "valid", change: func(*infrav1.TerraformCluster) {}},
		{name: "protect", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Protect = []string{"aws_db_instance.main", `module.db["a,b"].*`, "*"}
		}},
		{name: "protect with a blank pattern", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Protect = []string{"a.b", " "} },
			want: "spec.protect[1]: Invalid value: \" \": a resource address pattern has no leading or trailing space"},
		{name: "protect with a newline", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Protect = []string{"a.b\nc.d"} },
			want: "spec.protect[0]: Invalid value: \"a.b\\nc.d\": a resource address pattern holds only printable characters"},
		{name: "two module sources", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Module.Inline = "x" },
			want: "spec.module: Invalid value: \"2 sources\": exactly one of source, configMap, inline or catalogRef must be set"},
		{name: "no module source", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Module.Source = "" },
			want: "exactly one of source, configMap, inline or catalogRef"},
		{name: "white space around the source", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Module.Source = " ./m" },
			want: "spec.module.source: Invalid value: \" ./m\": must not start or end with white space"},
		{name: "configMap name", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Module = infrav1.Module{ConfigMap: &infrav1.ConfigMapModule{Name: "Bad_Name"}}
		}, want: "spec.module.configMap.name: Invalid value: \"Bad_Name\""},
		{name: "duplicate variable", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables = append(tc.Spec.Variables, tc.Spec.Variables[0])
		}, want: "spec.variables[1].name: Duplicate value: \"zones\""},
		{name: "bad variable name", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Variables[0].Name = "9lives" },
			want: "spec.variables[0].name: Invalid value: \"9lives\""},
		{name: "reserved variable name", change: func(tc *infrav1.TerraformCluster) { tc.Spec.Variables[0].Name = "captf_name" },
			want: "spec.variables[0].name: Invalid value: \"captf_name\": names starting with captf_ are reserved"},
		{name: "value and valueFrom", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables[0].ValueFrom = &infrav1.VariableSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
		}, want: "spec.variables[0]: Invalid value: \"zones\": exactly one of value or valueFrom must be set"},
		{name: "valueFrom with both refs", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables[0].Value = nil
			tc.Spec.Variables[0].ValueFrom = &infrav1.VariableSource{
				SecretKeyRef:    &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"},
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "k"},
			}
		}, want: "spec.variables[0].valueFrom: Invalid value: \"\": exactly one of secretKeyRef or configMapKeyRef"},
		{name: "valueFrom bad key", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables[0].Value = nil
			tc.Spec.Variables[0].ValueFrom = &infrav1.VariableSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "a/b"}}
		}, want: "spec.variables[0].valueFrom.secretKeyRef.key: Invalid value: \"a/b\""},
		{name: "valueFrom optional", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Variables[0].Value = nil
			tc.Spec.Variables[0].ValueFrom = &infrav1.VariableSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Key: "k", Optional: ptrTo(true)}}
		}, want: "spec.variables[0].valueFrom.configMapKeyRef.optional: Forbidden"},
		{name: "request above limit", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{Resources: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			}}
		}, want: "spec.jobs.resources.requests[memory]: Invalid value: \"4Gi\": must be less than or equal to the limit 2Gi"},
		{name: "deadline zero", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{ActiveDeadlineSeconds: ptrTo[int64](0)}
		}, want: "spec.jobs.activeDeadlineSeconds: Invalid value: 0: must be greater than 0"},
		{name: "lock timeout beyond the default deadline", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{LockTimeout: &metav1.Duration{Duration: 2 * time.Hour}}
		}, want: "spec.jobs.lockTimeout: Invalid value: \"2h0m0s\": must be shorter than the Job deadline (1h0m0s)"},
		{name: "negative history", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{FailedJobsHistoryLimit: ptrTo[int32](-1)}
		}, want: "spec.jobs.failedJobsHistoryLimit: Invalid value: -1"},
		{name: "reserved env", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "TF_DATA_DIR", Value: "/x"}}}
		}, want: "spec.jobs.env[0].name: Forbidden: is set by the runner"},
		{name: "a plan ServiceAccount that is no name", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{ServiceAccountName: "cloud", PlanServiceAccountName: "Read_Only"}
		}, want: "spec.jobs.planServiceAccountName: Invalid value: \"Read_Only\""},
		{name: "env that makes git run a command", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "GIT_SSH_COMMAND", Value: "sh -c evil"}}}
		}, want: "spec.jobs.env[0].name: Forbidden: it can make git or terraform run a command"},
		{name: "PATH into the module's files", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Jobs = &infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "PATH", Value: "/workspace:/usr/bin"}}}
		}, want: "spec.jobs.env[0].name: Forbidden: it points into the working directory"},
		{name: "defaults validated too", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Defaults = &infrav1.ClusterDefaults{Jobs: &infrav1.JobPolicy{SuccessfulJobsHistoryLimit: ptrTo[int32](-2)}}
		}, want: "spec.defaults.jobs.successfulJobsHistoryLimit: Invalid value: -2"},
		{name: "drift interval too short", change: func(tc *infrav1.TerraformCluster) {
			tc.Spec.Drift = &infrav1.DriftPolicy{Interval: &metav1.Duration{Duration: time.Second}}
		}, want: "spec.drift.interval: Invalid value: \"1s\": must be between 10s and 168h0m0s"},
		{name: "approval hash malformed", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationApprovePlan: "yes"}
		}, want: "metadata.annotations[captf.io/approve-plan]: Invalid value: \"yes\": must be a plan hash"},
		{name: "approval hash well formed", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationApproveDestructivePlan: "0123456789abcdef"}
		}},
		{name: "module approval malformed", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationApproveModule: "0123456789abcdef"}
		}, want: "metadata.annotations[captf.io/approve-module]: Invalid value: \"0123456789abcdef\": must be a module digest"},
		{name: "module approval well formed", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationApproveModule: "sha256:" + strings.Repeat("0a", 32)}
		}},
		{name: "restore of another object's backup", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: "tfc-other-backup-20261130-010203"}
		}, want: "metadata.annotations[captf.io/restore-state]: Invalid value: \"tfc-other-backup-20261130-010203\": must name one of this object's state backups (tfc-work-backup-<yyyymmdd-hhmmss> or tfc-work-errored-<yyyymmdd-hhmmss>)"},
		{name: "restore of own backup", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: "tfc-work-backup-20261130-010203-1"}
		}},
		{name: "restore of its rescued state", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationRestoreState: "tfc-work-errored-20261130-010203"}
		}},
		{name: "abandon value", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "yes"}
		}, want: "metadata.annotations[captf.io/abandon-infrastructure]: Invalid value: \"yes\": must be \"true\" or \"false\""},
		{name: "adopt value", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationAdoptState: strings.Repeat("u", 2000)}
		}, want: "metadata.annotations[captf.io/adopt-state]: Invalid value: \"uuuu"},
		{name: "adopt value well formed", change: func(tc *infrav1.TerraformCluster) {
			tc.Annotations = map[string]string{infrav1.AnnotationAdoptState: "0f3c1b2a-9d8e-4f7a-b6c5-1234567890ab"}
		}},
		{name: "endpoint changed once set",
			old: func(tc *infrav1.TerraformCluster) {
				tc.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "a", Port: 6443}
			},
			change: func(tc *infrav1.TerraformCluster) {
				tc.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "b", Port: 6443}
			},
			want: "spec.controlPlaneEndpoint: Forbidden: is immutable once set"},
		{name: "endpoint set the first time",
			old: func(tc *infrav1.TerraformCluster) {},
			change: func(tc *infrav1.TerraformCluster) {
				tc.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "b", Port: 6443}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validCluster()
			tc.change(obj)
			var old *infrav1.TerraformCluster
			if tc.old != nil {
				old = validCluster()
				tc.old(old)
			}
			checkErrors(t, ValidateTerraformCluster(obj, old).ToAggregate(), tc.want)
		})
	}
}

func checkErrors(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("refused a valid object: %v", err)
	case want != "" && err == nil:
		t.Errorf("admitted, want %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("got %q, want it to contain %q", err, want)
	}
}

// TestValidateTemplatesImmutable: a template's spec does not change, except
// in ClusterClass's dry runs.
func TestValidateTemplatesImmutable(t *testing.T) {
	old := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	old.Spec.Template.Spec.Module.Inline = "a"
	changed := old.DeepCopy()
	changed.Spec.Template.Spec.Module.Inline = "b"
	checkErrors(t, ValidateTerraformMachineTemplate(changed, nil).ToAggregate(), "")
	checkErrors(t, ValidateTerraformMachineTemplate(changed, old).ToAggregate(), "spec: Forbidden: a template is immutable")
	changed.Annotations = map[string]string{capi.DryRunAnnotation: ""}
	checkErrors(t, ValidateTerraformMachineTemplate(changed, old).ToAggregate(), "")
	relabelled := old.DeepCopy()
	relabelled.Labels = map[string]string{"a": "b"}
	checkErrors(t, ValidateTerraformMachineTemplate(relabelled, old).ToAggregate(), "")
	withID := old.DeepCopy()
	withID.Spec.Template.Spec.ProviderID = "local:///x"
	checkErrors(t, ValidateTerraformMachineTemplate(withID, nil).ToAggregate(), "spec.template.spec.providerID: Forbidden")

	oldP := &infrav1.TerraformMachinePoolTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	oldP.Spec.Template.Spec.Module.Inline = "a"
	changedP := oldP.DeepCopy()
	changedP.Spec.Template.Spec.Module.Inline = "b"
	checkErrors(t, ValidateTerraformMachinePoolTemplate(changedP, nil).ToAggregate(), "")
	checkErrors(t, ValidateTerraformMachinePoolTemplate(changedP, oldP).ToAggregate(), "spec: Forbidden: a template is immutable")
	changedP.Annotations = map[string]string{capi.DryRunAnnotation: ""}
	checkErrors(t, ValidateTerraformMachinePoolTemplate(changedP, oldP).ToAggregate(), "")
	withIDs := oldP.DeepCopy()
	withIDs.Spec.Template.Spec.ProviderIDList = []string{"local:///x"}
	checkErrors(t, ValidateTerraformMachinePoolTemplate(withIDs, nil).ToAggregate(), "spec.template.spec.providerIDList: Forbidden")
	noModule := oldP.DeepCopy()
	noModule.Spec.Template.Spec.Module.Inline = ""
	checkErrors(t, ValidateTerraformMachinePoolTemplate(noModule, nil).ToAggregate(), "spec.template.spec.module")

	oldC := &infrav1.TerraformClusterTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	oldC.Spec.Template.Spec.Module.Inline = "a"
	changedC := oldC.DeepCopy()
	changedC.Spec.Template.Spec.ApprovalPolicy = infrav1.ApprovalPolicyManual
	checkErrors(t, ValidateTerraformClusterTemplate(changedC, oldC).ToAggregate(), "spec: Forbidden: a template is immutable")
	badC := oldC.DeepCopy()
	badC.Spec.Template.Spec.Module.Source = "x"
	checkErrors(t, ValidateTerraformClusterTemplate(badC, nil).ToAggregate(), "spec.template.spec.module: Invalid value")
}

func TestValidateMachineAndPool(t *testing.T) {
	m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	m.Spec.Module.Inline = "a"
	checkErrors(t, ValidateTerraformMachine(m, nil).ToAggregate(), "")
	gated := m.DeepCopy()
	gated.Annotations = map[string]string{infrav1.AnnotationApprovePlan: "0123456789abcdef"}
	checkErrors(t, ValidateTerraformMachine(gated, nil).ToAggregate(), "metadata.annotations[captf.io/approve-plan]: Forbidden: only a TerraformCluster's plans wait for approval")
	gated.Annotations = map[string]string{infrav1.AnnotationApproveModule: "sha256:" + strings.Repeat("0a", 32)}
	checkErrors(t, ValidateTerraformMachine(gated, nil).ToAggregate(), "metadata.annotations[captf.io/approve-module]: Forbidden: only a TerraformCluster's module code waits for approval")
	badID := m.DeepCopy()
	badID.Spec.ProviderID = "no-scheme"
	checkErrors(t, ValidateTerraformMachine(badID, nil).ToAggregate(), "spec.providerID: Invalid value: \"no-scheme\": must look like <provider>://<id>")
	set := m.DeepCopy()
	set.Spec.ProviderID = "local:///a"
	moved := set.DeepCopy()
	moved.Spec.ProviderID = "local:///b"
	checkErrors(t, ValidateTerraformMachine(moved, set).ToAggregate(), "spec.providerID: Forbidden: is immutable once set")
	// An ID with a line of its own is refused when it is set, and kept
	// on the updates of a machine that held it before the rule.
	forged := m.DeepCopy()
	forged.Spec.ProviderID = "local:///a\n└─Machine/forged"
	checkErrors(t, ValidateTerraformMachine(forged, nil).ToAggregate(), "must not hold spaces or control characters")
	relabelled := forged.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	checkErrors(t, ValidateTerraformMachine(relabelled, forged).ToAggregate(), "")

	p := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	p.Spec.Module.Inline = "a"
	p.Spec.ProviderIDList = []string{"local:///a", "local:///a"}
	checkErrors(t, ValidateTerraformMachinePool(p, nil).ToAggregate(), "spec.providerIDList[1]: Duplicate value: \"local:///a\"")
	p.Spec.ProviderIDList = []string{"local:///a", "local:///b"}
	p.Spec.Drift = &infrav1.DriftPolicy{Remediation: "Now"}
	checkErrors(t, ValidateTerraformMachinePool(p, nil).ToAggregate(), "spec.drift.remediation: Unsupported value: \"Now\"")
}

// TestInlineBytesBounded (issue 50, item 4): what an object holds inline
// is bounded (the manager caches every object); larger values come from a
// Secret or ConfigMap, and the refusal says so without the values.
func TestInlineBytesBounded(t *testing.T) {
	value := func(n int) *runtime.RawExtension {
		return &runtime.RawExtension{Raw: []byte(strconv.Quote(strings.Repeat("s", n-2)))}
	}
	m := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	m.Spec.Module.Inline = "a"
	m.Spec.Variables = []infrav1.Variable{{Name: "a", Value: value(MaxInlineBytes / 2)}, {Name: "b", Value: value(MaxInlineBytes / 2)}}
	checkErrors(t, ValidateTerraformMachine(m, nil).ToAggregate(), "")
	m.Spec.Jobs = &infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "E", Value: "x"}}}
	checkErrors(t, ValidateTerraformMachine(m, nil).ToAggregate(), fmt.Sprintf("spec.variables: Forbidden: the values set inline (variables and jobs.env) take %d bytes, more than %d: keep large values in a Secret or ConfigMap (valueFrom)", MaxInlineBytes+1, MaxInlineBytes))
	// Stored before the bound: it keeps working while it does not grow.
	grown := m.DeepCopy()
	grown.Spec.Jobs.Env[0].Value = "xx"
	checkErrors(t, ValidateTerraformMachine(grown, m).ToAggregate(), "spec.variables: Forbidden: the values set inline")
	labelled := m.DeepCopy()
	labelled.Labels = map[string]string{"team": "a"}
	checkErrors(t, ValidateTerraformMachine(labelled, m).ToAggregate(), "")
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	tc.Spec.Module.Inline = "a"
	tc.Spec.Defaults = &infrav1.ClusterDefaults{Jobs: &infrav1.JobPolicy{Env: []corev1.EnvVar{{Name: "E", Value: strings.Repeat("x", MaxInlineBytes+1)}}}}
	checkErrors(t, ValidateTerraformCluster(tc, nil).ToAggregate(), "spec.defaults.jobs.env: Forbidden: the values set inline take 65537 bytes")
}

func ptrTo[T any](v T) *T { return &v }
