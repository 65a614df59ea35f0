package workspace

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

func TestRender(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns"}, Data: map[string][]byte{"token": []byte("s3cret"), "tags": []byte(`{"a":1}`)}},
	)
	ws := func(vars ...infrav1.Variable) infrav1.WorkspaceSpec {
		return infrav1.WorkspaceSpec{Module: infrav1.Module{Inline: "x"}, Variables: vars}
	}
	val := func(name, raw string) infrav1.Variable {
		return infrav1.Variable{Name: name, Value: &runtime.RawExtension{Raw: []byte(raw)}}
	}
	fromSecret := func(name, key string, format infrav1.ValueFormat) infrav1.Variable {
		return infrav1.Variable{Name: name, ValueFrom: &infrav1.VariableSource{Format: format,
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: key}}}
	}
	tests := map[string]struct {
		ws         infrav1.WorkspaceSpec
		wantVars   []string
		wantReason string
		// wantSensitive are the variables the runner keeps out of logs.
		wantSensitive []string
	}{
		"values and CAPTF inputs":       {ws: ws(val("region", `"eu-1"`)), wantVars: []string{`"region": "eu-1"`, `"captf_name": "prod"`}},
		"a Secret key as a string":      {ws: ws(fromSecret("token", "token", "")), wantVars: []string{`"token": "s3cret"`}, wantSensitive: []string{"token"}},
		"a Secret key as JSON":          {ws: ws(fromSecret("tags", "tags", infrav1.ValueFormatJSON)), wantVars: []string{"\"tags\": {\n    \"a\": 1"}, wantSensitive: []string{"tags"}},
		"a missing key":                 {ws: ws(fromSecret("x", "nope", "")), wantReason: "VariableUnavailable"},
		"value and valueFrom both":      {ws: ws(infrav1.Variable{Name: "x", Value: &runtime.RawExtension{Raw: []byte("1")}, ValueFrom: &infrav1.VariableSource{}}), wantReason: "InvalidVariable"},
		"JSON format, not JSON content": {ws: ws(fromSecret("token", "token", infrav1.ValueFormatJSON)), wantReason: "InvalidVariable"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in, err := Render(ctx, client, nil, "ns", tc.ws, map[string]any{"captf_name": "prod"})
			if tc.wantReason != "" {
				ie, ok := err.(*InputError)
				if !ok || ie.Reason != tc.wantReason {
					t.Fatalf("err = %v, want an InputError %s", err, tc.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.wantVars {
				if !strings.Contains(string(in.Variables), w) {
					t.Errorf("tfvars %s do not contain %s", in.Variables, w)
				}
			}
			if !slices.Equal(in.Sensitive, tc.wantSensitive) {
				t.Errorf("sensitive %q, want %q", in.Sensitive, tc.wantSensitive)
			}
		})
	}

	a, _ := Render(ctx, client, nil, "ns", ws(val("a", "1"), val("b", "2")), nil)
	b, _ := Render(ctx, client, nil, "ns", ws(val("b", "2"), val("a", "1")), nil)
	c, _ := Render(ctx, client, nil, "ns", ws(val("a", "1"), val("b", "3")), nil)
	if a.Hash != b.Hash {
		t.Error("the order of variables changed the hash")
	}
	if a.Hash == c.Hash {
		t.Error("a changed value kept the hash")
	}
	// Marked sensitive late (issue 30, item 9): the next apply must carry
	// the new list to the durable inputs, so the hash changes.
	secret := ws(val("a", "1"), val("b", "2"))
	secret.Variables[1].Sensitive = true
	d, _ := Render(ctx, client, nil, "ns", secret, nil)
	if a.Hash == d.Hash {
		t.Error("marking a variable sensitive kept the hash")
	}
	if got := HashSecretData(d.SecretData()); got == HashSecretData(a.SecretData()) {
		t.Error("stored inputs that differ in what is sensitive hash alike")
	}
}
