package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

var moduleDigest = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// moduleWaiting is the digest of the module code that waits for an
// approver, as the manager's condition names it first; "" when none does.
func moduleWaiting(obj object) string {
	for _, t := range []string{infrav1.ConditionPlanAwaitingApproval, infrav1.ConditionReady} {
		if c := condition(obj, t); c != nil && c.Reason == run.ReasonModuleAwaitingApproval {
			return moduleDigest.FindString(c.Message)
		}
	}
	return ""
}

// moduleOf is the newest vouched record's account of the code of digest.
func moduleOf(records []record, digest string) *run.ModuleCode {
	for _, rec := range records {
		if rec.vouched && rec.Module != nil && rec.Module.Digest == digest {
			return rec.Module
		}
	}
	return nil
}

// showModule prints the code waiting against the code applied: the files
// added, removed and changed, as the runs that hashed them listed them.
func (e *env) showModule(r ref, obj object, digest string, records []record) {
	w := e.out
	applied := obj.WorkspaceStatus().AppliedModule
	fmt.Fprintf(w, "Module code %s of %s waits for approval; nothing of it has run.\n", digest, r)
	fmt.Fprintf(w, "  applied: %s\n", applied)
	next, last := moduleOf(records, digest), moduleOf(records, applied)
	switch {
	case e.recordsHidden:
		return
	case next == nil || last == nil:
		fmt.Fprintln(w, "\nThe run records that list the files are gone, or no run record the object's status vouches for lists the files (a record changed since its run, or made by someone else, is not shown): read the object's spec.module (and the ConfigMap it names) before you approve.")
		return
	case next.Files == nil || last.Files == nil:
		fmt.Fprintln(w, "\nThe module has too many files to list: read its source before you approve.")
		return
	}
	var paths []string
	for p := range next.Files {
		paths = append(paths, p)
	}
	for p := range last.Files {
		if _, ok := next.Files[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	fmt.Fprintln(w, "\nFiles:")
	same := 0
	for _, p := range paths {
		now, isNow := next.Files[p]
		was, wasThen := last.Files[p]
		switch {
		case !wasThen:
			fmt.Fprintf(w, "  added    %s\n", p)
		case !isNow:
			fmt.Fprintf(w, "  removed  %s\n", p)
		case now != was:
			fmt.Fprintf(w, "  changed  %s\n", p)
		default:
			same++
		}
	}
	fmt.Fprintf(w, "  (%d unchanged)\n", same)
	fmt.Fprintln(w, "Read the changed files (spec.module, or the ConfigMap or source it names) before you approve: approved code runs with the object's credentials.")
}

// approveModule sets captf.io/approve-module to digest while the manager
// still says that digest waits, guarded by the resourceVersion.
func (e *env) approveModule(r ref, digest string) error {
	for range 5 {
		obj, err := e.get(r)
		if err != nil {
			return err
		}
		if now := moduleWaiting(obj); now != digest {
			return fmt.Errorf("the module code waiting changed since it was shown (now %q): nothing approved; run kubectl captf approve again", now)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(),
			"annotations": map[string]string{infrav1.AnnotationApproveModule: digest}}})
		_, err = e.captf.InfrastructureV1alpha1().TerraformClusters(e.namespace).Patch(e.ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return errors.New("the object kept changing: nothing approved; try again")
}
