package names

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesAreValid(t *testing.T) {
	tests := map[string]Object{
		"short":      {Kind: "tfc", Name: "prod"},
		"long":       {Kind: "tfmp", Name: strings.Repeat("a", 253)},
		"long, dots": {Kind: "tfm", Name: "worker." + strings.Repeat("b", 100) + ".x"},
		"at the cut": {Kind: "tfmp", Name: strings.Repeat("c", maxBase-6)},
	}
	for name, o := range tests {
		t.Run(name, func(t *testing.T) {
			job := o.Job("0b5c2a59-4d3e-4f0e-9a51-2f7c8d1e6a10", "destroy", "0123456789abcdef", 9999)
			backup := o.Backup("20261129-220000-99")
			for _, n := range []string{job, o.Result(job), o.State(), o.StateChunk(1<<62, 9999), backup,
				o.BackupChunk(backup, 9999), o.BackupChunk(o.Rescue("20261129-220000-99"), 9999), o.DurableInputs(), o.Lock()} {
				if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
					t.Errorf("%q: %v", n, errs)
				}
			}
			if errs := validation.IsDNS1123Label(job); len(errs) > 0 {
				t.Errorf("job name %q is not a label value: %v", job, errs)
			}
			if errs := validation.IsValidLabelValue(LabelValue(o.Name)); len(errs) > 0 {
				t.Errorf("label value %q: %v", LabelValue(o.Name), errs)
			}
		})
	}
}

// Secret and Lease names keep the object's full name: two objects share a
// state only if they share a name.
func TestStateNamesNeverCollide(t *testing.T) {
	tests := map[string][2]Object{
		// CAPI names every machine of a MachineDeployment with its name.
		"one deployment": {{Kind: "tfm", Name: strings.Repeat("x", 40) + "-6f9c7d8b5-abcde"}, {Kind: "tfm", Name: strings.Repeat("x", 40) + "-6f9c7d8b5-fghij"}},
		"dot and dash":   {{Kind: "tfm", Name: "a.b"}, {Kind: "tfm", Name: "a-b"}},
		// A tenant naming its object as the old shortened form of another.
		"old short form": {{Kind: "tfm", Name: "victim.m1"}, {Kind: "tfm", Name: "victim-m1-d4efb"}},
		"kinds":          {{Kind: "tfm", Name: "a"}, {Kind: "tfmp", Name: "a"}},
		// A literal name as long as a hashed base cannot spell one.
		"hashed form": {{Kind: "tfm", Name: strings.Repeat("y", 300)}, {Kind: "tfm", Name: (Object{Kind: "tfm", Name: strings.Repeat("y", 300)}).base()[4:]}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			a, b := tt[0], tt[1]
			if a.State() == b.State() || a.Lock() == b.Lock() || a.DurableInputs() == b.DurableInputs() {
				t.Fatalf("%q and %q share %q", a.Name, b.Name, a.State())
			}
		})
	}
}

// Jobs' names are short, yet two objects never share one: 100,000 machines
// of one MachineDeployment, and a name made to match another's short form.
func TestJobNamesNeverCollide(t *testing.T) {
	seen := map[string]string{}
	deployment := "workers-" + strings.Repeat("z", 40)
	for i := range 100000 {
		o := Object{Kind: "tfm", Name: fmt.Sprintf("%s-%05d", deployment, i)}
		job := o.Job(fmt.Sprintf("uid-%d", i), "apply", "0123456789", 0)
		if other, ok := seen[job]; ok {
			t.Fatalf("%s and %s share Job %s", other, o.Name, job)
		}
		seen[job] = o.Name
	}
	victim, forged := Object{Kind: "tfm", Name: "victim.m1"}, Object{Kind: "tfm", Name: "victim-m1"}
	if victim.Job("u1", "apply", "h", 0) == forged.Job("u2", "apply", "h", 0) {
		t.Fatal("victim.m1 and victim-m1 share a Job name")
	}
}

// TestLeaderLease: one Lease per shard, each a valid name, none shared.
func TestLeaderLease(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range []struct{ filter, want string }{
		{"", "captf-manager"},
		{"canary", "captf-manager-canary"},
		{"shard-1", "captf-manager-shard-1"},
		{"Shard_1", ""},
		{"shard.1", ""},
		{strings.Repeat("x", 63), "captf-manager-" + strings.Repeat("x", 63)},
	} {
		got := LeaderLease(tc.filter)
		if tc.want != "" && got != tc.want {
			t.Errorf("LeaderLease(%q) = %q, want %q", tc.filter, got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("LeaderLease(%q) = %q: %v", tc.filter, got, errs)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("filters %q and %q share the Lease %q", other, tc.filter, got)
		}
		seen[got] = tc.filter
	}
}

// TestFamilyTypes: what each name of a state family may be; the runner API
// refuses a Secret whose type label says otherwise.
func TestFamilyTypes(t *testing.T) {
	o := Object{Kind: "tfc", Name: "prod"}
	tests := map[string][]string{
		o.State():                                          {SecretTypeState},
		o.DurableInputs():                                  {SecretTypeDurableInput},
		o.StateChunk(1764540000000000000, 3):               {SecretTypeStateChunk},
		o.Backup("20261130-174914"):                        {SecretTypeBackup},
		o.Rescue("20261130-174914"):                        {SecretTypeBackup},
		o.Backup("20261130-174914") + "-1":                 {SecretTypeBackup, SecretTypeBackupChunk},
		o.BackupChunk(o.Backup("20261130-174914")+"-1", 0): {SecretTypeBackupChunk},
		"tfc-prod-x-state":                                 nil,
		Object{Kind: "tfc", Name: "prod-state"}.State():    nil,
	}
	for name, want := range tests {
		if got := o.FamilyTypes(name); !slices.Equal(got, want) {
			t.Errorf("FamilyTypes(%s) = %v, want %v", name, got, want)
		}
	}
}
