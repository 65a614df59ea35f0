package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
)

// appliedCluster is a TerraformCluster as the API server serves it once
// it was applied and checked for drift (its status as CAPTF writes it).
const appliedCluster = `{"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","kind":"TerraformCluster",
"metadata":{"name":"c00000","namespace":"fleet","uid":"29b33912-8e3a-4907-b3a1-000000000000","resourceVersion":"100000","generation":1,
"creationTimestamp":"2026-12-01T13:56:54Z","labels":{"cluster.x-k8s.io/cluster-name":"c00000"},
"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster","name":"c00000","uid":"6f1c0b7e-2a44-4b8e-9d1f-000000000000","controller":true,"blockOwnerDeletion":true}],
"finalizers":["infrastructure.cluster.x-k8s.io/terraformcluster"],
"managedFields":[{"manager":"captf","operation":"Update","apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","time":"2026-12-01T13:56:54Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{}}},"subresource":"status"}]},
"spec":{"module":{"source":"git::https://example.com/m.git?ref=v1"}},
"status":{"conditions":[
{"type":"Paused","status":"False","observedGeneration":1,"lastTransitionTime":"2026-12-01T13:56:54Z","reason":"NotPaused","message":""},
{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-12-01T13:56:58Z","reason":"Applied","message":"The module is applied (plan 0000000000000000: 0 to add, 0 to change, 0 to destroy, 0 to replace)"},
{"type":"PlanAwaitingApproval","status":"False","observedGeneration":1,"lastTransitionTime":"2026-12-01T13:56:54Z","reason":"NoPlanAwaitingApproval","message":""},
{"type":"DestructivePlanBlocked","status":"False","observedGeneration":1,"lastTransitionTime":"2026-12-01T13:56:54Z","reason":"NoPlanAwaitingApproval","message":""},
{"type":"Drifted","status":"False","observedGeneration":1,"lastTransitionTime":"2026-12-01T14:26:58Z","reason":"NoDrift","message":"The infrastructure matches the module"}],
"initialization":{"provisioned":true},"ready":true,"observedGeneration":1,
"appliedInputsHash":"95776040a4b85051","appliedPlanHash":"0000000000000000",
"outputs":{"control_plane_endpoint":"c00000.bench.test:6443"},
"lastPlan":{"hash":"0000000000000000","operation":"apply","summary":{"add":0,"change":0,"destroy":0,"replace":0},"time":"2026-12-01T13:56:58Z"},
"lastJobs":[{"operation":"apply","name":"tfc-c00000-apply-95776040a4b85051-0","outcome":"Succeeded","completionTime":"2026-12-01T13:56:58Z"},
{"operation":"drift","name":"tfc-c00000-drift-95776040a4b85051-1","outcome":"Succeeded","completionTime":"2026-12-01T14:26:58Z"}],
"lastAppliedTime":"2026-12-01T13:56:58Z","lastDriftCheckTime":"2026-12-01T14:26:58Z"}}`

// BenchmarkObjectCache reports the heap a TerraformCluster that was applied
// and checked for drift takes in the manager's informer: decoded from JSON
// (every string its own, as from a watch), transformed and indexed as the
// manager does.
func BenchmarkObjectCache(b *testing.B) {
	const n = 10000
	wire := make([][]byte, n)
	for i := range wire {
		id := fmt.Sprintf("%05d", i)
		wire[i] = []byte(strings.NewReplacer("c00000", "c"+id, "000000000000\"", "0000000"+id+"\"", "100000", fmt.Sprint(100000+i)).Replace(appliedCluster))
	}
	perObject := heapPerObject(b, wire, func(data []byte) (any, error) {
		tc := &infrav1.TerraformCluster{}
		return tc, json.Unmarshal(data, tc)
	}, cacheTransform(newSharedStrings(), nil), nil)
	b.ReportMetric(perObject, "B/object")
}

// capiObjects are a Machine and a Cluster as Cluster API v1.14 serves them
// once the machine is running (its status trimmed of most conditions).
var capiObjects = map[string]string{
	"Machine": `{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine",
"metadata":{"name":"c00000-md-0-x7k2p-00000","namespace":"fleet","uid":"7c1d0b7e-2a44-4b8e-9d1f-000000000000","resourceVersion":"100000","generation":3,
"creationTimestamp":"2026-12-01T13:56:54Z",
"labels":{"cluster.x-k8s.io/cluster-name":"c00000","cluster.x-k8s.io/deployment-name":"c00000-md-0","cluster.x-k8s.io/set-name":"c00000-md-0-x7k2p","machine-template-hash":"1736184213"},
"annotations":{"machine.cluster.x-k8s.io/certificates-expiry":"2027-12-01T13:57:40Z"},
"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachineSet","name":"c00000-md-0-x7k2p","uid":"6f1c0b7e-2a44-4b8e-9d1f-000000000000","controller":true,"blockOwnerDeletion":true}],
"finalizers":["machine.cluster.x-k8s.io"],
"managedFields":[{"manager":"manager","operation":"Update","apiVersion":"cluster.x-k8s.io/v1beta2","time":"2026-12-01T13:56:54Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]},
"spec":{"clusterName":"c00000","version":"v1.37.2","providerID":"localcloud://i-00000",
"bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"KubeadmConfig","name":"c00000-md-0-x7k2p-00000"},"dataSecretName":"c00000-md-0-x7k2p-00000"},
"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TerraformMachine","name":"c00000-md-0-x7k2p-00000"},
"deletion":{"nodeDrainTimeoutSeconds":0}},
"status":{"phase":"Running","observedGeneration":3,"nodeRef":{"name":"c00000-md-0-x7k2p-00000"},
"initialization":{"bootstrapDataSecretCreated":true,"infrastructureProvisioned":true},
"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],
"conditions":[{"type":"Available","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-01T13:57:40Z","reason":"Available"},
{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-12-01T13:57:40Z","reason":"Ready"}]}}`,
	"Cluster": `{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Cluster",
"metadata":{"name":"c00000","namespace":"fleet","uid":"7c1d0b7e-2a44-4b8e-9d1f-000000000000","resourceVersion":"100000","generation":2,
"creationTimestamp":"2026-12-01T13:56:54Z","labels":{"cluster.x-k8s.io/cluster-name":"c00000"},"finalizers":["cluster.cluster.x-k8s.io"]},
"spec":{"controlPlaneEndpoint":{"host":"c00000.fleet.test","port":6443},
"controlPlaneRef":{"apiGroup":"controlplane.cluster.x-k8s.io","kind":"KubeadmControlPlane","name":"c00000"},
"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"TerraformCluster","name":"c00000"}},
"status":{"phase":"Provisioned","observedGeneration":2,"initialization":{"infrastructureProvisioned":true,"controlPlaneInitialized":true},
"conditions":[{"type":"Available","status":"True","observedGeneration":2,"lastTransitionTime":"2026-12-01T13:57:40Z","reason":"Available"}]}}`,
}

// BenchmarkCAPICache reports the heap a Cluster API Machine or Cluster
// takes in the manager's informers: decoded from JSON (every string its
// own, as from a watch), transformed (capi.Trim) and indexed as the
// manager does.
func BenchmarkCAPICache(b *testing.B) {
	for _, kind := range []capi.Kind{capi.Machine, capi.Cluster} {
		b.Run(kind.Kind, func(b *testing.B) {
			const n = 10000
			wire := make([][]byte, n)
			for i := range wire {
				id := fmt.Sprintf("%05d", i)
				wire[i] = []byte(strings.NewReplacer("00000", id, "000000000000\"", "0000000"+id+"\"").Replace(capiObjects[kind.Kind]))
			}
			perObject := heapPerObject(b, wire, func(data []byte) (any, error) {
				return runtime.Decode(unstructured.UnstructuredJSONScheme, data)
			}, cacheTransform(newSharedStrings(), kind.Trim), nil)
			b.ReportMetric(perObject, "B/object")
		})
	}
}

// TestCAPIInformersList: the manager's informers of Cluster API objects
// cache capi.Objects, and their listers give them (the dynamic informer's
// own lister panics on anything but an unstructured object).
func TestCAPIInformersList(t *testing.T) {
	var wire map[string]any
	if err := json.Unmarshal([]byte(capiObjects["Machine"]), &wire); err != nil {
		t.Fatal(err)
	}
	machine := &unstructured.Unstructured{Object: wire}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{capi.Machine.Resource: "MachineList"}, machine)
	f := newCAPIFactory(dyn, 0, "", nil, newSharedStrings())
	inf := f.ForResource(capi.Machine.Resource)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		t.Fatal("no sync")
	}
	got, err := inf.Lister().ByNamespace("fleet").Get(machine.GetName())
	if err != nil {
		t.Fatal(err)
	}
	o, ok := got.(*capi.Object)
	if !ok || o.Spec.DataSecretName != "c00000-md-0-x7k2p-00000" || o.Kind != "Machine" {
		t.Errorf("listed %#v, want the Machine as a capi.Object", got)
	}
}
