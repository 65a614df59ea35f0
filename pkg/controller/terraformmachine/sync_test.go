package terraformmachine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/controller/util"
	"github.com/captf/captf/pkg/controller/workspace"
	"github.com/captf/captf/pkg/runner"
)

func TestWaiting(t *testing.T) {
	cluster := func(provisioned, cpInitialized bool) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "work"},
			"status": map[string]any{"initialization": map[string]any{
				"infrastructureProvisioned": provisioned, "controlPlaneInitialized": cpInitialized}},
		}}
	}
	machine := func(dataSecret string, controlPlane bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"bootstrap": map[string]any{}}}}
		if dataSecret != "" {
			u.Object["spec"].(map[string]any)["bootstrap"].(map[string]any)["dataSecretName"] = dataSecret
		}
		if controlPlane {
			u.SetLabels(map[string]string{workspace.ControlPlaneLabel: ""})
		}
		return u
	}
	tests := map[string]struct {
		cluster, machine *unstructured.Unstructured
		want             string
	}{
		"no Cluster":                         {machine: machine("b", false), want: ReasonWaitingForClusterInfrastructureReady},
		"Cluster infrastructure not ready":   {cluster: cluster(false, false), machine: machine("b", false), want: ReasonWaitingForClusterInfrastructureReady},
		"worker before the control plane":    {cluster: cluster(true, false), machine: machine("", false), want: ReasonWaitingForControlPlaneInitialized},
		"worker after the control plane":     {cluster: cluster(true, true), machine: machine("", false), want: ReasonWaitingForBootstrapData},
		"control-plane machine without data": {cluster: cluster(true, false), machine: machine("", true), want: ReasonWaitingForBootstrapData},
		"ready to apply":                     {cluster: cluster(true, false), machine: machine("b", false), want: ""},
	}
	c := &Controller{}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &syncCtx{tm: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workspace.ClusterNameLabel: "work"}}},
				cluster: tc.cluster, machine: tc.machine}
			if got, msg := c.waiting(s); got != tc.want {
				t.Errorf("waiting = %q (%s), want %q", got, msg, tc.want)
			}
		})
	}
}

func TestReadMachineOutputs(t *testing.T) {
	out := func(kv ...string) map[string]runner.Output {
		m := map[string]runner.Output{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = runner.Output{Value: json.RawMessage(kv[i+1])}
		}
		return m
	}
	tests := map[string]struct {
		outputs   map[string]runner.Output
		wantID    string
		wantAddrs int
		wantErr   string
	}{
		"all outputs":             {outputs: out("provider_id", `"aws:///a/i-1"`, "addresses", `[{"type":"InternalIP","address":"10.0.0.1"}]`, "failure_domain", `"a"`), wantID: "aws:///a/i-1", wantAddrs: 1},
		"plain addresses":         {outputs: out("provider_id", `"x"`, "addresses", `["10.0.0.1","10.0.0.2"]`), wantID: "x", wantAddrs: 2},
		"no provider_id":          {outputs: out("addresses", `[]`), wantErr: "has no provider_id output"},
		"empty provider_id":       {outputs: out("provider_id", `""`), wantErr: "want a non-empty string"},
		"unknown address type":    {outputs: out("provider_id", `"x"`, "addresses", `[{"type":"Public","address":"1.2.3.4"}]`), wantErr: `address type "Public"`},
		"failure_domain not text": {outputs: out("provider_id", `"x"`, "failure_domain", `1`), wantErr: "want a string"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id, addrs, _, err := readMachineOutputs(tc.outputs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || id != tc.wantID || len(addrs) != tc.wantAddrs {
				t.Errorf("got %q, %d addresses, %v", id, len(addrs), err)
			}
		})
	}
}

func TestRender(t *testing.T) {
	bootstrap := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot", Namespace: "ns"}, Data: map[string][]byte{"value": []byte("#cloud-config")}}
	machine := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "m-0", "labels": map[string]any{workspace.ControlPlaneLabel: ""}},
		"spec":     map[string]any{"bootstrap": map[string]any{"dataSecretName": "boot"}, "failureDomain": "zone-b", "version": "v1.37.2"},
	}}
	tc := &infrav1.TerraformCluster{Status: infrav1.TerraformClusterStatus{WorkspaceStatus: infrav1.WorkspaceStatus{
		Outputs: map[string]runtime.RawExtension{"vpc_id": {Raw: []byte(`"vpc-1"`)}}}}}
	tests := map[string]struct {
		objects    []runtime.Object
		want       []string
		wantReason string
	}{
		"bootstrap data, control plane, failure domain, version, exports": {
			objects: []runtime.Object{bootstrap},
			want: []string{`"captf_bootstrap_data": "#cloud-config"`, `"captf_bootstrap_format": "cloud-config"`, `"captf_control_plane": true`,
				`"captf_failure_domain": "zone-b"`, `"captf_kubernetes_version": "v1.37.2"`, `"vpc_id": "vpc-1"`, `"captf_machine_name": "m-0"`},
		},
		"bootstrap Secret missing": {wantReason: workspace.ReasonBootstrapDataUnavailable},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := &Controller{kube: fake.NewClientset(tt.objects...)}
			s := &syncCtx{tm: &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "tm", Namespace: "ns"},
				Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "x"}}}},
				machine: machine, tc: tc}
			in, err := c.render(context.Background(), s)
			if tt.wantReason != "" {
				var ie *util.InputError
				if !errors.As(err, &ie) || ie.Reason != tt.wantReason {
					t.Fatalf("err = %v, want %s", err, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(in.Variables), w) {
					t.Errorf("inputs lack %s:\n%s", w, in.Variables)
				}
			}
		})
	}
}
