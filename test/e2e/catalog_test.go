package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/test/framework"
)

// catalogModule is a catalog module's code: typed variables with their
// descriptions, outputs, no resource (a resolve plans nothing anyway).
const catalogModule = `
variable "region" {
  type        = string
  description = "The region the network is made in."
}
variable "cidrs" {
  type    = list(string)
  default = ["10.0.0.0/16"]
}
variable "captf_name" {
  type = string
}
output "network" {
  value       = "${var.region}:${join(",", var.cidrs)}"
  description = "The network's address."
}
`

// gitServer is a git server on loopback for one test; user set: it asks
// for basic auth.
func gitServer(t *testing.T, user, password string) *framework.GitServer {
	t.Helper()
	g, err := framework.StartGitServer(t.TempDir(), user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// createCatalogEntry creates a TerraformModule (cluster-scoped: named after
// the test's namespace) and deletes it when the test ends.
func (e *env) createCatalogEntry(m *infrav1.TerraformModule) *infrav1.TerraformModule {
	e.t.Helper()
	m.Name = e.ns + "-" + m.Name
	created, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Create(context.Background(), m, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = plane.Captf.InfrastructureV1alpha1().TerraformModules().Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	return created
}

// waitForVersion waits until version of catalog entry name is resolved,
// or its resolve failed.
func (e *env) waitForVersion(name, version string, timeout time.Duration) infrav1.CatalogVersionStatus {
	e.t.Helper()
	var last *infrav1.TerraformModule
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		m, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		last = m
		for _, st := range m.Status.Versions {
			if st.Name == version && (st.Digest != "" || st.Error != "") {
				return st
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	e.t.Fatalf("version %s of %s not resolved in %v: status %+v", version, name, timeout, last.Status)
	return infrav1.CatalogVersionStatus{}
}

// TestCatalogDigestPinned (issue 52): a catalog version resolves once, to
// the commit its branch named then and the digest of that code, with the
// module's variables and outputs; the branch moving on changes none of it,
// and a new version naming the branch gets the new commit.
func TestCatalogDigestPinned(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManager()
	git := gitServer(t, "", "")
	first, err := git.Commit("network", "main", map[string]string{"modules/network/main.tf": catalogModule})
	if err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "network"},
		Spec: infrav1.TerraformModuleSpec{
			Source:            infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/network.git", Path: "modules/network"}},
			Versions:          []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
			NamespaceSelector: &metav1.LabelSelector{},
		}})
	v1 := e.waitForVersion(entry.Name, "v1", 2*time.Minute)
	if v1.Error != "" || v1.Commit != first || !strings.HasPrefix(v1.Digest, "sha256:") {
		t.Fatalf("v1 resolved to %+v, want commit %s and a digest", v1, first)
	}
	if want := "git::" + git.URL + "/network.git//modules/network?ref=" + first; v1.Source != want {
		t.Errorf("v1 source %q, want %q", v1.Source, want)
	}
	vars := map[string]infrav1.ModuleVariable{}
	for _, v := range v1.Variables {
		vars[v.Name] = v
	}
	if r := vars["region"]; !r.Required || r.Type != "string" || r.Description != "The region the network is made in." {
		t.Errorf("variable region recorded as %+v", r)
	}
	if c := vars["cidrs"]; c.Required || c.Type != "list(string)" || c.Default == nil || string(c.Default.Raw) != `["10.0.0.0/16"]` {
		t.Errorf("variable cidrs recorded as %+v", c)
	}
	if len(v1.Outputs) != 1 || v1.Outputs[0].Name != "network" || v1.Outputs[0].Description != "The network's address." {
		t.Errorf("outputs recorded as %+v", v1.Outputs)
	}

	// The branch moves on; a second version names it.
	second, err := git.Commit("network", "main", map[string]string{"modules/network/extra.tf": `output "extra" { value = 1 }`})
	if err != nil {
		t.Fatal(err)
	}
	entry, err = plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, entry.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry.Spec.Versions = append(entry.Spec.Versions, infrav1.CatalogVersion{Name: "v2", Ref: "main"})
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Update(ctx, entry, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v2 := e.waitForVersion(entry.Name, "v2", 2*time.Minute)
	if v2.Error != "" || v2.Commit != second || v2.Digest == v1.Digest {
		t.Errorf("v2 resolved to commit %s digest %s (error %q), want commit %s and another digest than v1's", v2.Commit, v2.Digest, v2.Error, second)
	}
	again := e.waitForVersion(entry.Name, "v1", time.Second)
	if again.Commit != v1.Commit || again.Digest != v1.Digest || !again.ResolvedTime.Equal(v1.ResolvedTime) {
		t.Errorf("v1 after the branch moved: commit %s digest %s, want %s %s as first resolved", again.Commit, again.Digest, v1.Commit, v1.Digest)
	}
	// The resolve Jobs are gone once recorded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		jobs, err := plane.Kube.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d resolve Jobs left after the versions were recorded", len(jobs.Items))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
}
