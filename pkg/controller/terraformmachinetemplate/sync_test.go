package terraformmachinetemplate

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller"
	"github.com/captf/captf/pkg/generated/clientset/versioned/fake"
	"github.com/captf/captf/pkg/generated/informers/externalversions"
)

func TestSync(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")}
	nodeInfo := &infrav1.NodeInfo{Architecture: "arm64", OperatingSystem: "linux"}
	tests := map[string]struct {
		status     infrav1.TerraformMachineTemplateStatus
		wantWrites int
	}{
		"hints not in the status yet": {wantWrites: 1},
		"status already current":      {status: infrav1.TerraformMachineTemplateStatus{Capacity: capacity, NodeInfo: nodeInfo}, wantWrites: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			tmpl := &infrav1.TerraformMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns"},
				Spec: infrav1.TerraformMachineTemplateSpec{Capacity: capacity, NodeInfo: nodeInfo}, Status: tc.status}
			client := fake.NewSimpleClientset(tmpl)
			informers := externalversions.NewSharedInformerFactory(client, 0)
			inf := informers.Infrastructure().V1alpha1().TerraformMachineTemplates()
			c, err := NewController(ctx, controller.Context{Kube: k8sfake.NewClientset(), CAPTF: client, CAPTFInformers: informers})
			if err != nil {
				t.Fatal(err)
			}
			if err := inf.Informer().GetIndexer().Add(tmpl); err != nil {
				t.Fatal(err)
			}
			client.ClearActions()
			if err := c.sync(ctx, cache.ObjectName{Namespace: "ns", Name: "w"}); err != nil {
				t.Fatal(err)
			}
			if got := len(client.Actions()); got != tc.wantWrites {
				t.Fatalf("%d writes, want %d", got, tc.wantWrites)
			}
			got, _ := client.InfrastructureV1alpha1().TerraformMachineTemplates("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if got.Status.Capacity.Cpu().String() != "2" || got.Status.NodeInfo == nil || got.Status.NodeInfo.Architecture != "arm64" {
				t.Errorf("status = %+v", got.Status)
			}
		})
	}
}
