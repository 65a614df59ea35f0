package workspace

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/approval"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/runnerjob"
)

// Reasons of ConditionProtectionInherited.
const (
	ReasonProtectionInherited  = "StateProtectedForEarlierObject"
	ReasonProtectionOwn        = "OwnProtection"
	ReasonProtectionUnreadable = "StateProtectionUnreadable"
)

// Protection is the approval policy and spec.protect a state was kept
// under, recorded on its head (names.AnnotationProtection). It travels with
// the state: an object of another UID that takes the state up (one made
// again under the name, or a restored or moved one) is held to it beside
// its own until it covers it, or an approver sets
// infrav1.AnnotationAdoptState to UID.
type Protection struct {
	UID     types.UID              `json:"uid"`
	Policy  infrav1.ApprovalPolicy `json:"policy,omitempty"`
	Protect []string               `json:"protect,omitempty"`
	// Module is the digest of the module code last applied to the state:
	// other code waits for an approver, whichever object runs it.
	Module string `json:"module,omitempty"`
}

// strictness orders approval policies: Manual gates more than Destructive.
func strictness(p infrav1.ApprovalPolicy) int {
	switch p {
	case infrav1.ApprovalPolicyManual:
		return 2
	case infrav1.ApprovalPolicyDestructive:
		return 1
	}
	return 0
}

// covers tells whether g holds at least what p recorded.
func covers(g *approval.Gate, p *Protection) bool {
	if strictness(g.Policy) < strictness(p.Policy) {
		return false
	}
	for _, pattern := range p.Protect {
		if !slices.Contains(g.Protect, pattern) {
			return false
		}
	}
	return p.Module == "" || slices.Contains(g.Modules, p.Module)
}

// InheritProtection holds r's gate to the protection its state was kept
// under for an earlier object of its name, with its own, until the object
// covers it or an approver lets it go, and says so in
// ConditionProtectionInherited. Otherwise it records the object's own on
// the state head. An unreadable record stops the object: a Job under less
// protection than the state's may destroy what it covered.
func (e *engine) InheritProtection(ctx context.Context, r *Sync) (ok bool, err error) {
	if r.Gate == nil {
		return true, nil
	}
	obj, n := r.Obj, r.Names
	head, err := e.secretMeta(ctx, obj.GetNamespace(), n.State(), false)
	if err != nil {
		return false, err
	}
	if head == nil || !head.HasState || head.Abandoned || head.NamesObject && (head.ObjectName != obj.GetName() || head.Kind != n.Kind) {
		return true, nil // no state of this object's: the checks before a Job say why
	}
	var p *Protection
	if head.Protection != "" {
		p = &Protection{}
		if err := json.Unmarshal([]byte(head.Protection), p); err != nil || p.UID == "" {
			msg := fmt.Sprintf("Annotation %s of state Secret %s is not CAPTF's record (%q): CAPTF runs nothing for this object until it is. Delete the annotation to record this object's own approval policy and spec.protect.",
				names.AnnotationProtection, head.Name, head.Protection)
			e.warnOnChange(obj, infrav1.ConditionProtectionInherited, metav1.ConditionUnknown, ReasonProtectionUnreadable, ReasonProtectionUnreadable, msg)
			e.stopped(r, ReasonProtectionUnreadable, msg)
			return false, nil
		}
	}
	if p != nil && p.UID != obj.GetUID() && !covers(r.Gate, p) && obj.GetAnnotations()[infrav1.AnnotationAdoptState] != string(p.UID) {
		g := *r.Gate
		if strictness(p.Policy) > strictness(g.Policy) {
			g.Policy = p.Policy
		}
		g.Protect = slices.Clone(g.Protect)
		for _, pattern := range p.Protect {
			if !slices.Contains(g.Protect, pattern) {
				g.Protect = append(g.Protect, pattern)
			}
		}
		if p.Module != "" && !slices.Contains(g.Modules, p.Module) {
			g.Modules = append(slices.Clone(g.Modules), p.Module)
		}
		r.Gate = &g
		msg := fmt.Sprintf("State Secret %s was kept under approvalPolicy %s, spec.protect [%s] and module code %s for an earlier %s of this name (UID %s): they hold for this object too, beside its own. "+
			"An approver lets them go: kubectl annotate %s -n %s %s %s=%s",
			head.Name, p.Policy, strings.Join(p.Protect, ", "), cmp.Or(p.Module, "(any)"), e.GVK.Kind, p.UID,
			strings.ToLower(e.GVK.Kind), obj.GetNamespace(), obj.GetName(), infrav1.AnnotationAdoptState, p.UID)
		e.warnOnChange(obj, infrav1.ConditionProtectionInherited, metav1.ConditionTrue, ReasonProtectionInherited, ReasonProtectionInherited, msg)
		return true, nil
	}
	if c := meta.FindStatusCondition(obj.WorkspaceStatus().Conditions, infrav1.ConditionProtectionInherited); c != nil && c.Status != metav1.ConditionFalse {
		SetCondition(obj, infrav1.ConditionProtectionInherited, metav1.ConditionFalse, ReasonProtectionOwn, "")
	}
	own, err := json.Marshal(Protection{UID: obj.GetUID(), Policy: r.Gate.Policy, Protect: r.Gate.Protect, Module: obj.WorkspaceStatus().AppliedModule})
	if err != nil || string(own) == head.Protection {
		return err == nil, err
	}
	// Not under a running Job: its runner writes the head at the version it
	// read, and a write of ours in between would fence its state saves.
	if slices.ContainsFunc(r.Jobs, func(j *runnerjob.Cached) bool { finished, _ := runnerjob.Finished(j); return !finished }) {
		return true, nil
	}
	return true, e.protectState(ctx, obj, string(own))
}
