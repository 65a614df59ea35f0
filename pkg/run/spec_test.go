package run

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// parse reads args as `captf runner` does.
func parse(args []string) (Spec, error) {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var s Spec
	s.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	return s, s.Complete()
}

// TestSpecArgsRoundTrip: what Args writes, the runner's flags read back as
// the same Spec, for every field set and for the defaults.
func TestSpecArgsRoundTrip(t *testing.T) {
	base := Spec{Namespace: "ns", ObjectKind: "TerraformCluster", ObjectName: "c", ObjectUID: "uid", ObjectAPIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1",
		Operation: infrav1.OperationApply, Job: "tfc-c-apply-0123456789abcdef-0", StateBackups: 5, LockTimeout: 5 * time.Minute, MaxStateBytes: DefaultMaxStateBytes}
	tests := map[string]func(s *Spec){
		"the least a Job says": func(*Spec) {},
		"every field": func(s *Spec) {
			s.Terraform, s.WorkDir, s.StateBackups, s.LockTimeout = "tofu", "/workspace", 0, 90*time.Second
			s.UseDurableInputs, s.ExpectState, s.MaxStateBytes = true, true, 1<<20
			s.Gate, s.ApprovedPlan, s.ApprovedDestructivePlan = infrav1.ApprovalPolicyManual, "1111111111111111", "2222222222222222"
			s.Protect = []string{"db.main", `module.x["a,b"].*`}
		},
		"a destroy with the durable inputs": func(s *Spec) { s.Operation, s.UseDurableInputs = infrav1.OperationDestroy, true },
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("POD_NAMESPACE", "")
			t.Setenv("CAPTF_TERRAFORM", "")
			want := base
			change(&want)
			got, err := parse(want.Args())
			if err != nil {
				t.Fatalf("parsing %q: %v", want.Args(), err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("args %q read back as\n%+v, want\n%+v", want.Args(), got, want)
			}
		})
	}
}

// TestSpecComplete: a Spec the runner cannot run is refused with the flag
// to fix.
func TestSpecComplete(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no object":    {args: []string{"--namespace=ns", "--operation=apply", "--job=j"}, want: "are required"},
		"a wrong gate": {args: []string{"--gate=Sometimes"}, want: "--gate=Sometimes: want Destructive or Manual"},
		"a bad number": {args: []string{"--state-backups=many"}, want: "invalid value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parse(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
