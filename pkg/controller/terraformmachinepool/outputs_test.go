package terraformmachinepool

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/captf/captf/pkg/run"
)

func TestReadProviderIDs(t *testing.T) {
	tests := map[string]struct {
		outputs map[string]run.Output
		held    []string
		want    []string
		wantErr string
	}{
		"a list":                {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`["p://1","p://2"]`)}}, want: []string{"p://1", "p://2"}},
		"an empty list":         {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`[]`)}}, want: []string{}},
		"no output":             {outputs: map[string]run.Output{}, wantErr: "has no provider_ids output"},
		"not a list":            {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`"p://1"`)}}, wantErr: "want a list of strings"},
		"an empty string":       {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`["p://1",""]`)}}, wantErr: "an empty provider ID"},
		"an escape":             {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`["p://1","p://\u001b[2J"]`)}}, wantErr: "spaces or control characters"},
		"an escape held before": {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`["p://1","p://\u001b[2J"]`)}}, held: []string{"p://\x1b[2J"}, want: []string{"p://1", "p://\x1b[2J"}},
		"not an ID":             {outputs: map[string]run.Output{"provider_ids": {Value: json.RawMessage(`["p://1","i-2"]`)}}, wantErr: `output provider_ids has "i-2": must look like <provider>://<id>`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ids, err := readProviderIDs(tc.outputs, tc.held)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(ids, tc.want) {
				t.Errorf("ids = %v (%v), want %v", ids, err, tc.want)
			}
		})
	}
}
