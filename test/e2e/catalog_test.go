package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/capi"
	"github.com/captf/captf/pkg/names"
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
	e.t.Cleanup(func() { deleteCatalogEntry(created.Name) })
	return created
}

// deleteCatalogEntry deletes an entry at a test's end, its finalizer too:
// the test's objects outlive it, and every manager of the tests after
// would keep looking for the users of an entry held for them.
func deleteCatalogEntry(name string) {
	ctx := context.Background()
	_ = plane.Captf.InfrastructureV1alpha1().TerraformModules().Delete(ctx, name, metav1.DeleteOptions{})
	_, _ = plane.Captf.InfrastructureV1alpha1().TerraformModules().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
}

// waitForVersion waits until version of catalog entry name is resolved,
// or its resolve failed.
func (e *env) waitForVersion(name, version string, timeout time.Duration) infrav1.CatalogVersionStatus {
	e.t.Helper()
	var last *infrav1.TerraformModule
	var found infrav1.CatalogVersionStatus
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		m, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = m
		for _, st := range m.Status.Versions {
			if st.Name == version && (st.Digest != "" || st.Error != "") {
				found = st
				return true, nil
			}
		}
		return false, nil
	})
	if err == nil {
		return found
	}
	if last == nil {
		e.t.Fatal(err)
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
	var left int
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		jobs, err := plane.Kube.BatchV1().Jobs(e.ns).List(ctx, metav1.ListOptions{})
		left = len(jobs.Items)
		return err == nil && left == 0, nil
	})
	if err != nil {
		t.Errorf("%d resolve Jobs left after the versions were recorded", left)
	}
}

// resolvedEntry is a catalog entry of catalogModule at version v1, selecting
// namespaces by selector, once resolved.
func (e *env) resolvedEntry(name string, selector *metav1.LabelSelector) *infrav1.TerraformModule {
	e.t.Helper()
	git := gitServer(e.t, "", "")
	if _, err := git.Commit(name, "main", map[string]string{"main.tf": catalogModule}); err != nil {
		e.t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: infrav1.TerraformModuleSpec{
			Source:            infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/" + name + ".git"}},
			Versions:          []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
			NamespaceSelector: selector,
		}})
	if st := e.waitForVersion(entry.Name, "v1", 2*time.Minute); st.Error != "" {
		e.t.Fatalf("resolving v1: %s", st.Error)
	}
	return entry
}

// catalogCluster is a TerraformCluster of catalog module entry v1 with
// variables.
func (e *env) catalogCluster(name, entry string, vars ...infrav1.Variable) *infrav1.TerraformCluster {
	return &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Module:    infrav1.Module{CatalogRef: &infrav1.CatalogRef{Name: entry, Version: "v1"}},
			Variables: vars,
		}}}
}

// createCatalogCluster creates a Cluster and its TerraformCluster of the
// local cloud's module published as version of catalog entry.
func (e *env) createCatalogCluster(name, entry, version string) *infrav1.TerraformCluster {
	e.t.Helper()
	tc := e.catalogCluster(name, entry, jsonVar("instance_dir", fmt.Sprintf("%q", e.instances)))
	tc.Spec.Module.CatalogRef.Version = version
	tc.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": name}
	tc.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(e.newCluster(name, false))}
	return e.create(tc)
}

func jsonVar(name, raw string) infrav1.Variable {
	return infrav1.Variable{Name: name, Value: &runtime.RawExtension{Raw: []byte(raw)}}
}

// TestCatalogVariablesCheckedAtAdmission (issue 52): a wrong variable used
// to be found by the first plan, in a Job; the webhook now refuses it when
// the object is written, with the module's own description.
func TestCatalogVariablesCheckedAtAdmission(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	entry := e.resolvedEntry("network", &metav1.LabelSelector{})
	tcs := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	cases := []struct {
		name string
		vars []infrav1.Variable
		want string // "" admitted
	}{
		{"a required variable missing", nil,
			"spec.variables: Required value: catalog module " + entry.Name + " v1 requires variable region (string): The region the network is made in."},
		{"an unknown name", []infrav1.Variable{jsonVar("region", `"eu"`), jsonVar("regoin", `"eu"`)},
			`spec.variables[1].name: Not found: "regoin: catalog module ` + entry.Name + ` v1 declares no such variable (it declares cidrs, region)"`},
		{"a value of the wrong type", []infrav1.Variable{jsonVar("region", `"eu"`), jsonVar("cidrs", `"10.0.0.0/8"`)},
			`spec.variables[1].value: Invalid value: "\"10.0.0.0/8\"": cidrs is not a list(string)`},
		{"a wrong type, with the description", []infrav1.Variable{jsonVar("region", `{"a":1}`)},
			`region is not a string: string required, but have object: The region the network is made in.`},
		{"all good", []infrav1.Variable{jsonVar("region", `"eu"`), jsonVar("cidrs", `["10.1.0.0/16"]`)}, ""},
	}
	for i, tc := range cases {
		_, err := tcs.Create(ctx, e.catalogCluster(fmt.Sprintf("c%d", i), entry.Name, tc.vars...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal with %q", tc.name, err, tc.want)
		}
	}
	_, err := tcs.Create(ctx, e.catalogCluster("nover", entry.Name, jsonVar("region", `"eu"`)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	bad := e.catalogCluster("badver", entry.Name, jsonVar("region", `"eu"`))
	bad.Spec.Module.CatalogRef.Version = "v9"
	if _, err := tcs.Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.module.catalogRef.version: Not found: \"v9: catalog module "+entry.Name+" offers v1\"") {
		t.Errorf("a version the entry does not offer: %v", err)
	}
}

// TestCatalogNamespaceSelector (issue 52): an entry says which namespaces
// may use it; the webhook refuses the others, naming entry and namespace.
func TestCatalogNamespaceSelector(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	entry := e.resolvedEntry("db", &metav1.LabelSelector{MatchLabels: map[string]string{"team": "data"}})
	tcs := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	want := "spec.module.catalogRef.name: Forbidden: namespace " + e.ns + " may not use catalog module " + entry.Name
	if _, err := tcs.Create(ctx, e.catalogCluster("db", entry.Name, jsonVar("region", `"eu"`)), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a namespace the selector does not select: %v, want %q", err, want)
	}
	ns, err := plane.Kube.CoreV1().Namespaces().Get(ctx, e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["team"] = "data"
	if _, err := plane.Kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tcs.Create(ctx, e.catalogCluster("db", entry.Name, jsonVar("region", `"eu"`)), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("once the namespace is selected: %v", err)
	}
	// No selector selects no namespace.
	none := e.resolvedEntry("none", nil)
	if _, err := tcs.Create(ctx, e.catalogCluster("none", none.Name, jsonVar("region", `"eu"`)), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "may not use catalog module "+none.Name) {
		t.Errorf("an entry without a selector: %v, want a refusal", err)
	}
}

// credentialsProbe is module code that tells, at plan time, whether the
// credentials the runner fetched the module with are still there.
const credentialsProbe = `
output "credentials_visible" {
  value = fileexists("${path.module}/.terraform/captf-credentials/.git-credentials") || fileexists("${path.module}/.terraform/captf-credentials/id")
}
`

// privateCatalogCluster publishes the local cloud's module in a private git
// repository (basic auth) as a catalog entry with its credentials, and
// creates a TerraformCluster of it; it returns the cluster once Ready, the
// entry, the password, the manager and the git server.
func (e *env) privateCatalogCluster(t *testing.T) (*infrav1.TerraformCluster, *infrav1.TerraformModule, string, *framework.Manager, *framework.GitServer) {
	ctx := context.Background()
	m := e.startManagerWithWebhook()
	password := "pw-" + strings.ReplaceAll(e.ns, "-", "") + "-s3cr3t"
	git := gitServer(t, "platform", password)
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := git.Commit("cloud", "main", map[string]string{"modules/cloud/main.tf": string(module), "modules/cloud/probe.tf": credentialsProbe}); err != nil {
		t.Fatal(err)
	}
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-git", Namespace: e.ns, Labels: map[string]string{infrav1.LabelCatalogCredentials: "true"}},
		StringData: map[string]string{".git-credentials": strings.Replace(git.URL, "http://", "http://platform:"+password+"@", 1) + "\n"}}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "cloud"},
		Spec: infrav1.TerraformModuleSpec{
			Source:                infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/cloud.git", Path: "modules/cloud"}},
			Versions:              []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
			NamespaceSelector:     &metav1.LabelSelector{},
			CredentialsSecretName: creds.Name,
		}})
	if st := e.waitForVersion(entry.Name, "v1", 2*time.Minute); st.Error != "" {
		t.Fatalf("resolving a private module: %s", st.Error)
	}
	e.createCatalogCluster("private", entry.Name, "v1")
	return e.waitFor("private", 2*time.Minute, "Ready", isReady), entry, password, m, git
}

// TestCatalogPrivateGitModule (issue 52): a module in a private git
// repository, published in the catalog with its credentials, is what a
// TerraformCluster runs: at the commit the catalog pinned, with the
// credentials for fetching only.
func TestCatalogPrivateGitModule(t *testing.T) {
	e := newEnv(t)
	tc, entry, _, _, _ := e.privateCatalogCluster(t)
	v1 := e.waitForVersion(entry.Name, "v1", time.Second)
	if tc.Status.AppliedModule != v1.Digest {
		t.Errorf("applied module %q, want the catalog's digest %s", tc.Status.AppliedModule, v1.Digest)
	}
	if out := tc.Status.Outputs["credentials_visible"]; string(out.Raw) != "false" {
		t.Errorf("the module's code saw the credentials at plan time: credentials_visible = %s", out.Raw)
	}
	if tc.Status.Outputs["control_plane_endpoint"].Raw == nil {
		t.Errorf("outputs %v: the local cloud's module did not run", tc.Status.Outputs)
	}
	// What uses what: the entry's status and kubectl captf modules.
	var used infrav1.CatalogVersionStatus
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		used = e.waitForVersion(entry.Name, "v1", time.Second)
		return used.UsedBy == 1, nil
	})
	if used.UsedBy != 1 {
		t.Errorf("usedBy %d, want 1", used.UsedBy)
	}
	r := e.kubectlCaptf(pluginBinary(t), plane.KubeconfigFile, "", "modules", entry.Name)
	for _, want := range []string{entry.Name + "  v1       main", v1.Commit[:12], "1        resolved", "v1 is used by (all namespaces): tfc/private -n " + e.ns,
		"instance_dir", "Where instance files go."} {
		if r.code != 0 || !strings.Contains(r.out, want) {
			t.Errorf("kubectl captf modules %s (exit %d):\n%s%s\nwant %q", entry.Name, r.code, r.out, r.err, want)
			break
		}
	}
}

// TestCatalogPrivateGitModuleOverSSH (issue 52, item 4): a module in a
// repository served over SSH, published with a key and known_hosts (a
// kubernetes.io/ssh-auth Secret), is resolved and run, the key used for
// fetching only; an entry whose known_hosts names another host key
// (an impostor at the server's address) resolves nothing.
func TestCatalogPrivateGitModuleOverSSH(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManagerWithWebhook()
	git := gitServer(t, "", "")
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	commit, err := git.Commit("cloud", "main", map[string]string{"modules/cloud/main.tf": string(module), "modules/cloud/probe.tf": credentialsProbe})
	if err != nil {
		t.Fatal(err)
	}
	ssh, err := git.ServeSSH()
	if err != nil {
		t.Fatal(err)
	}
	other, err := gitServer(t, "", "").ServeSSH()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := strings.Cut(string(ssh.KnownHosts), " ")
	_, otherKey, _ := strings.Cut(string(other.KnownHosts), " ")
	entry := func(name string, knownHosts []byte, label string) *infrav1.TerraformModule {
		creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-ssh", Namespace: e.ns, Labels: map[string]string{label: "true"}},
			Type: corev1.SecretTypeSSHAuth, Data: map[string][]byte{corev1.SSHAuthPrivateKey: ssh.PrivateKey, "known_hosts": knownHosts}}
		if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: infrav1.TerraformModuleSpec{
				Source:                infrav1.CatalogSource{Git: &infrav1.GitSource{URL: ssh.URL + "/cloud.git", Path: "modules/cloud"}},
				Versions:              []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
				NamespaceSelector:     &metav1.LabelSelector{},
				CredentialsSecretName: creds.Name,
			}})
	}
	good := entry("cloud", ssh.KnownHosts, infrav1.LabelCatalogCredentials)
	impostor := entry("impostor", []byte(host+" "+otherKey), infrav1.LabelCatalogCredentials)
	// A Secret not made for the catalog (without its label) is not
	// handed out.
	unlabelled := entry("unlabelled", ssh.KnownHosts, "app")
	v1 := e.waitForVersion(good.Name, "v1", 2*time.Minute)
	if v1.Error != "" || v1.Commit != commit {
		t.Fatalf("resolving over SSH: %+v, want commit %s", v1, commit)
	}
	if want := "git::" + ssh.URL + "/cloud.git//modules/cloud?ref=" + commit; v1.Source != want {
		t.Errorf("source %q, want %q", v1.Source, want)
	}
	if bad := e.waitForVersion(impostor.Name, "v1", 2*time.Minute); bad.Digest != "" || !strings.Contains(bad.Error, "Host key verification failed") {
		t.Errorf("an entry whose known_hosts names another host key resolved to %+v, want a host key verification failure", bad)
	}
	if bad := e.waitForVersion(unlabelled.Name, "v1", 2*time.Minute); bad.Digest != "" || !strings.Contains(bad.Error, infrav1.LabelCatalogCredentials) {
		t.Errorf("an entry whose credentials Secret lacks the label resolved to %+v, want an error naming the label", bad)
	}
	e.createCatalogCluster("ssh", good.Name, "v1")
	tc := e.waitFor("ssh", 2*time.Minute, "Ready", isReady)
	if tc.Status.AppliedModule != v1.Digest {
		t.Errorf("applied module %q, want the catalog's digest %s", tc.Status.AppliedModule, v1.Digest)
	}
	if out := tc.Status.Outputs["credentials_visible"]; string(out.Raw) != "false" {
		t.Errorf("the module's code saw the key at plan time: credentials_visible = %s", out.Raw)
	}
	// The key's body is in no status and not in the manager's log.
	body := strings.Split(strings.TrimSpace(string(ssh.PrivateKey)), "\n")[1]
	log, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for where, v := range map[string]any{"the TerraformCluster": tc, "the catalog entries": entries.Items, "the manager's log": string(log)} {
		if b, _ := json.Marshal(v); strings.Contains(string(b), body) {
			t.Errorf("the SSH key is in %s", where)
		}
	}
}

// resolveJobs counts the resolve Jobs created in a test's namespace, from
// a watch started before any manager.
type resolveJobs struct {
	events  <-chan watch.Event
	created map[string]bool
}

func (e *env) watchResolveJobs() *resolveJobs {
	w, err := plane.Kube.BatchV1().Jobs(e.ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: names.LabelOperation + "=" + string(infrav1.OperationResolve)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(w.Stop)
	return &resolveJobs{events: w.ResultChan(), created: map[string]bool{}}
}

// collect reads the Jobs created for d (or until the first, with first
// set) and returns every one seen so far.
func (r *resolveJobs) collect(d time.Duration, first bool) map[string]bool {
	deadline := time.After(d)
	for {
		select {
		case ev := <-r.events:
			if ev.Type == watch.Added {
				r.created[ev.Object.(metav1.Object).GetName()] = true
			}
			if first && len(r.created) > 0 {
				return r.created
			}
		case <-deadline:
			return r.created
		}
	}
}

// TestCatalogShards: sharded managers (--watch-filter) share the catalog.
// The shard an entry is labelled for resolves it, once; the other shard's
// objects use it all the same.
func TestCatalogShards(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	jobs := e.watchResolveJobs()
	for _, shard := range []string{"shard-a", "shard-b"} {
		e.startManager("--leader-elect", "--watch-filter="+shard)
	}
	git := gitServer(t, "", "")
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := git.Commit("cloud", "main", map[string]string{"main.tf": string(module)}); err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "cloud", Labels: map[string]string{capi.WatchFilterLabel: "shard-a"}},
		Spec: infrav1.TerraformModuleSpec{
			Source:            infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/cloud.git"}},
			Versions:          []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
			NamespaceSelector: &metav1.LabelSelector{},
		}})
	v1 := e.waitForVersion(entry.Name, "v1", 2*time.Minute)
	if v1.Error != "" {
		t.Fatalf("resolving: %s", v1.Error)
	}
	tc := e.catalogCluster("in-shard-b", entry.Name, jsonVar("instance_dir", fmt.Sprintf("%q", e.instances)))
	tc.Spec.Module.CatalogRef.Version = "v1"
	tc.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": tc.Name, capi.WatchFilterLabel: "shard-b"}
	cluster := e.newCluster(tc.Name, false)
	patch := []byte(`{"metadata":{"labels":{"` + capi.WatchFilterLabel + `":"shard-b"}}}`)
	if _, err := plane.Dynamic.Resource(clustersGVR).Namespace(e.ns).Patch(ctx, tc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(cluster)}
	e.create(tc)
	if got := e.waitFor(tc.Name, 2*time.Minute, "Ready", isReady); got.Status.AppliedModule != v1.Digest {
		t.Errorf("shard-b applied %q, want the catalog's %s", got.Status.AppliedModule, v1.Digest)
	}
	created := jobs.collect(time.Second, false)
	if len(created) != 1 {
		t.Errorf("%d resolve Jobs (%v), want one: the shard the entry is labelled for resolves it alone", len(created), created)
	}
}

// TestCatalogEntryDeletedUnderItsUsers: a platform team deleting an entry
// that a cluster still runs does not strand the cluster: the entry stays
// (Ready InUse, naming the cluster) and still serves it, no new object may
// name it, and the cluster's own delete destroys what it made; then the
// entry goes.
func TestCatalogEntryDeletedUnderItsUsers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tc, entry, _, _, _ := e.privateCatalogCluster(t)
	modules := plane.Captf.InfrastructureV1alpha1().TerraformModules()
	if err := modules.Delete(ctx, entry.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var held *infrav1.TerraformModule
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := modules.Get(ctx, entry.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		held = m
		c := meta.FindStatusCondition(m.Status.Conditions, "Ready")
		return c != nil && c.Reason == "InUse", nil
	})
	if err != nil {
		t.Fatalf("the entry, deleted under a cluster that uses it: %v; last seen %+v", err, held)
	}
	if msg := meta.FindStatusCondition(held.Status.Conditions, "Ready").Message; !strings.Contains(msg, "TerraformCluster "+e.ns+"/"+tc.Name) {
		t.Errorf("InUse message %q does not name the cluster", msg)
	}
	_, err = plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Create(ctx, e.catalogCluster("late", entry.Name, jsonVar("instance_dir", fmt.Sprintf("%q", e.instances))), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "is being deleted") {
		t.Errorf("a new cluster naming an entry being deleted: %v, want it refused", err)
	}
	if len(e.instanceFiles()) == 0 {
		t.Fatal("the cluster made no instance to destroy")
	}
	if err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns).Delete(ctx, tc.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(tc.Name, 2*time.Minute, "deleted", func(tc *infrav1.TerraformCluster) bool { return tc == nil })
	if files := e.instanceFiles(); len(files) != 0 {
		t.Errorf("instance files left after the destroy: %v", files)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := modules.Get(ctx, entry.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the entry is still there once its last user is gone")
	}
}

// TestCatalogResolveOutlivesTheManager: the manager killed (SIGKILL) while
// a version's resolve Job runs finds that Job when it is back, records its
// result, and starts no second one.
func TestCatalogResolveOutlivesTheManager(t *testing.T) {
	e := newEnv(t)
	jobs := e.watchResolveJobs()
	m := e.startManager()
	git := gitServer(t, "", "")
	commit, err := git.Commit("network", "main", map[string]string{"main.tf": catalogModule})
	if err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "network"},
		Spec: infrav1.TerraformModuleSpec{
			Source:            infrav1.CatalogSource{Git: &infrav1.GitSource{URL: git.URL + "/network.git"}},
			Versions:          []infrav1.CatalogVersion{{Name: "v1", Ref: "main"}},
			NamespaceSelector: &metav1.LabelSelector{},
		}})
	created := jobs.collect(time.Minute, true)
	if len(created) != 1 {
		t.Fatalf("resolve Jobs %v, want one", created)
	}
	m.Kill()
	// Back only once the Job's pod runs without it: its runner waits on
	// the runner API meanwhile.
	var name string
	for name = range created {
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		job, err := plane.Kube.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && job.Status.Active > 0, nil
	})
	if err != nil {
		t.Fatalf("resolve Job %s never ran while the manager was down: %v", name, err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if v1 := e.waitForVersion(entry.Name, "v1", 2*time.Minute); v1.Error != "" || v1.Commit != commit {
		t.Fatalf("v1 resolved to %+v, want commit %s", v1, commit)
	}
	created = jobs.collect(time.Second, false)
	if len(created) != 1 {
		t.Errorf("resolve Jobs %v, want the one started before the manager was killed", created)
	}
}

// TestCatalogOCIModule (issue 52, item 1): a module package in an OCI
// registry (as OpenTofu publishes them), behind the registry's bearer
// challenge, is published with a Docker config Secret: the version's tag
// resolves to the manifest's digest, a cluster runs it, and the tag moving
// on changes nothing of the version; a version may name a digest.
func TestCatalogOCIModule(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.startManagerWithWebhook()
	password := "oci-" + strings.ReplaceAll(e.ns, "-", "") + "-s3cr3t"
	reg, err := framework.StartOCIRegistry("robot", password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := reg.Push("modules/cloud", "v1", map[string]string{"main.tf": string(module), "probe.tf": credentialsProbe})
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`{"auths":{%q:{"username":"robot","password":%q}}}`, reg.Host, password)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloud-oci", Namespace: e.ns, Labels: map[string]string{infrav1.LabelCatalogCredentials: "true"}},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(config)}}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "cloud"},
		Spec: infrav1.TerraformModuleSpec{
			Source:                infrav1.CatalogSource{OCI: &infrav1.OCISource{Repository: reg.Host + "/modules/cloud"}},
			Versions:              []infrav1.CatalogVersion{{Name: "v1"}},
			NamespaceSelector:     &metav1.LabelSelector{},
			CredentialsSecretName: creds.Name,
		}})
	v1 := e.waitForVersion(entry.Name, "v1", 2*time.Minute)
	if want := "oci://" + reg.Host + "/modules/cloud?digest=" + first; v1.Error != "" || v1.Source != want {
		t.Fatalf("v1 resolved to %+v, want source %s", v1, want)
	}
	e.createCatalogCluster("oci", entry.Name, "v1")
	tc := e.waitFor("oci", 2*time.Minute, "Ready", isReady)
	if tc.Status.AppliedModule != v1.Digest {
		t.Errorf("applied module %q, want the catalog's digest %s", tc.Status.AppliedModule, v1.Digest)
	}
	if out := tc.Status.Outputs["credentials_visible"]; string(out.Raw) != "false" {
		t.Errorf("credentials_visible = %s", out.Raw)
	}
	// The tag moves on; v1 stays what it was, and v2 names the new
	// package by its digest.
	second, err := reg.Push("modules/cloud", "v1", map[string]string{"main.tf": string(module) + "\noutput \"release\" {\n  value = \"v2\"\n}\n"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, entry.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Versions = append(got.Spec.Versions, infrav1.CatalogVersion{Name: "v2", Ref: second})
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v2 := e.waitForVersion(entry.Name, "v2", 2*time.Minute); v2.Error != "" || !strings.HasSuffix(v2.Source, second) || v2.Digest == v1.Digest {
		t.Errorf("v2 resolved to %+v, want the package of digest %s", v2, second)
	}
	if again := e.waitForVersion(entry.Name, "v1", time.Second); again.Source != v1.Source || again.Digest != v1.Digest {
		t.Errorf("v1 after its tag moved: %+v, want %+v", again, v1)
	}
	log, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), password) {
		t.Error("the registry password is in the manager's log")
	}
}

// TestCatalogCredentialsNeverLeak (issue 52): a catalog entry's credentials
// reach no run record, status, event or log.
func TestCatalogCredentialsNeverLeak(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tc, entry, password, m, _ := e.privateCatalogCluster(t)
	var places []string
	check := func(where string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		places = append(places, where)
		if strings.Contains(string(b), password) {
			t.Errorf("the password is in %s", where)
		}
	}
	check("the TerraformCluster", tc)
	got, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, entry.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("the catalog entry", got)
	records, err := plane.Kube.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "captf.io/run-record=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(records.Items) == 0 {
		t.Error("no run record to look into")
	}
	check("the run records", records.Items)
	events, err := plane.Kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("the events", events.Items)
	secrets, err := plane.Kube.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=captf"})
	if err != nil {
		t.Fatal(err)
	}
	check("CAPTF's Secrets (state, inputs, results)", secrets.Items)
	log, err := os.ReadFile(m.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	check("the manager's log", string(log))
	t.Logf("looked into %s", strings.Join(places, ", "))
}

// TestCatalogVersionIsApprovedCode (issue 52, item 5): under the approval
// policy, code an approver has not accepted waits (ModuleAwaitingApproval);
// a catalog version is code the platform team accepted, so moving an
// applied cluster to a new version runs it without a per-object approval.
func TestCatalogVersionIsApprovedCode(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	installApprovalPolicy(t)
	tc, entry, _, _, git := e.privateCatalogCluster(t)
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := git.Commit("cloud", "main", map[string]string{"modules/cloud/main.tf": string(module) + "\noutput \"release\" {\n  value = \"v2\"\n}\n"}); err != nil {
		t.Fatal(err)
	}
	got, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, entry.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.Versions = append(got.Spec.Versions, infrav1.CatalogVersion{Name: "v2", Ref: "main"})
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformModules().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v2 := e.waitForVersion(entry.Name, "v2", 2*time.Minute)
	if v2.Error != "" {
		t.Fatalf("resolving v2: %s", v2.Error)
	}
	if err := updateCluster(e.ns, tc.Name, func(c *infrav1.TerraformCluster) { c.Spec.Module.CatalogRef.Version = "v2" }); err != nil {
		t.Fatal(err)
	}
	done := e.waitFor(tc.Name, 2*time.Minute, "applied at v2 or waiting", func(c *infrav1.TerraformCluster) bool {
		w := condition(c, infrav1.ConditionPlanAwaitingApproval)
		return c.Status.AppliedModule == v2.Digest || (w != nil && w.Reason == "ModuleAwaitingApproval")
	})
	if done.Status.AppliedModule != v2.Digest {
		t.Fatalf("the catalog's v2 was not applied: %+v", condition(done, infrav1.ConditionPlanAwaitingApproval))
	}
	if string(done.Status.Outputs["release"].Raw) != `"v2"` {
		t.Errorf("outputs %v, want release v2", done.Status.Outputs)
	}
}

// registryServer is a private module registry on loopback: Terraform's
// module registry protocol, with a bearer token, whose versions' code is in
// git (the location it answers). It counts the requests it refused.
func registryServer(t *testing.T, token string, versions map[string]string) (host string, refused *atomic.Int32) {
	t.Helper()
	refused = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			refused.Add(1)
			http.Error(w, "a token is required", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/.well-known/terraform.json" {
			fmt.Fprint(w, `{"modules.v1":"/v1/modules/"}`)
			return
		}
		for v, loc := range versions {
			if r.URL.Path == "/v1/modules/platform/cloud/local/"+v+"/download" {
				w.Header().Set("X-Terraform-Get", loc)
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), refused
}

// TestCatalogRegistryModuleVersion (issue 52): a module of a private
// registry, pinned by version in the catalog: the registry's token resolves
// it, the version's code runs, and spec.module.version is gone (the catalog
// pins registry versions).
func TestCatalogRegistryModuleVersion(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	git := gitServer(t, "", "")
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := git.Commit("cloud", "main", map[string]string{"main.tf": string(module) + "output \"release\" {\n  value = \"1.0.0\"\n}\n"}); err != nil {
		t.Fatal(err)
	}
	if err := git.Tag("cloud", "main", "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := git.Commit("cloud", "main", map[string]string{"main.tf": string(module) + "output \"release\" {\n  value = \"2.0.0\"\n}\n"}); err != nil {
		t.Fatal(err)
	}
	token := "reg-" + strings.ReplaceAll(e.ns, "-", "") + "-token"
	host, refused := registryServer(t, token, map[string]string{
		"1.0.0": "git::" + git.URL + "/cloud.git?ref=v1.0.0",
		"2.0.0": "git::" + git.URL + "/cloud.git?ref=main",
	})
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-token", Namespace: e.ns, Labels: map[string]string{infrav1.LabelCatalogCredentials: "true"}},
		StringData: map[string]string{"token": token}}
	if _, err := plane.Kube.CoreV1().Secrets(e.ns).Create(ctx, creds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "registry"},
		Spec: infrav1.TerraformModuleSpec{
			Source:                infrav1.CatalogSource{Registry: &infrav1.RegistrySource{Address: host + "/platform/cloud/local"}},
			Versions:              []infrav1.CatalogVersion{{Name: "1.0.0"}, {Name: "9.9.9"}},
			NamespaceSelector:     &metav1.LabelSelector{},
			CredentialsSecretName: creds.Name,
		}})
	v1 := e.waitForVersion(entry.Name, "1.0.0", 2*time.Minute)
	if v1.Error != "" || v1.Digest == "" || v1.Source != "" {
		t.Fatalf("1.0.0 resolved to %+v, want a digest and no location kept (a registry's may be a signed URL)", v1)
	}
	if missing := e.waitForVersion(entry.Name, "9.9.9", time.Minute); !strings.Contains(missing.Error, "404") {
		t.Errorf("a version the registry does not have: %+v, want its 404", missing)
	}
	e.createCatalogCluster("reg", entry.Name, "1.0.0")
	ready := e.waitFor("reg", 2*time.Minute, "Ready", isReady)
	if string(ready.Status.Outputs["release"].Raw) != `"1.0.0"` || ready.Status.AppliedModule != v1.Digest {
		t.Errorf("applied %s (release %s), want the code of 1.0.0 (%s)", ready.Status.AppliedModule, ready.Status.Outputs["release"].Raw, v1.Digest)
	}
	if n := refused.Load(); n != 0 {
		t.Errorf("the registry refused %d requests: the entry's token was not sent", n)
	}
	// No version beside the source: the field left the CRD.
	raw := []byte(`{"apiVersion":"infrastructure.cluster.x-k8s.io/v1alpha1","kind":"TerraformCluster","metadata":{"name":"v","namespace":"` + e.ns + `"},"spec":{"module":{"source":"x","version":"1.0.0"}}}`)
	err = plane.Captf.InfrastructureV1alpha1().RESTClient().Post().Namespace(e.ns).Resource("terraformclusters").Param("fieldValidation", "Strict").Body(raw).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.module.version"`) {
		t.Errorf("spec.module.version: %v, want it unknown", err)
	}
}

// TestCatalogConfigMapPinned (issue 52): a version published from a
// ConfigMap is pinned to the digest of its files: once the ConfigMap is
// edited, runs of the version run none of the new code
// (CatalogDigestMismatch) until the platform team publishes it as a new
// version.
func TestCatalogConfigMapPinned(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.startManagerWithWebhook()
	module, err := os.ReadFile(filepath.Join(root, "examples", "local-cloud", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cloud-v1", Namespace: e.ns}, Data: map[string]string{"main.tf": string(module)}}
	if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	entry := e.createCatalogEntry(&infrav1.TerraformModule{ObjectMeta: metav1.ObjectMeta{Name: "cloud"},
		Spec: infrav1.TerraformModuleSpec{
			Source:            infrav1.CatalogSource{ConfigMap: &infrav1.CatalogConfigMapSource{}},
			Versions:          []infrav1.CatalogVersion{{Name: "v1", Ref: cm.Name}},
			NamespaceSelector: &metav1.LabelSelector{},
		}})
	v1 := e.waitForVersion(entry.Name, "v1", 2*time.Minute)
	if v1.Error != "" || v1.Digest == "" {
		t.Fatalf("v1 resolved to %+v", v1)
	}
	e.createCatalogCluster("cm", entry.Name, "v1")
	if got := e.waitFor("cm", 2*time.Minute, "Ready", isReady); got.Status.AppliedModule != v1.Digest {
		t.Errorf("applied %s, want v1's %s", got.Status.AppliedModule, v1.Digest)
	}
	// The ConfigMap is edited, then the object asks for a new apply.
	cm.Data["main.tf"] = string(module) + "output \"edited\" {\n  value = true\n}\n"
	if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := updateCluster(e.ns, "cm", func(c *infrav1.TerraformCluster) {
		c.Spec.Variables = append(c.Spec.Variables, jsonVar("instances", "2"))
	}); err != nil {
		t.Fatal(err)
	}
	failed := e.waitFor("cm", 2*time.Minute, "refusing the edited code", func(c *infrav1.TerraformCluster) bool {
		r := condition(c, infrav1.ConditionReady)
		return r != nil && r.Reason == "CatalogDigestMismatch"
	})
	if msg := condition(failed, infrav1.ConditionReady).Message; !strings.Contains(msg, v1.Digest) || !strings.Contains(msg, "none of it ran") {
		t.Errorf("Ready message %q, want the catalog's digest and that nothing ran", msg)
	}
	if _, ok := failed.Status.Outputs["edited"]; ok {
		t.Error("the edited code was applied")
	}
}

// TestCatalogQuickstartModules (issue 52): examples/catalog publishes the
// quickstart's modules as the docs say; they resolve with the local
// cloud's provider from the mirror, their variables are typed, and a
// TerraformCluster of the cluster module is made on the local cloud.
func TestCatalogQuickstartModules(t *testing.T) {
	ctx := context.Background()
	cloud, err := framework.StartLocalCloud(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cloud.Stop)
	e := newEnv(t)
	runner, err := framework.RunnerImage()
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := framework.ProviderMirrorImage()
	if err != nil {
		t.Fatal(err)
	}
	lock, err := framework.LocalCloudLockFile()
	if err != nil {
		t.Fatal(err)
	}
	e.startManagerWithWebhook("--runner-image="+runner, "--provider-mirror-image="+mirror)
	for _, m := range []string{"localcloud-cluster", "localcloud-machine"} {
		module, err := os.ReadFile(filepath.Join(root, "examples", m, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: m + "-v1", Namespace: e.ns}, Data: map[string]string{"main.tf": string(module), ".terraform.lock.hcl": lock}}
		if _, err := plane.Kube.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := framework.ReadObjects(filepath.Join(root, "examples", "catalog", "modules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{}
	for _, o := range objs {
		var m infrav1.TerraformModule
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &m); err != nil {
			t.Fatal(err)
		}
		published := m.Name // createCatalogEntry names it after the test's namespace
		entries[published] = e.createCatalogEntry(&m).Name
	}
	v1 := e.waitForVersion(entries["localcloud-cluster"], "v1", 2*time.Minute)
	if v1.Error != "" || !catalogDeclares(v1, "endpoint", "The local cloud's API.") || !catalogDeclares(v1, "account", "") {
		t.Fatalf("localcloud-cluster v1 resolved to %+v", v1)
	}
	if m := e.waitForVersion(entries["localcloud-machine"], "v1", 2*time.Minute); m.Error != "" {
		t.Fatalf("localcloud-machine v1: %s", m.Error)
	}
	tcs := plane.Captf.InfrastructureV1alpha1().TerraformClusters(e.ns)
	bad := e.catalogCluster("demo", entries["localcloud-cluster"], jsonVar("endpoint", fmt.Sprintf("%q", cloud.URL)), jsonVar("account", `"demo"`), jsonVar("instances", `"two"`))
	if _, err := tcs.Create(ctx, bad, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "instances is not a number") {
		t.Errorf("instances \"two\": %v, want the webhook's refusal", err)
	}
	tc := e.catalogCluster("demo", entries["localcloud-cluster"], jsonVar("endpoint", fmt.Sprintf("%q", cloud.URL)), jsonVar("account", fmt.Sprintf("%q", e.ns)))
	tc.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "demo"}
	tc.OwnerReferences = []metav1.OwnerReference{clusterOwnerRef(e.newCluster("demo", false))}
	e.create(tc)
	if ready := e.waitFor("demo", 3*time.Minute, "Ready", isReady); ready.Status.AppliedModule != v1.Digest {
		t.Errorf("applied %s, want the catalog's %s", ready.Status.AppliedModule, v1.Digest)
	}
	if lbs, err := cloud.List(e.ns, "load_balancers"); err != nil || len(lbs) != 1 {
		t.Errorf("the local cloud's load balancers of the account: %v %v, want the cluster's one", lbs, err)
	}
}

func catalogDeclares(st infrav1.CatalogVersionStatus, name, description string) bool {
	for _, v := range st.Variables {
		if v.Name == name && (description == "" || v.Description == description) {
			return true
		}
	}
	return false
}
