package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSmoke(t *testing.T) {
	n, err := plane.Kube.CoreV1().Nodes().Get(context.Background(), "local", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s taints %v", n.Name, n.Spec.Taints)
}
