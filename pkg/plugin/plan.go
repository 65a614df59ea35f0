package plugin

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

var planCommand = &command{
	name: "plan", args: "KIND/NAME", short: "Show the plan waiting for approval, or the last one",
	long: `Show the object's plan waiting for approval, or else its last plan: its
summary, then the plan as terraform rendered it, sensitive values redacted.
With --json, print the plan's JSON representation instead (redacted, as
terraform show -json writes it: resource_changes, resource_drift,
output_changes, planned_values), for infracost, conftest and the like.

Examples:
  kubectl captf plan tfc/prod -n team-a
  kubectl captf plan tfc/prod --json | conftest test -`,
	minArgs: 1, maxArgs: 1,
	flags: func(fs *flag.FlagSet, e *env) {
		fs.BoolVar(&e.json, "json", false, "Print the plan's JSON representation (redacted)")
	},
	run: func(e *env, args []string) error {
		r, obj, err := e.lookup(args[0])
		if err != nil {
			return err
		}
		plan := obj.WorkspaceStatus().LastPlan
		if plan == nil {
			return fmt.Errorf("%s has made no plan yet", r)
		}
		records, err := e.planRecords(r, obj)
		if err != nil {
			return err
		}
		rec, found := planRecord(records, plan)
		if e.json {
			if !found {
				return fmt.Errorf("no run record of plan %s that the object's status vouches for is left (the Job history limits keep as many as they keep Jobs; a record changed since its run, or made by someone else, is not shown)", plan.Hash)
			}
			b, err := rec.planJSON()
			if err != nil {
				return err
			}
			_, err = e.out.Write(append(b, '\n'))
			return err
		}
		e.showPlan(r, obj, plan, rec, found)
		return nil
	},
}

// planRecords are the object's records, or none when the user may not
// list ConfigMaps: the plan's hash and summary, from the object's status,
// are still shown, and they are what an approval names.
func (e *env) planRecords(r ref, obj object) ([]record, error) {
	records, err := e.records(r, obj)
	if apierrors.IsForbidden(err) {
		fmt.Fprintf(e.err, "(the plan's text is in its run record, and you may not list ConfigMaps: %v)\n", err)
		e.recordsHidden = true
		return nil, nil
	}
	return records, err
}

// gate says what the object's plan waits for: the annotation that approves
// it, or that it is protected; "" when nothing waits.
func gate(obj object) (annotation string, protected *metav1.Condition) {
	if c := condition(obj, infrav1.ConditionDestructivePlanBlocked); c != nil && c.Status == metav1.ConditionTrue {
		if c.Reason == run.ReasonProtectedResourceChange {
			return "", c
		}
		return infrav1.AnnotationApproveDestructivePlan, nil
	}
	if c := condition(obj, infrav1.ConditionPlanAwaitingApproval); c != nil && c.Status == metav1.ConditionTrue && c.Reason != run.ReasonModuleAwaitingApproval {
		return infrav1.AnnotationApprovePlan, nil
	}
	return "", nil
}

// showPlan prints the plan's summary, what it waits for, and its text.
func (e *env) showPlan(r ref, obj object, plan *infrav1.PlanStatus, rec record, found bool) {
	w := e.out
	fmt.Fprintf(w, "Plan %s of %s (%s, %s)\n", plan.Hash, r, plan.Operation, plan.Time.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "  %s\n", run.PlanSummaryText(plan.Summary))
	annotation, protected := gate(obj)
	switch {
	case moduleWaiting(obj) != "":
		fmt.Fprintf(w, "Module code %s waits for approval (no plan was made with it): kubectl captf approve %s -n %s\n", moduleWaiting(obj), r, e.namespace)
	case protected != nil:
		fmt.Fprintf(w, "Refused: %s\n", protected.Message)
	case annotation != "":
		fmt.Fprintf(w, "Waiting for approval (%s): kubectl captf approve %s -n %s\n", annotation, r, e.namespace)
	case obj.WorkspaceStatus().AppliedPlanHash == plan.Hash:
		fmt.Fprintln(w, "Applied.")
	}
	if !found && !e.recordsHidden {
		fmt.Fprintf(w, "\nThe run record of this plan is gone (the Job history limits keep as many as they keep Jobs), or not one the object's status vouches for (changed since its run, or made by someone else): only the plan's hash and summary above are the manager's word.\n")
		return
	}
	if !found {
		return
	}
	fmt.Fprintf(w, "Run: %s\n\n", rec.Job)
	if text := rec.data[run.KeyPlanText]; text != "" {
		fmt.Fprint(w, text)
		if !strings.HasSuffix(text, "\n") {
			fmt.Fprintln(w)
		}
	}
}

var approveCommand = &command{
	name: "approve", args: "tfc/NAME", short: "Approve the plan waiting, exactly that one",
	long: `Show the TerraformCluster's plan waiting for approval, ask for confirmation
and set the annotation that approves exactly that plan
(captf.io/approve-plan or captf.io/approve-destructive-plan) to its hash.
When the module's code changed and waits for approval (no plan is made
with code no approver accepted), show which files changed against the code
applied and approve that code (captf.io/approve-module); its plan then
waits as any other.
Refused when the plan changed since it was shown, and for a plan that
changes what spec.protect covers (no approval applies it). With the
approval policy installed, approving needs the verb approve.

Examples:
  kubectl captf approve tfc/prod -n team-a
  kubectl captf approve tfc/prod -n team-a --yes`,
	minArgs: 1, maxArgs: 1,
	flags: func(fs *flag.FlagSet, e *env) {
		fs.BoolVar(&e.yes, "yes", false, "Approve without asking")
	},
	run: func(e *env, args []string) error {
		r, err := parseRef(args[0])
		if err != nil {
			return err
		}
		if r.kind != "TerraformCluster" {
			return usageError{"only a TerraformCluster's plans wait for approval"}
		}
		obj, err := e.get(r)
		if err != nil {
			return err
		}
		if digest := moduleWaiting(obj); digest != "" {
			records, err := e.planRecords(r, obj)
			if err != nil {
				return err
			}
			e.showModule(r, obj, digest, records)
			if !e.yes && !e.confirm(fmt.Sprintf("Approve module code %s of %s (%s)?", digest, r, infrav1.AnnotationApproveModule)) {
				return errors.New("not approved")
			}
			if err := e.approveModule(r, digest); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "%s approved: module code %s (%s); its plan is gated as any other\n", r, digest, infrav1.AnnotationApproveModule)
			return nil
		}
		plan := obj.WorkspaceStatus().LastPlan
		annotation, protected := gate(obj)
		switch {
		case protected != nil:
			return fmt.Errorf("no approval applies this plan: %s", protected.Message)
		case annotation == "" || plan == nil:
			return fmt.Errorf("no plan of %s waits for approval", r)
		}
		records, err := e.planRecords(r, obj)
		if err != nil {
			return err
		}
		rec, found := planRecord(records, plan)
		e.showPlan(r, obj, plan, rec, found)
		if !e.yes && !e.confirm(fmt.Sprintf("Approve plan %s of %s (%s=%s)?", plan.Hash, r, annotation, plan.Hash)) {
			return errors.New("not approved")
		}
		if err := e.approve(r, plan.Hash, annotation); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s approved: plan %s (%s)\n", r, plan.Hash, annotation)
		return nil
	},
}

// approve sets annotation to hash, on the object as it is now: only while
// the plan waiting is still hash, guarded by its resourceVersion.
func (e *env) approve(r ref, hash, annotation string) error {
	for range 5 {
		obj, err := e.get(r)
		if err != nil {
			return err
		}
		now := obj.WorkspaceStatus().LastPlan
		if current, _ := gate(obj); now == nil || now.Hash != hash || current != annotation {
			what := "no plan waits"
			if now != nil {
				what = "plan " + now.Hash + " is the last one"
			}
			return fmt.Errorf("the plan changed since it was shown (%s): nothing approved; run kubectl captf approve again", what)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(),
			"annotations": map[string]string{annotation: hash}}})
		_, err = e.captf.InfrastructureV1alpha1().TerraformClusters(e.namespace).Patch(e.ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("the object kept changing: nothing approved; try again")
}

// confirm asks a yes/no question on the terminal; only "y" or "yes" is yes.
func (e *env) confirm(question string) bool {
	fmt.Fprintf(e.out, "%s [y/N]: ", question)
	line, _ := bufio.NewReader(e.in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
