package manager

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
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
