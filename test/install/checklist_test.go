package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/captf/captf/test/framework"
)

// notRunHere are the checklist's commands this plane cannot answer, and why.
var notRunHere = map[string]string{
	"kubectl -n captf-system top pod": "needs metrics-server, which the plane does not run",
}

// checkReadinessCommands runs, against the shipped install in captf-system
// with the quickstart applied, every command the production-readiness
// checklist gives in its "how to see it" column that needs no value of the
// reader's own (no <placeholder>): each must succeed and print something.
func checkReadinessCommands(t *testing.T, root string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "production-readiness.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The Prometheus Operator's CRDs, which manifests/prometheus needs.
	crds, err := framework.BinPath("prometheus-operator-crds")
	if err != nil {
		t.Fatal(err)
	}
	if err := plane.InstallCRDs(context.Background(), crds); err != nil {
		t.Fatal(err)
	}
	bin, err := framework.BinPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`(kubectl [^`]+)`")
	ran := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 4 {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			command := m[1]
			if strings.Contains(command, "<") || notRunHere[command] != "" {
				continue
			}
			cmd := exec.Command("sh", "-c", command)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "KUBECONFIG="+plane.KubeconfigFile, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil || len(strings.TrimSpace(string(out))) == 0 {
				t.Errorf("the checklist's %q: %v\n%s", command, err, out)
				continue
			}
			ran++
			t.Logf("%s:\n%s", command, strings.TrimSpace(string(out)))
		}
	}
	if ran < 10 {
		t.Errorf("ran %d of the checklist's commands, want every one without a placeholder (at least 10)", ran)
	}
	for command := range notRunHere {
		if !strings.Contains(string(doc), command) {
			t.Errorf("notRunHere names %q, which the checklist no longer has", command)
		}
	}
	// What the commands applied would stay for the next install.
	for _, k := range []string{"manifests/prometheus", "manifests/approval-policy"} {
		if out, err := exec.Command(bin, "--kubeconfig="+plane.KubeconfigFile, "delete", "-k", filepath.Join(root, k)).CombinedOutput(); err != nil {
			t.Errorf("kubectl delete -k %s: %v\n%s", k, err, out)
		}
	}
}
