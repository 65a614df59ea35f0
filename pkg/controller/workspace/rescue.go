package workspace

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
	"github.com/captf/captf/pkg/runnerjob"
)

// holdForRescue stops the retries of a failed Job whose runner rescued the
// state terraform could not save: the current state may lack what that run
// created, and another run on it would create it a second time. A restore
// after the Job (of the rescued state, or any backup) lets it go on.
func (e *engine) holdForRescue(r *Sync, job *runnerjob.Cached, res *run.Result) bool {
	if res == nil || res.RescuedState == "" {
		return false
	}
	if lr := r.Obj.WorkspaceStatus().LastRestore; lr != nil && lr.Time.After(runnerjob.FinishTime(job)) {
		SetCondition(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionFalse, ReasonRestored,
			fmt.Sprintf("Backup %s was restored after Job %s rescued its state into %s", lr.Backup, job.Name, res.RescuedState))
		return false
	}
	msg := fmt.Sprintf("Job %s could not save its state (%s: %s); CAPTF kept it in backup %s and runs nothing until a state is restored, "+
		"as the current state may lack what that run created. Compare them, then restore the right one: kubectl annotate %s -n %s %s %s=%s",
		job.Name, res.Stage, res.Error, res.RescuedState, strings.ToLower(e.GVK.Kind), r.Obj.GetNamespace(), r.Obj.GetName(), infrav1.AnnotationRestoreState, res.RescuedState)
	e.warnOnChange(r.Obj, infrav1.ConditionStateRescued, metav1.ConditionTrue, ReasonStateRescued, ReasonStateRescued, msg)
	e.SetReady(r, metav1.ConditionFalse, ReasonStateRescued, msg)
	return true
}
