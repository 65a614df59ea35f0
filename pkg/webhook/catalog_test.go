package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

// TestCatalogRules: an object naming a catalog module is admitted when the
// entry selects its namespace and resolved the version, and its variables
// fit; a spec left as it was is not checked again.
func TestCatalogRules(t *testing.T) {
	entry := &infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "vpc"},
		Spec: infrav1.TerraformModuleSpec{Versions: []infrav1.CatalogVersion{{Name: "v1"}, {Name: "v2"}, {Name: "v3"}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "net"}}},
		Status: infrav1.TerraformModuleStatus{Versions: []infrav1.CatalogVersionStatus{{Name: "v1", Digest: "sha256:x",
			Variables: []infrav1.ModuleVariable{{Name: "region", Type: "string", Required: true, Description: "Where."}}},
			{Name: "v2", Error: "git ls-remote: no such tag"}}}}
	deleting := entry.DeepCopy()
	deleting.Name, deleting.DeletionTimestamp = "old-vpc", &metav1.Time{}
	labels := map[string]map[string]string{"ns": {"team": "net"}, "other": {"team": "web"}}
	h := &Handler{
		CatalogEntry: func(_ context.Context, name string) (*infrav1.TerraformModule, error) {
			switch name {
			case entry.Name:
				return entry, nil
			case deleting.Name:
				return deleting, nil
			}
			return nil, apierrors.NewNotFound(infrav1.Resource("terraformmodules"), name)
		},
		NamespaceLabels: func(_ context.Context, ns string) (map[string]string, error) { return labels[ns], nil },
	}
	cluster := func(ns, name, version string, vars ...infrav1.Variable) *infrav1.TerraformCluster {
		tc := &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns}}
		tc.Spec.Module.CatalogRef = &infrav1.CatalogRef{Name: name, Version: version}
		tc.Spec.Variables = vars
		return tc
	}
	region := infrav1.Variable{Name: "region", Value: &runtime.RawExtension{Raw: []byte(`"eu"`)}}
	wrong := infrav1.Variable{Name: "region", Value: &runtime.RawExtension{Raw: []byte(`[1]`)}}
	cases := []struct {
		name     string
		obj, old *infrav1.TerraformCluster
		want     string
	}{
		{"fits", cluster("ns", "vpc", "v1", region), nil, ""},
		{"no such entry", cluster("ns", "db", "v1", region), nil, `spec.module.catalogRef.name: Not found: "db: the module catalog has no such entry`},
		{"an entry being deleted", cluster("ns", "old-vpc", "v1", region), nil, "spec.module.catalogRef.name: Forbidden: catalog module old-vpc is being deleted"},
		{"an entry being deleted, named before", cluster("ns", "old-vpc", "v1", region), cluster("ns", "old-vpc", "v1", region), ""},
		{"a namespace not selected", cluster("other", "vpc", "v1", region), nil, "spec.module.catalogRef.name: Forbidden: namespace other may not use catalog module vpc"},
		{"a version not offered", cluster("ns", "vpc", "v4", region), nil, `spec.module.catalogRef.version: Not found: "v4: catalog module vpc offers v1, v2, v3"`},
		{"a version being resolved", cluster("ns", "vpc", "v3", region), nil, "version v3 of catalog module vpc is not resolved yet (it is being resolved)"},
		{"a version that failed to resolve", cluster("ns", "vpc", "v2", region), nil, "not resolved yet (resolving it failed: git ls-remote: no such tag)"},
		{"a required variable missing", cluster("ns", "vpc", "v1"), nil, "catalog module vpc v1 requires variable region (string): Where."},
		{"a value of the wrong type", cluster("ns", "vpc", "v1", wrong), nil, "region is not a string"},
		{"an unchanged spec is not checked again", cluster("other", "vpc", "v1", wrong), cluster("other", "vpc", "v1", wrong), ""},
		{"a changed one is", cluster("ns", "vpc", "v1", wrong), cluster("ns", "vpc", "v1", region), "region is not a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			op := admissionv1.Create
			var old *infrav1.TerraformCluster
			if tc.old != nil {
				op, old = admissionv1.Update, tc.old
			}
			req := request(op, "alice", tc.obj, nil)
			if old != nil {
				req = request(op, "alice", tc.obj, old)
			}
			req.Namespace = tc.obj.Namespace
			wantAdmission(t, h.Admit(context.Background(), "TerraformCluster", req), tc.want)
		})
	}
}
