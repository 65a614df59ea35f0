package runner

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/planpolicy"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/statestore"
)

// fakeTerraform writes a terraform that records each invocation, in order,
// in the file it returns; its plan is plan, its outputs are {}, and its
// apply fails when applyFails.
func fakeTerraform(t *testing.T, plan *tfjson.Plan, applyFails bool) (tf, invocations string) {
	t.Helper()
	dir := t.TempDir()
	planFile, invocations := filepath.Join(dir, "plan.json"), filepath.Join(dir, "invocations")
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(planFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	apply := "true"
	if applyFails {
		apply = `echo "Error: creating instance: quota exceeded" >&2; exit 1`
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$1" >> %q
case "$1" in
plan) cp %q captf.tfplan; echo "Terraform will perform the following actions: $CAPTF_FAKE_PLAN_SAYS" ;;
show) cat captf.tfplan; if [ -n "$CAPTF_FAKE_SWAP" ]; then echo '{"another":"plan"}' > captf.tfplan; fi ;;
output) echo '{"id":{"value":"from terraform output","type":"string"}}' ;;
apply) %s ;;
esac
`, invocations, planFile, apply)
	tf = filepath.Join(dir, "terraform")
	if err := os.WriteFile(tf, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return tf, invocations
}

// testModule is the inline module of the runs TestRunStages makes.
const testModule = `resource "terraform_data" "vm" {}`

// testModuleDigest is the digest of testModule's code.
func testModuleDigest(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(testModule), 0o644); err != nil {
		t.Fatal(err)
	}
	code, err := moduleCode(dir)
	if err != nil {
		t.Fatal(err)
	}
	return code.Digest
}

// A plan that destroys one resource, and its hash made by testModule.
func destroyPlan(t *testing.T) (*tfjson.Plan, string) {
	t.Helper()
	p := &tfjson.Plan{FormatVersion: "1.2", ResourceChanges: []*tfjson.ResourceChange{{Address: "terraform_data.vm", Type: "terraform_data", Name: "vm",
		Change: &tfjson.Change{Actions: tfjson.Actions{tfjson.ActionDelete}, Before: map[string]any{"id": "i-1"}}}}}
	s, err := run.SummarizePlan(p, nil, testModuleDigest(t))
	if err != nil {
		t.Fatal(err)
	}
	return p, s.Hash
}

// steppingClock moves a second each time it is read.
type steppingClock struct{ now time.Time }

func (c *steppingClock) Now() time.Time {
	c.now = c.now.Add(time.Second)
	return c.now
}

func (c *steppingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// plainState is a state as terraform writes it, with an output and a
// sensitive one.
const plainState = `{"version":4,"serial":1,"outputs":{"id":{"value":"i-1","type":"string"},"password":{"value":"s3cret","type":"string","sensitive":true}}}`

// TestRunStages: what a run does, stage by stage, as terraform and the API
// see it: which terraform commands it starts, in order, what it reports,
// and what it leaves in the API (the applied mark, the durable inputs).
func TestRunStages(t *testing.T) {
	plan, hash := destroyPlan(t)
	tests := map[string]struct {
		op         infrav1.Operation
		gate       infrav1.ApprovalPolicy
		approved   string
		applyFails bool
		swap       bool     // a lingering program rewrites the plan file after show
		want       []string // terraform's commands
		outcome    string
		stage      string
		reason     string
		// applied: the state is marked applied and the durable inputs kept.
		applied bool
		// state is the state before the run (plainState when empty); id
		// the output the result reports, when the run applies.
		state, id string
		protect   []string
		modules   []string // approved module digests
		// rules: plan policy rules of the Job, one per action: the rule
		// of an action matches the plan (a destroy of terraform_data.vm).
		rules []infrav1.PlanAction
	}{
		"a plan policy denies: no approval applies it": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash, rules: []infrav1.PlanAction{infrav1.PlanActionDeny, infrav1.PlanActionAllow},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeBlocked, stage: run.StageGate, reason: run.ReasonPlanDenied,
		},
		"a plan policy allows: no approval needed": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyManual, rules: []infrav1.PlanAction{infrav1.PlanActionAllow},
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"a plan policy requires an approval": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, rules: []infrav1.PlanAction{infrav1.PlanActionRequireApproval, infrav1.PlanActionAllow},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeBlocked, stage: run.StageGate,
		},
		"a plan policy requires an approval, which is given": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash, rules: []infrav1.PlanAction{infrav1.PlanActionRequireApproval},
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"a plan policy requires an approval of an object that takes none (no gate: a machine's): denied": {
			op: infrav1.OperationApply, rules: []infrav1.PlanAction{infrav1.PlanActionRequireApproval},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeBlocked, stage: run.StageGate, reason: run.ReasonPlanDenied,
		},
		"a plan policy allows, and spec.protect still holds": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, protect: []string{"terraform_data.vm"}, rules: []infrav1.PlanAction{infrav1.PlanActionAllow},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeFailed, stage: run.StageGate, reason: run.ReasonProtectedResourceChange,
		},
		"a drift check is not judged": {
			op: infrav1.OperationDrift, rules: []infrav1.PlanAction{infrav1.PlanActionDeny},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeSucceeded, stage: run.StagePlan,
		},
		"changed module code stops before terraform plans": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash, modules: []string{"sha256:applied-before"},
			want: []string{"init"}, outcome: run.OutcomeBlocked, stage: run.StageModule, reason: run.ReasonModuleAwaitingApproval,
		},
		"a drift check of changed code fails before terraform plans": {
			op: infrav1.OperationDrift, modules: []string{"sha256:applied-before"},
			want: []string{"init"}, outcome: run.OutcomeFailed, stage: run.StageModule, reason: run.ReasonModuleAwaitingApproval,
		},
		"a destroy of changed code fails before terraform plans": {
			op: infrav1.OperationDestroy, modules: []string{"sha256:applied-before"},
			want: []string{"init"}, outcome: run.OutcomeFailed, stage: run.StageModule, reason: run.ReasonModuleAwaitingApproval,
		},
		"approved module code runs": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash, modules: []string{"sha256:applied-before", "$digest"},
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"a protected change fails, whatever the approvals": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash, protect: []string{"terraform_data.vm"},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeFailed, stage: run.StageGate, reason: run.ReasonProtectedResourceChange,
		},
		"a destroy of what is protected fails": {
			op: infrav1.OperationDestroy, protect: []string{"terraform_data.*"},
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeFailed, stage: run.StageGate, reason: run.ReasonProtectedResourceChange,
		},
		"a pattern that covers nothing the plan destroys": {
			op: infrav1.OperationApply, protect: []string{"terraform_data.other", "module.vm"},
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"a destructive plan without approval waits": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive,
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeBlocked, stage: run.StageGate,
		},
		"an approval of another plan is none": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: "0000000000000000",
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeBlocked, stage: run.StageGate,
		},
		"the approved plan applies": {
			op: infrav1.OperationApply, gate: infrav1.ApprovalPolicyDestructive, approved: hash,
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"no gate: every plan applies, its outputs read from the state": {
			op:   infrav1.OperationApply,
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeSucceeded, applied: true, id: `"i-1"`,
		},
		"an encrypted state: the outputs are terraform output's": {
			op: infrav1.OperationApply, state: `{"serial":1,"encrypted_data":"c2VjcmV0","encryption_version":"v0"}`,
			want: []string{"init", "plan", "show", "apply", "output"}, outcome: run.OutcomeSucceeded, applied: true, id: `"from terraform output"`,
		},
		"a drift check only plans": {
			op: infrav1.OperationDrift, gate: infrav1.ApprovalPolicyManual,
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeSucceeded, stage: run.StagePlan,
		},
		"a plan file changed after terraform wrote it is not applied": {
			op: infrav1.OperationApply, swap: true,
			want: []string{"init", "plan", "show"}, outcome: run.OutcomeFailed, stage: run.StageGate,
		},
		"a failed apply reports its stage and keeps no inputs": {
			op: infrav1.OperationApply, applyFails: true,
			want: []string{"init", "plan", "show", "apply"}, outcome: run.OutcomeFailed, stage: string(infrav1.OperationApply),
			reason: ReasonCloudQuotaExceeded, // the fake's error is a quota's
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tf, invocations := fakeTerraform(t, plan, tc.applyFails)
			if tc.swap {
				t.Setenv("CAPTF_FAKE_SWAP", "1")
			}
			obj := names.Object{Kind: "tfc", Name: "c"}
			job := "tfc-c-apply-0123456789abcdef-0"
			module, _ := json.Marshal(run.Module{Inline: testModule})
			modules := slices.Clone(tc.modules)
			if i := slices.Index(modules, "$digest"); i >= 0 {
				modules[i] = testModuleDigest(t)
			}
			inputs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.RunInputs(job), Namespace: "ns"},
				Data: map[string][]byte{run.KeyModule: module, run.KeyVariables: []byte(`{}`)}}
			client := fake.NewClientset(inputs)
			// Applied before: the run finds a state.
			if err := (&statestore.StateStore{Client: client, Namespace: "ns", Object: obj}).Write(ctx, []byte(cmp.Or(tc.state, plainState))); err != nil {
				t.Fatal(err)
			}
			before, err := client.CoreV1().Secrets("ns").Get(ctx, obj.State(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var policy *planpolicy.Input
			for _, a := range tc.rules {
				if policy == nil {
					policy = &planpolicy.Input{Object: planpolicy.Object{Kind: "TerraformCluster", Namespace: "ns", Name: "c"}}
				}
				policy.Rules = append(policy.Rules, planpolicy.Rule{Policy: "p", PlanRule: infrav1.PlanRule{Name: strings.ToLower(string(a)), Action: a,
					Expression: `plan.resource_changes.exists(r, r.address == "terraform_data.vm" && "delete" in r.change.actions)`, Message: "m"}})
			}
			r := &Runner{Client: client, Config: Config{Pod: job + "-pod", PodUID: "pod-uid", Spec: run.Spec{
				Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "c", ObjectUID: "uid",
				Operation: tc.op, Job: job, Terraform: tf, WorkDir: t.TempDir(), LockTimeout: time.Minute, ExpectState: true,
				Gate: tc.gate, ApprovedPlan: tc.approved, ApprovedDestructivePlan: tc.approved, Protect: tc.protect, ApprovedModules: modules,
				PlanPolicy: policy}},
				Clock: &steppingClock{}}
			res, err := r.Run(ctx)
			if (err != nil) != (tc.outcome == run.OutcomeFailed) {
				t.Fatalf("Run: %v", err)
			}
			got, _ := os.ReadFile(invocations)
			if cmds := strings.Fields(string(got)); !slices.Equal(cmds, tc.want) {
				t.Errorf("terraform ran %q, want %q", cmds, tc.want)
			}
			// Each command reads the clock as it starts and ends: a second.
			if took, n := r.TerraformTime(); n != len(tc.want) || took != time.Duration(n)*time.Second {
				t.Errorf("terraform time %s in %d commands, want %d s in %d", took, n, len(tc.want), len(tc.want))
			}
			if res.Reason != tc.reason {
				t.Errorf("reason %q, want %q", res.Reason, tc.reason)
			}
			if res.Outcome != tc.outcome || res.Stage != tc.stage {
				t.Errorf("outcome %s at stage %q, want %s at %q", res.Outcome, res.Stage, tc.outcome, tc.stage)
			}
			if got := string(res.Outputs["id"].Value); got != tc.id || (tc.id == `"i-1"` && !res.Outputs["password"].Sensitive) {
				t.Errorf("outputs %v, want id %s and password sensitive", res.Outputs, tc.id)
			}
			planned := tc.stage != run.StageModule
			if planned && (res.Plan == nil || res.Plan.Hash != hash) || !planned && res.Plan != nil {
				t.Errorf("the result's plan %+v, want hash %s (planned: %v)", res.Plan, hash, planned)
			}
			if res.ModuleDigest() != testModuleDigest(t) {
				t.Errorf("the result's module %+v, want digest %s", res.Module, testModuleDigest(t))
			}
			// What the manager reads: the result, and the Lease released.
			secrets := client.CoreV1().Secrets("ns")
			written, err := secrets.Get(ctx, obj.Result(job), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("no result Secret: %v", err)
			}
			var reported run.Result
			if err := json.Unmarshal(written.Data[run.KeyResult], &reported); err != nil || reported.Outcome != tc.outcome {
				t.Errorf("result Secret says %+v (%v), want %s", reported, err, tc.outcome)
			}
			// What people read: the run's record, with what it planned.
			rec, err := client.CoreV1().ConfigMaps("ns").Get(ctx, obj.RunRecord(job, "pod-uid"), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("no run record: %v", err)
			}
			var recorded run.Record
			if err := json.Unmarshal([]byte(rec.Data[run.KeyRun]), &recorded); err != nil || recorded.Outcome != tc.outcome || planned && (recorded.Plan == nil || recorded.Plan.Hash != hash) || recorded.Reason != tc.reason ||
				recorded.Module == nil || recorded.Module.Files["main.tf"] == "" {
				t.Errorf("run record says %+v (%v), want %s of plan %s (reason %q), the module's main.tf", recorded, err, tc.outcome, hash, tc.reason)
			}
			if planned && (!strings.Contains(rec.Data[run.KeyPlanText], "Terraform will perform") || !strings.Contains(rec.Data[run.KeyLog], "Terraform will perform") || rec.BinaryData[run.KeyPlanJSON] == nil) {
				t.Errorf("run record keeps plan %q, log %q, JSON %d bytes", rec.Data[run.KeyPlanText], rec.Data[run.KeyLog], len(rec.BinaryData[run.KeyPlanJSON]))
			}
			if reported.Record != rec.Name || reported.RecordDigest != run.RecordDigest(rec.Data, rec.BinaryData) || rec.Immutable == nil || !*rec.Immutable {
				t.Errorf("the result names record %q digest %s; want %s, digest %s, immutable (%v)", reported.Record, reported.RecordDigest, rec.Name, run.RecordDigest(rec.Data, rec.BinaryData), rec.Immutable)
			}
			if rec.Labels[names.LabelRunRecord] != "true" || rec.Labels[names.LabelOutcome] != tc.outcome || rec.Labels[names.LabelOperation] != string(tc.op) || rec.OwnerReferences[0].UID != "uid" {
				t.Errorf("run record's labels %v, owners %v", rec.Labels, rec.OwnerReferences)
			}
			lease, err := client.CoordinationV1().Leases("ns").Get(ctx, obj.Lock(), metav1.GetOptions{})
			if err != nil || lease.Spec.HolderIdentity != nil {
				t.Errorf("the lock after the run: %v, %v; want released", lease, err)
			}
			if _, err := secrets.Get(ctx, obj.RunInputs(job), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("the run's inputs after the run: %v, want deleted", err)
			}
			_, err = secrets.Get(ctx, obj.DurableInputs(), metav1.GetOptions{})
			if kept := err == nil; kept != tc.applied {
				t.Errorf("durable inputs kept: %v, want %v", kept, tc.applied)
			}
			head, err := secrets.Get(ctx, obj.State(), metav1.GetOptions{})
			marked := err == nil && head.Annotations[statestore.AnnotationApplied] == "true"
			if marked != tc.applied {
				t.Errorf("state marked applied: %v, want %v", marked, tc.applied)
			}
			// A drift check, and an apply whose plan waits or is refused,
			// leave the state Secret as it was: an apply claims it only
			// once its plan may apply. A destroy never waits.
			claims := tc.op == infrav1.OperationDestroy || slices.Contains(tc.want, "apply")
			if claimed := err == nil && head.Annotations[statestore.AnnotationHolder] == "pod-uid"; claimed != claims {
				t.Errorf("state claimed by the run: %v, want %v", claimed, claims)
			}
			if unchanged := err == nil && reflect.DeepEqual(head, before); unchanged == claims {
				t.Errorf("the state Secret unchanged by the run: %v, want %v", unchanged, !claims)
			}
		})
	}
}

// TestProviderInstallation: with a mirror, terraform is told to install
// the providers the mirror holds from it, and only the others from their
// registries; a mirror with no provider is an error, not a silent
// download of everything.
func TestProviderInstallation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	t.Setenv("TF_CLI_CONFIG_FILE", filepath.Join(t.TempDir(), "none")) // not this machine's
	mirror := t.TempDir()
	for _, p := range []string{"captf.io/captf/localcloud/0.1.0/linux_amd64", "registry.opentofu.org/hashicorp/aws",
		"usr/share/${oops}", ".hidden/ns/type", "etc/ssl/certs"} { // not providers, as an image FROM a distribution has them
		if err := os.MkdirAll(filepath.Join(mirror, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runner{Config: Config{Spec: run.Spec{WorkDir: t.TempDir(), ProviderMirror: mirror}}}
	env, err := r.providerInstallation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(r.Config.WorkDir, cliConfigFile)
	if !slices.Contains(env, "TF_CLI_CONFIG_FILE="+path) {
		t.Fatalf("terraform's environment does not name the CLI configuration: %q", env)
	}
	// init -from-module fills only a directory with nothing but .terraform.
	if entries, _ := os.ReadDir(r.Config.WorkDir); len(entries) != 1 || entries[0].Name() != ".terraform" {
		t.Errorf("the working directory holds %v, want only .terraform", entries)
	}
	config, _ := os.ReadFile(path)
	list := `["captf.io/captf/localcloud", "registry.opentofu.org/hashicorp/aws"]`
	for _, want := range []string{`path    = "` + mirror + `"`, "include = " + list, "exclude = " + list} {
		if !strings.Contains(string(config), want) {
			t.Errorf("the CLI configuration lacks %s:\n%s", want, config)
		}
	}

	// The pod's own CLI configuration is kept, unless it decides the
	// installation itself.
	own := filepath.Join(t.TempDir(), "own.tfrc")
	t.Setenv("TF_CLI_CONFIG_FILE", own)
	if err := os.WriteFile(own, []byte(`credentials "registry.example" { token = "x" }`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.providerInstallation(ctx); err != nil {
		t.Fatal(err)
	}
	if config, _ := os.ReadFile(path); !strings.Contains(string(config), `credentials "registry.example"`) || !strings.Contains(string(config), "filesystem_mirror") {
		t.Errorf("the pod's CLI configuration is not kept beside the mirror's:\n%s", config)
	}
	if err := os.WriteFile(own, []byte(`provider_installation { direct {} }`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.providerInstallation(ctx); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Errorf("a pod CLI configuration with its own provider_installation: %v, want an error", err)
	}
	t.Setenv("TF_CLI_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))

	r = &Runner{Config: Config{Spec: run.Spec{WorkDir: t.TempDir(), ProviderMirror: t.TempDir()}}}
	if _, err := r.providerInstallation(ctx); err == nil || !strings.Contains(err.Error(), "holds no provider") {
		t.Errorf("an empty mirror: %v, want an error", err)
	}
	r = &Runner{Config: Config{Spec: run.Spec{WorkDir: t.TempDir()}}}
	if env, err := r.providerInstallation(ctx); err != nil || slices.ContainsFunc(env, func(e string) bool {
		return strings.HasPrefix(e, "TF_CLI_CONFIG_FILE=") && strings.Contains(e, cliConfigFile)
	}) {
		t.Errorf("no mirror: %v, %v; want the pod's environment as it is", env, err)
	}
}

// TestCloudQuota: the clouds' quota errors are told apart from other
// failures.
func TestCloudQuota(t *testing.T) {
	for msg, want := range map[string]string{
		"Error: creating instance \"vm-1\": QuotaExceeded: instance quota of 2 reached in account a (HTTP 403)": ReasonCloudQuotaExceeded,
		"api error VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit":       ReasonCloudQuotaExceeded,
		"Error 403: Quota 'CPUS' exceeded. Limit: 24.0 in region europe-west1., QUOTA_EXCEEDED":                 ReasonCloudQuotaExceeded,
		"Error: creating instance: exceeded the instance quota":                                                 ReasonCloudQuotaExceeded,
		"Error: Unsupported argument: An argument named \"quota\" is not expected here":                         "",
		"Error: timeout while waiting for state to become 'running'":                                            "",
		"api error RequestLimitExceeded: Request limit exceeded.":                                               "",
		"googleapi: Error 403: Rate Limit Exceeded, rateLimitExceeded":                                          "",
	} {
		if got := failureReason(&terraformError{command: "apply", err: errors.New("exit status 1"), message: msg}); got != want {
			t.Errorf("%q: reason %q, want %q", msg, got, want)
		}
	}
}

// TestQuotaOfTheNamespaceIsNotTheClouds: a ResourceQuota refusing the
// runner's own Secret is not the cloud's quota.
func TestQuotaOfTheNamespaceIsNotTheClouds(t *testing.T) {
	err := fmt.Errorf("saving the durable inputs: %w", errors.New(`secrets "x" is forbidden: exceeded quota: q, requested: count/secrets=1`))
	if got := failureReason(err); got != "" {
		t.Errorf("reason %q, want none", got)
	}
}

// TestCheckTerraform: the runner runs the image's terraform or tofu, never
// another program $CAPTF_TERRAFORM names (an envFrom the writer edits can
// set it) nor a file of the module.
func TestCheckTerraform(t *testing.T) {
	image, work := t.TempDir(), t.TempDir()
	for _, p := range []string{filepath.Join(image, "terraform"), filepath.Join(image, "tofu"), filepath.Join(work, "terraform")} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/bin/sh", filepath.Join(image, "terraform-sh")); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{ // path: the refusal ("" for none)
		filepath.Join(image, "terraform"):    "",
		filepath.Join(image, "tofu"):         "",
		"/bin/sh":                            "neither terraform nor tofu",
		filepath.Join(image, "terraform-sh"): "neither terraform nor tofu",
		filepath.Join(work, "terraform"):     "in the working directory",
	}
	for path, want := range tests {
		r := &Runner{Config: Config{Spec: run.Spec{Terraform: path, WorkDir: work}}}
		_, err := r.terraform()
		if (err == nil) != (want == "") || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// TestCommandEnvRunsNothing: an environment that would make git or
// terraform run a command of the writer's (an envFrom the webhook cannot
// see) fails the run before terraform starts, and says which variable.
func TestCommandEnvRunsNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	t.Setenv("GIT_SSH_COMMAND", "sh -c 'curl evil'")
	tf, invocations := fakeTerraform(t, &tfjson.Plan{}, false)
	obj := names.Object{Kind: "tfc", Name: "c"}
	job := "tfc-c-apply-0123456789abcdef-0"
	module, _ := json.Marshal(run.Module{Inline: testModule})
	inputs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: obj.RunInputs(job), Namespace: "ns"},
		Data: map[string][]byte{run.KeyModule: module, run.KeyVariables: []byte(`{}`)}}
	r := &Runner{Client: fake.NewClientset(inputs), Config: Config{Pod: job + "-pod", PodUID: "pod-uid", Spec: run.Spec{
		Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "c", ObjectUID: "uid",
		Operation: infrav1.OperationApply, Job: job, Terraform: tf, WorkDir: t.TempDir(), LockTimeout: time.Minute}},
		Clock: &steppingClock{}}
	res, err := r.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "GIT_SSH_COMMAND") || res.Outcome != run.OutcomeFailed {
		t.Errorf("Run: %v, outcome %s; want a failure naming GIT_SSH_COMMAND", err, res.Outcome)
	}
	if got, _ := os.ReadFile(invocations); len(got) != 0 {
		t.Errorf("terraform ran %q", got)
	}
}

// TestLingeringProgramsAreStopped: a program of the module's code that
// outlives the terraform command that started it (here, one that keeps
// sleeping, then acts) is stopped with the command: it would act while the
// runner goes on to apply.
func TestLingeringProgramsAreStopped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "acted")
	tf := filepath.Join(dir, "terraform")
	script := fmt.Sprintf("#!/bin/sh\n(sleep 1; touch %q) >/dev/null 2>&1 &\n", marker)
	if err := os.WriteFile(tf, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Clock: &steppingClock{}}
	if _, err := r.exec(ctx, tf, dir, nil, "plan"); err != nil {
		t.Fatal(err)
	}
	// Past the program's sleep: it never acted.
	time.Sleep(2 * time.Second)
	if _, err := os.Stat(marker); err == nil {
		t.Error("a program the command left running acted after it")
	}
}
