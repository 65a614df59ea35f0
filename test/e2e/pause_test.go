package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

// TestAbandon: deleting with captf.io/abandon-infrastructure keeps the
// infrastructure and its state, labelled, and runs no destroy.
func TestAbandon(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("keep", e.newCluster("keep", false), map[string]any{}))
	e.waitFor("keep", 2*time.Minute, "Ready", isReady)
	e.update("keep", func(tc *infrav1.TerraformCluster) {
		tc.Annotations = map[string]string{infrav1.AnnotationAbandonInfrastructure: "true"}
	})
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), "keep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("keep", time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	if n := len(e.jobs("destroy")); n != 0 {
		t.Errorf("%d destroy Jobs ran for an abandoned cluster", n)
	}
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instance files = %v, want the one instance kept", files)
	}
	// The garbage collector must not (wrongly) collect them.
	e.never(3*time.Second, func() error {
		_, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), "tfc-keep-state", metav1.GetOptions{})
		return err
	})
	state, err := plane.Kube.CoreV1().Secrets(e.ns).Get(context.Background(), "tfc-keep-state", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the state Secret is gone: %v", err)
	}
	if state.Labels[names.LabelAbandoned] != "true" || len(state.OwnerReferences) != 0 {
		t.Errorf("state Secret labels %v owners %v: want %s=true and no owner", state.Labels, state.OwnerReferences, names.LabelAbandoned)
	}
}

// TestPaused: nothing runs while the Cluster is paused, and a deletion while
// paused (what clusterctl move does) destroys nothing.
func TestPaused(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("frozen", e.newCluster("frozen", true), map[string]any{}))
	tc := e.waitFor("frozen", time.Minute, "Paused", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionPaused)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if msg := condition(tc, infrav1.ConditionPaused).Message; msg != "Cluster spec.paused is set to true" {
		t.Errorf("Paused message = %q", msg)
	}
	e.never(3*time.Second, func() error { return noJobs(e.jobs(""), "while paused") })

	// Delete while paused, then strip the finalizer as clusterctl move does.
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), "frozen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.never(3*time.Second, func() error { return noJobs(e.jobs(""), "for a delete while paused") })
	e.update("frozen", func(tc *infrav1.TerraformCluster) { tc.Finalizers = nil })
	e.waitFor("frozen", time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
}

// TestPausedAfterApply: a provisioned cluster that is paused and deleted
// keeps its instances.
func TestDeleteWhilePausedKeepsInfrastructure(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	cluster := e.newCluster("moved", false)
	e.create(e.localCloud("moved", cluster, map[string]any{}))
	e.waitFor("moved", 2*time.Minute, "Ready", isReady)
	e.update("moved", func(tc *infrav1.TerraformCluster) {
		tc.Annotations = map[string]string{"cluster.x-k8s.io/paused": ""}
	})
	e.waitFor("moved", time.Minute, "Paused", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionPaused)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(context.Background(), "moved", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.never(3*time.Second, func() error { return noJobs(e.jobs("destroy"), "while paused") })
	e.update("moved", func(tc *infrav1.TerraformCluster) { tc.Finalizers = nil })
	e.waitFor("moved", time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	if files := e.instanceFiles(); len(files) != 1 {
		t.Errorf("instance files = %v, want the instance kept", files)
	}
}

// TestWaitsForOwner: without an owner Cluster it waits with a condition,
// then proceeds when Cluster API sets the owner.
func TestWaitsForOwner(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	e.create(e.localCloud("orphan", nil, map[string]any{}))
	e.waitFor("orphan", time.Minute, "waiting for its owner", func(tc *infrav1.TerraformCluster) bool {
		c := condition(tc, infrav1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "WaitingForClusterOwner"
	})
	if n := len(e.jobs("")); n != 0 {
		t.Fatalf("%d Jobs ran without an owner", n)
	}
	cluster := e.newCluster("orphan", false)
	e.update("orphan", func(tc *infrav1.TerraformCluster) {
		tc.OwnerReferences = append(tc.OwnerReferences, clusterOwnerRef(cluster))
	})
	e.waitFor("orphan", 2*time.Minute, "Ready", isReady)
}

// TestExternallyManaged: the cluster.x-k8s.io/managed-by annotation means
// hands off: no finalizer, no Job, no status write; removing it hands the
// object back.
func TestExternallyManaged(t *testing.T) {
	e := newEnv(t)
	e.startManager()
	tc := e.localCloud("external", e.newCluster("external", false), map[string]any{})
	tc.Annotations = map[string]string{"cluster.x-k8s.io/managed-by": "someone-else"}
	created := e.create(tc)
	// A witness created after it: once the manager has taken it up, it has
	// seen the externally managed object too.
	e.create(e.localCloud("witness", e.newCluster("witness", false), map[string]any{}))
	e.waitFor("witness", time.Minute, "taken up by the manager", func(tc *infrav1.TerraformCluster) bool { return len(tc.Finalizers) > 0 })
	if err := framework.Consistently(3*time.Second, func() error {
		if now := e.get("external"); now.ResourceVersion != created.ResourceVersion {
			return fmt.Errorf("an externally managed object was written: finalizers %v, status %+v", now.Finalizers, now.Status)
		}
		for _, j := range e.jobs("") {
			if strings.HasPrefix(j.Name, "tfc-external-") {
				return fmt.Errorf("Job %s ran for an externally managed object", j.Name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.update("external", func(tc *infrav1.TerraformCluster) { delete(tc.Annotations, "cluster.x-k8s.io/managed-by") })
	e.waitFor("external", 2*time.Minute, "Ready once handed back", isReady)
}

// noJobs is an error naming jobs, when there are any.
func noJobs(jobs []batchv1.Job, when string) error {
	if len(jobs) == 0 {
		return nil
	}
	var names []string
	for _, j := range jobs {
		names = append(names, j.Name)
	}
	return fmt.Errorf("Jobs ran %s: %v", when, names)
}
