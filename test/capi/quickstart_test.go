package capi

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/test/framework"
)

// TestQuickstart: the objects of examples/quickstart, as make local-up and
// the README apply them, reach Ready on the local cloud with Cluster API's
// controllers, their Machines Running with Nodes in the workload cluster,
// and deleting the Cluster destroys everything it made in the cloud.
func TestQuickstart(t *testing.T) {
	ctx := context.Background()
	root, capiMgr := setup(t)
	cloud, err := framework.StartLocalCloud(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Stop)
	if err := plane.ApplyQuickstart(ctx, root, cloud.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := plane.StartWorkloadOf(ctx, "demo", "demo", cloud.Hosts(framework.QuickstartAccount)); err != nil {
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
	// The cluster's two instances beside its load balancer, and a machine's
	// each.
	if made := cloudResources(t, cloud); made["instances"] != 2+framework.QuickstartMachines || made["networks"] != 1 || made["load_balancers"] != 1 {
		t.Errorf("the cloud holds %v, want 1 network, 1 load balancer and %d instances", made, 2+framework.QuickstartMachines)
	}

	if err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Delete(ctx, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var left map[string]int
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := plane.Dynamic.Resource(capi.Cluster.Resource).Namespace("demo").Get(ctx, "demo", metav1.GetOptions{})
		left = cloudResources(t, cloud)
		return err != nil && len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("after deleting the Cluster: the cloud holds %v, or the Cluster stays: %v", left, err)
	}
}

// cloudResources counts the quickstart account's resources in the cloud by
// kind, leaving out kinds it holds none of.
func cloudResources(t *testing.T, cloud *framework.LocalCloud) map[string]int {
	t.Helper()
	all, err := cloud.Resources(framework.QuickstartAccount)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for r := range all {
		out[r[:strings.Index(r, "/")]]++
	}
	return out
}
