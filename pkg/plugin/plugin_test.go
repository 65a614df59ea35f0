package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	core "k8s.io/client-go/testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/generated/clientset/versioned/fake"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/run"
)

// waiting is a TerraformCluster whose plan hash waits for the destructive
// approval.
func waiting(hash string) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", ResourceVersion: "7"}}
	tc.Status.LastPlan = &infrav1.PlanStatus{Hash: hash, Operation: infrav1.OperationApply}
	tc.Status.Conditions = []metav1.Condition{{Type: infrav1.ConditionDestructivePlanBlocked, Status: metav1.ConditionTrue, Reason: "AwaitingApproval"}}
	return tc
}

// TestApprove: the approval names exactly the plan shown, guarded by the
// object's resourceVersion; a plan that changed between the showing and
// the answer is approved by nobody, and a protected one never.
func TestApprove(t *testing.T) {
	tests := map[string]struct {
		// then is what the object is when the user has answered.
		then    *infrav1.TerraformCluster
		stdin   string
		wantErr string
		// patched is the patch sent, "" for none.
		patched string
	}{
		"yes": {then: waiting("1111"), stdin: "y\n",
			patched: `{"metadata":{"annotations":{"captf.io/approve-destructive-plan":"1111"},"resourceVersion":"7"}}`},
		"no":               {then: waiting("1111"), stdin: "\n", wantErr: "not approved"},
		"the plan changed": {then: waiting("2222"), stdin: "yes\n", wantErr: "the plan changed since it was shown (plan 2222 is the last one): nothing approved"},
		"nothing waits any more": {then: func() *infrav1.TerraformCluster {
			tc := waiting("1111")
			tc.Status.Conditions = nil
			return tc
		}(), stdin: "y\n", wantErr: "the plan changed since it was shown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(waiting("1111"))
			gets := 0
			client.PrependReactor("get", "terraformclusters", func(core.Action) (bool, runtime.Object, error) {
				gets++
				if gets == 1 {
					return true, waiting("1111"), nil
				}
				return true, tc.then, nil
			})
			var out bytes.Buffer
			e := &env{ctx: context.Background(), in: strings.NewReader(tc.stdin), out: &out, err: io.Discard, namespace: "ns",
				captf: client, kube: kubefake.NewSimpleClientset()}
			checkApproved(t, approveCommand.run(e, []string{"tfc/prod"}), tc.wantErr, client, tc.patched)
			if !strings.Contains(out.String(), "Plan 1111 of terraformclusters/prod") {
				t.Errorf("the plan was not shown before the question:\n%s", out.String())
			}
		})
	}
	t.Run("protected", func(t *testing.T) {
		tc := waiting("1111")
		tc.Status.Conditions[0].Reason = "ProtectedResourceChange"
		tc.Status.Conditions[0].Message = "Plan 1111 destroys, replaces or forgets db.main, which spec.protect covers"
		client := fake.NewSimpleClientset(tc)
		e := &env{ctx: context.Background(), in: strings.NewReader("y\n"), out: io.Discard, err: io.Discard, namespace: "ns", captf: client, kube: kubefake.NewSimpleClientset()}
		if err := approveCommand.run(e, []string{"tfc/prod"}); err == nil || !strings.Contains(err.Error(), "no approval applies this plan: Plan 1111 destroys") {
			t.Errorf("approve of a protected plan: %v", err)
		}
	})
}

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	ns := fs.String("n", "", "")
	yes := fs.Bool("yes", false, "")
	args, err := parseInterspersed(fs, []string{"tfc/prod", "-n", "team", "run-1", "--yes", "--", "-odd"})
	if err != nil || !slices.Equal(args, []string{"tfc/prod", "run-1", "-odd"}) || *ns != "team" || !*yes {
		t.Errorf("args %q, -n %q, --yes %v, err %v", args, *ns, *yes, err)
	}
}

// moduleWaits is a TerraformCluster whose new module code (digest next)
// waits for an approver; the code applied is digest "sha256:aa...".
func moduleWaits(next string) *infrav1.TerraformCluster {
	tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", ResourceVersion: "7", UID: "u1"}}
	tc.Status.AppliedModule = digestOf("a")
	tc.Status.Conditions = []metav1.Condition{{Type: infrav1.ConditionPlanAwaitingApproval, Status: metav1.ConditionTrue, Reason: run.ReasonModuleAwaitingApproval,
		Message: "The module's code changed: digest " + next + " is not the code applied (" + digestOf("a") + ")"}}
	return tc
}

func digestOf(c string) string { return "sha256:" + strings.Repeat(c, 64) }

// TestApproveModule: the plugin shows which files of the module changed
// (from the run records of the blocked run and of the applied one) and
// approves exactly the digest the manager says waits.
func TestApproveModule(t *testing.T) {
	recordCM := func(name, digest string, files map[string]string) *corev1.ConfigMap {
		b, _ := json.Marshal(run.Record{Job: name, Module: &run.ModuleCode{Digest: digest, Files: files}})
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-run", Namespace: "ns",
			Labels:          names.RecordLabels(names.ObjectOf("TerraformCluster", "prod")),
			OwnerReferences: []metav1.OwnerReference{{UID: "u1", Name: "prod"}}},
			Data: map[string]string{run.KeyRun: string(b)}}
	}
	tests := map[string]struct {
		then    *infrav1.TerraformCluster
		stdin   string
		wantErr string
		patched string
	}{
		"yes": {then: moduleWaits(digestOf("b")), stdin: "y\n",
			patched: `{"metadata":{"annotations":{"captf.io/approve-module":"` + digestOf("b") + `"},"resourceVersion":"7"}}`},
		"no":               {then: moduleWaits(digestOf("b")), stdin: "n\n", wantErr: "not approved"},
		"the code changed": {then: moduleWaits(digestOf("c")), stdin: "y\n", wantErr: "the module code waiting changed since it was shown"},
	}
	applied := recordCM("tfc-prod-apply-1", digestOf("a"), map[string]string{"main.tf": "1", "old.tf": "2", "same.tf": "3"})
	blocked := recordCM("tfc-prod-apply-2", digestOf("b"), map[string]string{"main.tf": "9", "new.tf": "4", "same.tf": "3"})
	// A writer's look-alike, newer, that says nothing changed but one file.
	forged := recordCM("tfc-prod-apply-3", digestOf("b"), map[string]string{"main.tf": "1", "old.tf": "2", "same.tf": "3"})
	vouch := func(tc *infrav1.TerraformCluster) *infrav1.TerraformCluster {
		tc.Status.AppliedRecord, tc.Status.AppliedRecordDigest = applied.Name, run.RecordDigest(applied.Data, applied.BinaryData)
		tc.Status.LastJobs = []infrav1.JobReference{{Operation: infrav1.OperationApply, Name: "tfc-prod-apply-2", Outcome: run.OutcomeBlocked,
			Record: blocked.Name, RecordDigest: run.RecordDigest(blocked.Data, blocked.BinaryData)}}
		return tc
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(vouch(moduleWaits(digestOf("b"))))
			gets := 0
			client.PrependReactor("get", "terraformclusters", func(core.Action) (bool, runtime.Object, error) {
				gets++
				if gets == 1 {
					return true, vouch(moduleWaits(digestOf("b"))), nil
				}
				return true, vouch(tc.then), nil
			})
			kube := kubefake.NewSimpleClientset(applied, blocked, forged)
			var out bytes.Buffer
			e := &env{ctx: context.Background(), in: strings.NewReader(tc.stdin), out: &out, err: io.Discard, namespace: "ns", captf: client, kube: kube}
			checkApproved(t, approveCommand.run(e, []string{"tfc/prod"}), tc.wantErr, client, tc.patched)
			for _, shown := range []string{"Module code " + digestOf("b"), "changed  main.tf", "added    new.tf", "removed  old.tf", "(1 unchanged)"} {
				if !strings.Contains(out.String(), shown) {
					t.Errorf("the output does not show %q:\n%s", shown, out.String())
				}
			}
		})
	}
	// A record changed since its run is not the run's account of the code.
	for _, edited := range []*corev1.ConfigMap{applied, blocked} {
		t.Run("the record changed: "+edited.Name, func(t *testing.T) {
			changed := edited.DeepCopy()
			changed.Data[run.KeyLog] = "edited"
			objects := []runtime.Object{changed, forged}
			for _, o := range []*corev1.ConfigMap{applied, blocked} {
				if o != edited {
					objects = append(objects, o)
				}
			}
			client := fake.NewSimpleClientset(vouch(moduleWaits(digestOf("b"))))
			var out bytes.Buffer
			e := &env{ctx: context.Background(), in: strings.NewReader("n\n"), out: &out, err: io.Discard, namespace: "ns", captf: client,
				kube: kubefake.NewSimpleClientset(objects...)}
			_ = approveCommand.run(e, []string{"tfc/prod"})
			if !strings.Contains(out.String(), "no run record the object's status vouches for lists the files") || strings.Contains(out.String(), "unchanged") {
				t.Errorf("a changed record was shown as the run's:\n%s", out.String())
			}
		})
	}
}

// checkApproved checks what an approve command returned and patched: the
// error it should say, or the one patch it should make ("" for none).
func checkApproved(t *testing.T, err error, wantErr string, client *fake.Clientset, patched string) {
	t.Helper()
	if (err == nil) != (wantErr == "") || (err != nil && !strings.Contains(err.Error(), wantErr)) {
		t.Fatalf("approve: %v, want %q", err, wantErr)
	}
	var patches []string
	for _, a := range client.Actions() {
		if p, ok := a.(core.PatchAction); ok {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if want := slices.DeleteFunc([]string{patched}, func(s string) bool { return s == "" }); !slices.Equal(patches, want) {
		t.Errorf("patches %q, want %q", patches, want)
	}
}

// TestPlanRecordVouched: the plan shown is the text of the record the
// object's status names with its digest, never a newer look-alike that
// claims the same plan, nor the record once edited.
func TestPlanRecordVouched(t *testing.T) {
	cm := func(name, text string) *corev1.ConfigMap {
		b, _ := json.Marshal(run.Record{Job: name, Plan: &run.Plan{Hash: "1111"}})
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-run", Namespace: "ns",
			Labels:          names.RecordLabels(names.ObjectOf("TerraformCluster", "prod")),
			OwnerReferences: []metav1.OwnerReference{{UID: "u1", Name: "prod"}}},
			Data: map[string]string{run.KeyRun: string(b), run.KeyPlanText: text}}
	}
	real, forged := cm("tfc-prod-apply-1", "destroys the database"), cm("tfc-prod-apply-2", "changes a tag")
	tc := waiting("1111")
	tc.UID = "u1"
	tc.Status.LastJobs = []infrav1.JobReference{{Operation: infrav1.OperationApply, Name: "tfc-prod-apply-1", Record: real.Name, RecordDigest: run.RecordDigest(real.Data, nil)}}
	for name, c := range map[string]struct {
		objects []runtime.Object
		want    string
	}{
		"a look-alike beside it": {[]runtime.Object{real, forged}, "destroys the database"},
		"the record edited": {[]runtime.Object{func() *corev1.ConfigMap {
			c := real.DeepCopy()
			c.Data[run.KeyPlanText] = "changes a tag"
			return c
		}(), forged}, "is gone (the Job history limits keep as many as they keep Jobs), or not one the object's status vouches for"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			e := &env{ctx: context.Background(), out: &out, err: io.Discard, namespace: "ns", captf: fake.NewSimpleClientset(tc), kube: kubefake.NewSimpleClientset(c.objects...)}
			if err := planCommand.run(e, []string{"tfc/prod"}); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), c.want) || strings.Contains(out.String(), "changes a tag") {
				t.Errorf("plan shows:\n%s\nwant %q and not the look-alike's text", out.String(), c.want)
			}
		})
	}
}

// TestRestoreTakesOnlyListedBackups: by default restore takes the newest
// backup the state Secret lists, never a newer look-alike; with none
// listed (the state Secret gone, say) it names none and says why.
func TestRestoreTakesOnlyListedBackups(t *testing.T) {
	n := names.ObjectOf("TerraformCluster", "prod")
	secret := func(name string, age time.Duration, annotations map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: annotations, CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
				Labels: map[string]string{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: n.Kind, names.LabelObjectName: n.Name, names.LabelSecretType: names.SecretTypeBackup}}}
	}
	listed, forged := n.Backup("20261201-000000"), n.Backup("29991231-000000")
	head := secret(n.State(), 0, map[string]string{"captf.io/backups": `["` + listed + `"]`})
	head.Labels[names.LabelSecretType] = "state"
	for name, tc := range map[string]struct {
		objects []runtime.Object
		want    string // in the output, or the error
	}{
		"the listed one, not the look-alike": {[]runtime.Object{head, secret(listed, time.Hour, nil), secret(forged, time.Minute, nil)}, "Restoring makes backup " + listed},
		"none listed":                        {[]runtime.Object{secret(listed, time.Hour, nil), secret(forged, time.Minute, nil)}, "has no backup its state Secret lists, and 2 that it does not"},
	} {
		t.Run(name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			scheme.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("Secret"), &metav1.PartialObjectMetadata{})
			scheme.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("SecretList"), &metav1.PartialObjectMetadataList{})
			tc2 := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns"}}
			var out bytes.Buffer
			e := &env{ctx: context.Background(), in: strings.NewReader("n\n"), out: &out, err: io.Discard, namespace: "ns",
				captf: fake.NewSimpleClientset(tc2), kube: kubefake.NewSimpleClientset(), meta: metadatafake.NewSimpleMetadataClient(scheme, tc.objects...)}
			err := restoreCommand.run(e, []string{"tfc/prod"})
			if got := out.String() + fmt.Sprint(err); !strings.Contains(got, tc.want) {
				t.Errorf("restore said %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDescribeShowsInstances: describe's line of a machine or pool says
// which instances it holds, read as the manager and the webhook read them
// (package providerid).
func TestDescribeShowsInstances(t *testing.T) {
	ready := []metav1.Condition{{Type: infrav1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Applied"}}
	tests := map[string]struct {
		kind string
		obj  object
		want string
	}{
		"a machine": {"TerraformMachine", &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec: infrav1.TerraformMachineSpec{ProviderID: "localcloud://i-1"}, Status: infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}},
			"Applied; instance localcloud://i-1"},
		"a machine whose module wrote a line into its ID": {"TerraformMachine", &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Spec: infrav1.TerraformMachineSpec{ProviderID: "x://a\nTerraformMachine/other  True  Applied"}, Status: infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}},
			`Applied; instance "x://a\nTerraformMachine/other  True  Applied"`},
		"a machine without an instance yet": {"TerraformMachine", &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Status: infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}}, "Applied"},
		"a pool of one": {"TerraformMachinePool", &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: infrav1.TerraformMachinePoolSpec{ProviderIDList: []string{"localcloud://i-1"}}, Status: infrav1.TerraformMachinePoolStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}},
			"Applied; 1 instance"},
		"a pool": {"TerraformMachinePool", &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: infrav1.TerraformMachinePoolSpec{ProviderIDList: []string{"localcloud://i-1", "localcloud://i-2"}}, Status: infrav1.TerraformMachinePoolStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}},
			"Applied; 2 instances"},
		"a cluster": {"TerraformCluster", &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "c"},
			Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Conditions: ready}}}, "Applied"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := &env{ctx: context.Background(), out: io.Discard, err: io.Discard, namespace: "ns"}
			if got := e.objectRow(1, tc.kind, tc.obj).note; got != tc.want {
				t.Errorf("note = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestHelp: with no arguments, as with -h, the plugin prints its help and
// exits 0, as kubectl does; an unknown command exits 1.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 0, "kubectl captf: see and act on the Terraform runs"},
		{[]string{"-h"}, 0, "kubectl captf: see and act on the Terraform runs"},
		{[]string{"help"}, 0, "kubectl captf: see and act on the Terraform runs"},
		{[]string{"aply"}, 1, ""},
	} {
		var out bytes.Buffer
		if code := Main(tc.args, strings.NewReader(""), &out, io.Discard); code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("kubectl captf %v: exit %d, printed %q; want exit %d and %q", tc.args, code, out.String(), tc.code, tc.out)
		}
	}
}
