package terraformcluster

import (
	"encoding/json"
	"strings"
	"testing"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// TestReadClusterOutputs: both documented shapes of each output.
func TestReadClusterOutputs(t *testing.T) {
	out := func(kv ...string) map[string]run.Output {
		m := map[string]run.Output{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = run.Output{Value: json.RawMessage(kv[i+1])}
		}
		return m
	}
	yes := true
	tests := map[string]struct {
		outputs      map[string]run.Output
		wantEndpoint *infrav1.APIEndpoint
		wantDomains  []infrav1.FailureDomain
		wantErr      string
	}{
		"host:port":                     {outputs: out("control_plane_endpoint", `"api.example.com:6443"`), wantEndpoint: &infrav1.APIEndpoint{Host: "api.example.com", Port: 6443}},
		"IPv6 host:port":                {outputs: out("control_plane_endpoint", `"[fd00::1]:443"`), wantEndpoint: &infrav1.APIEndpoint{Host: "fd00::1", Port: 443}},
		"{host, port}":                  {outputs: out("control_plane_endpoint", `{"host":"10.0.0.1","port":6443}`), wantEndpoint: &infrav1.APIEndpoint{Host: "10.0.0.1", Port: 6443}},
		"no port":                       {outputs: out("control_plane_endpoint", `"api.example.com"`), wantErr: `want "host:port"`},
		"port out of range":             {outputs: out("control_plane_endpoint", `"h:70000"`), wantErr: `want "host:port"`},
		"object with port out of range": {outputs: out("control_plane_endpoint", `{"host":"h","port":0}`), wantErr: "port from 1 to 65535"},
		"failure domains as a list": {outputs: out("failure_domains", `[{"name":"b"},{"name":"a","controlPlane":true}]`),
			wantDomains: []infrav1.FailureDomain{{Name: "a", ControlPlane: &yes}, {Name: "b"}}},
		"failure domains as a map, sorted": {outputs: out("failure_domains", `{"z":{"attributes":{"k":"v"}},"a":{"controlPlane":true}}`),
			wantDomains: []infrav1.FailureDomain{{Name: "a", ControlPlane: &yes}, {Name: "z", Attributes: map[string]string{"k": "v"}}}},
		"a failure domain without a name":  {outputs: out("failure_domains", `[{"controlPlane":true}]`), wantErr: "has no name"},
		"failure domains of another shape": {outputs: out("failure_domains", `"a"`), wantErr: "want a list"},
		"neither output":                   {outputs: out()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			endpoint, domains, err := readClusterOutputs(tc.outputs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (endpoint == nil) != (tc.wantEndpoint == nil) || endpoint != nil && *endpoint != *tc.wantEndpoint {
				t.Errorf("endpoint = %+v, want %+v", endpoint, tc.wantEndpoint)
			}
			if len(domains) != len(tc.wantDomains) {
				t.Fatalf("domains = %+v, want %+v", domains, tc.wantDomains)
			}
			for i, d := range domains {
				w := tc.wantDomains[i]
				if d.Name != w.Name || (d.ControlPlane == nil) != (w.ControlPlane == nil) || len(d.Attributes) != len(w.Attributes) {
					t.Errorf("domain %d = %+v, want %+v", i, d, w)
				}
			}
		})
	}
}
