package run

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// maxAddressesPerAction bounds the addresses a summary names per action.
const maxAddressesPerAction = 5

// SummarizePlan derives the hash and summary of a plan from `terraform show
// -json`, and names the changes of protected addresses (patterns are
// spec.protect). The hash covers the digest of the module code that made
// the plan (module), each changed resource's address, actions, values
// before and planned values after, in address order, and each changed
// output: an approval binds exactly what would change and the code that
// would change it, and nothing else (not the time): two deletes of one
// address hash alike only when they delete the same object with the same
// code.
func SummarizePlan(p *tfjson.Plan, protect []string, module string) (*Plan, error) {
	hp := hashedPlan{Module: module}
	summary := infrav1.PlanSummary{}
	named := map[string]int{}
	for _, rc := range p.ResourceChanges {
		action := countAction(rc, &summary)
		if action == "" {
			continue
		}
		if named[action] < maxAddressesPerAction {
			named[action]++
			summary.Resources = append(summary.Resources, infrav1.PlannedResource{Address: rc.Address, Action: action})
		}
		c, err := hashed(rc)
		if err != nil {
			return nil, err
		}
		hp.Changes = append(hp.Changes, c)
	}
	sort.Slice(hp.Changes, func(i, j int) bool { return hp.Changes[i].Address < hp.Changes[j].Address })
	sort.SliceStable(summary.Resources, func(i, j int) bool { return summary.Resources[i].Address < summary.Resources[j].Address })
	var outputs []string
	for name, oc := range p.OutputChanges {
		if oc != nil && !oc.Actions.NoOp() {
			outputs = append(outputs, name)
		}
	}
	sort.Strings(outputs)
	for _, name := range outputs {
		c, err := hashed(&tfjson.ResourceChange{Address: name, Change: p.OutputChanges[name]})
		if err != nil {
			return nil, err
		}
		hp.Outputs = append(hp.Outputs, c)
	}
	var b []byte
	var err error
	if hp.Module == "" && hp.Outputs == nil {
		// What earlier versions hashed: a plan they were asked to approve
		// hashes alike after an upgrade.
		b, err = json.Marshal(hp.Changes)
	} else {
		b, err = json.Marshal(hp)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	return &Plan{Hash: hex.EncodeToString(sum[:])[:16], Summary: summary, OutputChanges: outputs, Protected: protectedChanges(p, protect)}, nil
}

// hashedPlan is what a plan's hash covers.
type hashedPlan struct {
	Module  string         `json:"module,omitempty"`
	Changes []hashedChange `json:"changes"`
	Outputs []hashedChange `json:"outputs,omitempty"`
}

// countAction counts rc in summary by what it does, and names that:
// import, forget, replace, add, change or destroy; "" for a change that
// changes nothing (a no-op, a read).
func countAction(rc *tfjson.ResourceChange, summary *infrav1.PlanSummary) string {
	if rc.Change == nil {
		return ""
	}
	a := rc.Change.Actions
	switch {
	case rc.Change.Importing != nil:
		// Imported (and maybe changed): CAPTF starts managing it.
		summary.Import++
		return "import"
	case a.Forget() || slices.Contains(a, tfjson.ActionForget):
		// Leaves the state, stays in the cloud: unmanaged from now on
		// (["create", "forget"]: a replace that keeps the old one).
		summary.Forget++
		return "forget"
	case a.NoOp() || a.Read():
		return ""
	case a.Replace():
		summary.Replace++
		return "replace"
	case a.Create():
		summary.Add++
		return "add"
	case a.Update():
		summary.Change++
		return "change"
	case a.Delete():
		summary.Destroy++
		return "destroy"
	}
	return ""
}

// hashedChange is what a plan's hash covers of one resource change: its
// address, actions and values before and after.
type hashedChange struct {
	Address      string          `json:"address"`
	Actions      []string        `json:"actions"`
	Before       json.RawMessage `json:"before,omitempty"`
	After        json.RawMessage `json:"after,omitempty"`
	AfterUnknown json.RawMessage `json:"afterUnknown,omitempty"`
}

func hashed(rc *tfjson.ResourceChange) (hashedChange, error) {
	c := hashedChange{Address: rc.Address}
	for _, act := range rc.Change.Actions {
		c.Actions = append(c.Actions, string(act))
	}
	if rc.Change.Importing != nil {
		c.Actions = append(c.Actions, "import")
	}
	var err error
	// encoding/json sorts map keys: the values are canonical.
	if c.Before, err = json.Marshal(rc.Change.Before); err != nil {
		return c, err
	}
	if c.After, err = json.Marshal(rc.Change.After); err != nil {
		return c, err
	}
	c.AfterUnknown, err = json.Marshal(rc.Change.AfterUnknown)
	return c, err
}

// Destructive reports whether a plan deletes, replaces or forgets anything:
// a forgotten resource is lost to CAPTF as surely as a destroyed one.
func (p *Plan) Destructive() bool {
	return p.Summary.Destroy > 0 || p.Summary.Replace > 0 || p.Summary.Forget > 0
}

// HasChanges reports whether a plan changes any resource, the state
// included; OutputChanges are apart (a drift check does not report them).
func (p *Plan) HasChanges() bool {
	s := p.Summary
	return s.Add+s.Change+s.Destroy+s.Replace+s.Forget+s.Import > 0
}

// PlanCounts is a plan's counts, with forgets and imports when it has any.
func PlanCounts(s infrav1.PlanSummary) string {
	text := fmt.Sprintf("%d to add, %d to change, %d to destroy, %d to replace", s.Add, s.Change, s.Destroy, s.Replace)
	if s.Forget > 0 {
		text += fmt.Sprintf(", %d to forget (they stay in the cloud, unmanaged)", s.Forget)
	}
	if s.Import > 0 {
		text += fmt.Sprintf(", %d to import", s.Import)
	}
	return text
}

// PlanSummaryText is a plan's counts and the addresses it names.
func PlanSummaryText(s infrav1.PlanSummary) string {
	text := PlanCounts(s)
	var parts []string
	for _, r := range s.Resources {
		parts = append(parts, r.Action+" "+r.Address)
	}
	if len(parts) > 0 {
		text += " (" + strings.Join(parts, ", ") + ")"
	}
	return text
}
