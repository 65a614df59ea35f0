package runnerjob

import (
	"flag"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

func TestEffectivePolicy(t *testing.T) {
	deadline, three := int64(600), int32(3)
	zero := int32(0)
	tests := map[string]struct {
		own, defaults *infrav1.JobPolicy
		check         func(Policy) string
	}{
		"CAPTF defaults": {check: func(p Policy) string {
			if p.ActiveDeadlineSeconds != 3600 || p.LockTimeout != 5*time.Minute || p.SuccessfulJobsHistoryLimit != 3 || p.FailedJobsHistoryLimit != 3 ||
				p.Resources.Requests.Cpu().String() != "250m" || p.Resources.Requests.Memory().String() != "512Mi" ||
				p.Resources.Limits.Memory().String() != "2Gi" || !p.Resources.Limits.Cpu().IsZero() || p.CleanDriftChecksKept != 0 {
				return "defaults are not 1h, 5m, 3+3 (no clean drift check), 250m/512Mi, 2Gi, no CPU limit"
			}
			return ""
		}},
		"a history limit set keeps clean drift checks too": {defaults: &infrav1.JobPolicy{SuccessfulJobsHistoryLimit: &three}, check: func(p Policy) string {
			if p.SuccessfulJobsHistoryLimit != 3 || p.CleanDriftChecksKept != 3 {
				return "the cluster's successfulJobsHistoryLimit did not keep clean drift checks"
			}
			return ""
		}},
		"cluster defaults apply": {defaults: &infrav1.JobPolicy{ActiveDeadlineSeconds: &deadline}, check: func(p Policy) string {
			if p.ActiveDeadlineSeconds != 600 || p.LockTimeout != 5*time.Minute {
				return "the cluster's deadline did not apply, or replaced other fields"
			}
			return ""
		}},
		"own values win, field by field": {
			defaults: &infrav1.JobPolicy{ActiveDeadlineSeconds: &deadline, FailedJobsHistoryLimit: &three},
			own:      &infrav1.JobPolicy{FailedJobsHistoryLimit: &zero, LockTimeout: &metav1.Duration{Duration: time.Minute}},
			check: func(p Policy) string {
				if p.ActiveDeadlineSeconds != 600 || p.FailedJobsHistoryLimit != 0 || p.LockTimeout != time.Minute {
					return "own values did not win over the cluster's, or the cluster's were lost"
				}
				return ""
			}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if msg := tc.check(EffectivePolicy(tc.own, tc.defaults)); msg != "" {
				t.Errorf("%s: %+v", msg, EffectivePolicy(tc.own, tc.defaults))
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{1: 10 * time.Second, 2: 20 * time.Second, 4: 80 * time.Second, 7: 10 * time.Minute, 30: 10 * time.Minute} {
		if got := Backoff(failures); got != want {
			t.Errorf("Backoff(%d) = %s, want %s", failures, got, want)
		}
	}
}

// TestObjectJobs: an object's Jobs are those its UID label names, in its
// namespace and controlled by it; a Job another tenant labels with the UID,
// in its own namespace or controlled by something else, is not one of them.
func TestObjectJobs(t *testing.T) {
	obj := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "a", UID: "u01"}}
	owner := func(uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: infrav1.SchemeGroupVersion.String(), Kind: "TerraformCluster", Name: "c", UID: uid, Controller: ptr(true)}}
	}
	job := func(ns, name string, refs []metav1.OwnerReference) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{names.LabelObjectUID: "u01"}, OwnerReferences: refs}}
	}
	// Another object's Job in the same index bucket (its UID starts alike),
	// and one it controls that names this object.
	sameBucket := job("a", "same-bucket", owner("u01b"))
	sameBucket.Labels[names.LabelObjectUID] = "u01b"
	mislabelled := job("a", "labelled-for-another", owner("u01"))
	mislabelled.Labels[names.LabelObjectUID] = "u01b"
	if uidBucket("u01") != uidBucket("u01b") {
		t.Fatal("u01 and u01b are not in one bucket")
	}
	index := cache.NewIndexer(cache.MetaNamespaceKeyFunc, Indexers)
	for _, j := range []*batchv1.Job{
		job("a", "own", owner("u01")),
		job("b", "other-namespace", owner("u01")),
		job("a", "other-owner", owner("u02")),
		job("a", "no-owner", nil),
		sameBucket, mislabelled,
	} {
		if err := index.Add(Trim(j)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, j := range OfObject(index, obj) {
		got = append(got, j.Namespace+"/"+j.Name)
	}
	if len(got) != 1 || got[0] != "a/own" {
		t.Errorf("the object's Jobs: %v, want [a/own]", got)
	}
}

// TestBuildJobTellsTheRunner: the container's args, read by the runner's
// own flags, say what the manager decided: the object, the operation, the
// Job, the gate and its approvals, the state's limits.
func TestBuildJobTellsTheRunner(t *testing.T) {
	owner := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "obj-uid"}}
	gvk := infrav1.SchemeGroupVersion.WithKind("TerraformCluster")
	policy := EffectivePolicy(nil, nil)
	policy.LockTimeout = 7 * time.Minute
	tests := map[string]struct {
		spec Spec
		want func(s *run.Spec)
	}{
		"an apply behind a gate": {
			spec: Spec{Operation: infrav1.OperationApply, InputsHash: "0123456789abcdef", Attempt: 2, Backups: 4, ExpectState: true, MaxStateBytes: 1 << 20,
				Gate: infrav1.ApprovalPolicyDestructive, ApprovedDestructivePlan: "1111111111111111"},
			want: func(s *run.Spec) {
				s.Operation, s.StateBackups, s.ExpectState, s.MaxStateBytes = infrav1.OperationApply, 4, true, 1<<20
				s.Gate, s.ApprovedDestructivePlan = infrav1.ApprovalPolicyDestructive, "1111111111111111"
			},
		},
		"an apply with a provider mirror": {
			spec: Spec{Operation: infrav1.OperationApply, InputsHash: "0123456789abcdef", ProviderMirrorImage: "registry.example/providers:1"},
			want: func(s *run.Spec) { s.Operation, s.ProviderMirror = infrav1.OperationApply, run.ProviderMirrorDir },
		},
		"a pattern that names the write key stays a pattern": {
			spec: Spec{Operation: infrav1.OperationDestroy, InputsHash: "0123456789abcdef", DurableOnly: true,
				Protect: []string{"$(" + run.EnvWriteKey + ")", "module.a[\"$$x\"]"}},
			want: func(s *run.Spec) {
				s.Operation, s.UseDurableInputs = infrav1.OperationDestroy, true
				s.Protect = []string{"$(" + run.EnvWriteKey + ")", "module.a[\"$$x\"]"}
			},
		},
		"a destroy with the durable inputs": {
			spec: Spec{Operation: infrav1.OperationDestroy, InputsHash: "0123456789abcdef", Backups: 5, DurableOnly: true, ExpectState: true},
			want: func(s *run.Spec) {
				s.Operation, s.StateBackups, s.UseDurableInputs, s.ExpectState = infrav1.OperationDestroy, 5, true, true
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.spec.Owner, tc.spec.OwnerGVK, tc.spec.Policy, tc.spec.Image = owner, gvk, policy, "captf:test"
			// A user's env of the same name (the webhook refuses it) does
			// not replace the Job's write key.
			tc.spec.WriteKey, tc.spec.Policy.Env = run.NewWriteKey(), []corev1.EnvVar{{Name: run.EnvWriteKey, Value: "chosen"}}
			job := Build(tc.spec)
			c := job.Spec.Template.Spec.Containers[0]
			if key, _ := run.WriteKeyOf(&job.Spec.Template.Spec); key != tc.spec.WriteKey || len(key) != 64 || c.Env[len(c.Env)-1].Name != run.EnvWriteKey {
				t.Errorf("the runner's write key %q (env %v), want the spec's, last", key, c.Env)
			}
			if len(c.Args) == 0 || c.Args[0] != "runner" {
				t.Fatalf("args %q: want the runner subcommand first", c.Args)
			}
			t.Setenv("POD_NAMESPACE", "elsewhere")
			fs := flag.NewFlagSet("runner", flag.ContinueOnError)
			var got run.Spec
			got.AddFlags(fs)
			// What the runner gets: the args as the kubelet expands them.
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = kubeletExpand(a, c.Env)
			}
			if err := fs.Parse(args[1:]); err != nil {
				t.Fatalf("the runner's flags refuse %q: %v", c.Args, err)
			}
			if err := got.Complete(); err != nil {
				t.Fatal(err)
			}
			want := run.Spec{Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "prod", ObjectUID: "obj-uid", ObjectAPIVersion: gvk.GroupVersion().String(),
				Job: job.Name, WorkDir: "/workspace", LockTimeout: 7 * time.Minute, MaxStateBytes: run.DefaultMaxStateBytes}
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the runner reads\n%+v, want\n%+v", got, want)
			}
			// The mirror the runner is told of is the image, read-only.
			var mounted bool
			for _, m := range c.VolumeMounts {
				if m.MountPath != run.ProviderMirrorDir {
					continue
				}
				for _, v := range job.Spec.Template.Spec.Volumes {
					mounted = mounted || (v.Name == m.Name && m.ReadOnly && v.Image != nil && v.Image.Reference == tc.spec.ProviderMirrorImage)
				}
			}
			if mounted != (tc.spec.ProviderMirrorImage != "") {
				t.Errorf("the mirror image mounted read-only at %s: %v, want %v", run.ProviderMirrorDir, mounted, tc.spec.ProviderMirrorImage != "")
			}
		})
	}
}

// TestEnvFromSecrets (issue 50, item 6): the runner is told which of its
// environment variables come from Secrets, to redact their values.
func TestEnvFromSecrets(t *testing.T) {
	fromSecret := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "k"}}
	fromConfigMap := &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "k"}}
	cases := []struct {
		name             string
		env              []corev1.EnvVar
		envFrom          []corev1.EnvFromSource
		sensitive, plain []string
	}{
		{"nothing from Secrets", []corev1.EnvVar{{Name: "REGION", Value: "x"}, {Name: "CM", ValueFrom: fromConfigMap}}, nil, nil, nil},
		{"a key of a Secret", []corev1.EnvVar{{Name: "REGION", Value: "x"}, {Name: "TOKEN", ValueFrom: fromSecret}}, nil, []string{"TOKEN"}, nil},
		{"a whole Secret, with a prefix", []corev1.EnvVar{{Name: "REGION", Value: "x"}},
			[]corev1.EnvFromSource{{Prefix: "AWS_", SecretRef: &corev1.SecretEnvSource{}}, {ConfigMapRef: &corev1.ConfigMapEnvSource{}}},
			[]string{"AWS_*"}, []string{"REGION"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sensitive, plain := envFromSecrets(tc.env, tc.envFrom)
			if !slices.Equal(sensitive, tc.sensitive) || !slices.Equal(plain, tc.plain) {
				t.Errorf("envFromSecrets = %q, %q; want %q, %q", sensitive, plain, tc.sensitive, tc.plain)
			}
		})
	}
	// As the Job tells it.
	s := Spec{Owner: &infrav1.TerraformCluster{}, OwnerGVK: infrav1.SchemeGroupVersion.WithKind("TerraformCluster"), Operation: infrav1.OperationApply}
	s.Policy.Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: fromSecret}}
	if args := runnerSpec(s, "j").Args(); !slices.Contains(args, `--sensitive-env=["TOKEN"]`) {
		t.Errorf("runner args %q name no sensitive env", args)
	}
}

// kubeletExpand expands a container's arg as the kubelet does: $$ is $, and
// $(NAME) the value of env NAME when the container has one.
func kubeletExpand(arg string, env []corev1.EnvVar) string {
	var b strings.Builder
	for i := 0; i < len(arg); i++ {
		switch {
		case arg[i] != '$' || i+1 == len(arg):
			b.WriteByte(arg[i])
		case arg[i+1] == '$':
			b.WriteByte('$')
			i++
		case arg[i+1] == '(':
			end := strings.IndexByte(arg[i:], ')')
			if end < 0 {
				b.WriteByte(arg[i])
				continue
			}
			name, value, found := arg[i+2:i+end], "", false
			for _, e := range env {
				if e.Name == name {
					value, found = e.Value, true
				}
			}
			if !found {
				b.WriteByte(arg[i])
				continue
			}
			b.WriteString(value)
			i += end
		default:
			b.WriteByte(arg[i])
		}
	}
	return b.String()
}
