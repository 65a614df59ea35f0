package terraformmachine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/captf/captf/pkg/run"
)

func TestReadMachineOutputs(t *testing.T) {
	out := func(kv ...string) map[string]run.Output {
		m := map[string]run.Output{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = run.Output{Value: json.RawMessage(kv[i+1])}
		}
		return m
	}
	tests := map[string]struct {
		outputs   map[string]run.Output
		held      string
		wantID    string
		wantAddrs int
		wantErr   string
	}{
		"all outputs":                        {outputs: out("provider_id", `"aws:///a/i-1"`, "addresses", `[{"type":"InternalIP","address":"10.0.0.1"}]`, "failure_domain", `"a"`), wantID: "aws:///a/i-1", wantAddrs: 1},
		"plain addresses":                    {outputs: out("provider_id", `"p://x"`, "addresses", `["10.0.0.1","10.0.0.2"]`), wantID: "p://x", wantAddrs: 2},
		"no provider_id":                     {outputs: out("addresses", `[]`), wantErr: "has no provider_id output"},
		"empty provider_id":                  {outputs: out("provider_id", `""`), wantErr: "want a non-empty string"},
		"provider_id not an ID":              {outputs: out("provider_id", `"i-0123"`), wantErr: `output provider_id = "i-0123": must look like <provider>://<id>`},
		"provider_id with a line of its own": {outputs: out("provider_id", `"p://x\n└─Machine/forged"`), wantErr: "spaces or control characters"},
		"the same, held before":              {outputs: out("provider_id", `"p://x\n└─Machine/forged"`), held: "p://x\n└─Machine/forged", wantID: "p://x\n└─Machine/forged"},
		"unknown address type":               {outputs: out("provider_id", `"p://x"`, "addresses", `[{"type":"Public","address":"1.2.3.4"}]`), wantErr: `address type "Public"`},
		"failure_domain not text":            {outputs: out("provider_id", `"p://x"`, "failure_domain", `1`), wantErr: "want a string"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id, addrs, _, err := readMachineOutputs(tc.outputs, tc.held)
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
