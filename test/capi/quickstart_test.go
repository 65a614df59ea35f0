package capi

import (
	"context"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/test/framework"
)

// TestQuickstart: the objects of examples/quickstart, as make local-up and
// the README apply them, reach Ready with Cluster API's controllers, their
// Machines Running with Nodes in the workload cluster, and deleting the
// Cluster destroys every instance.
func TestQuickstart(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	instances := t.TempDir()
	if err := plane.ApplyQuickstart(ctx, root, instances); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.StartWorkload(ctx, "demo", "demo", instances); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.WaitQuickstartReady(ctx); err != nil {
		t.Fatalf("%v\ncapi log:\n%s", err, capiMgr.Logs(30))
	}
	machines, err := plane.WaitQuickstartMachines(ctx, framework.QuickstartMachines)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("machines: %v", machines)
	nodes, err := plane.WaitQuickstartRunning(ctx, framework.QuickstartMachines)
	if err != nil {
		t.Fatalf("%v\ncapi log:\n%s", err, capiMgr.Logs(30))
	}
	t.Logf("nodes: %v", nodes)
	if n := len(instanceFiles(instances, "")); n == 0 {
		t.Fatalf("no instance in %s", instances)
	}

	if err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Delete(ctx, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Get(ctx, "demo", metav1.GetOptions{})
		return err != nil && len(instanceFiles(instances, "")) == 0, nil
	})
	if err != nil {
		entries, _ := os.ReadDir(instances)
		t.Fatalf("after deleting the Cluster: %d instance files left, or the Cluster stays: %v", len(entries), err)
	}
}
