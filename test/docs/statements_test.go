package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/pkg/manager"
	"github.com/captf/captf/test/framework"
)

// pages are README.md and every page under docs/, by their path from the
// repository's root.
func pages(t *testing.T) map[string]string {
	t.Helper()
	root := repoRoot(t)
	out := map[string]string{}
	add := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = string(b)
	}
	add(filepath.Join(root, "README.md"))
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			add(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inputNames are the Terraform variables CAPTF gives modules
// (captf_cluster_name, ...): string literals of pkg/ spelled like series.
func inputNames(t *testing.T) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	names := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if s, ok := stringLit(n); ok && regexp.MustCompile(`^captf_[a-z_]+$`).MatchString(s) {
				names[s] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestMetricNamesExist: every series name a page of the docs gives (CAPTF's,
// client-go's, controller-runtime's) is one the manager exports, unless it
// is one of the Terraform variables CAPTF gives modules.
func TestMetricNamesExist(t *testing.T) {
	have := framework.ExportedSeries()
	inputs := inputNames(t)
	checked := 0
	for page, text := range pages(t) {
		for _, m := range framework.SeriesName.FindAllStringSubmatch(text, -1) {
			checked++
			if !have[m[1]] && !(inputs[m[1]]) {
				t.Errorf("%s names %s, which the manager does not export", page, m[1])
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d names: the scan is broken", checked)
	}
}

var (
	// A row of the flags table: | `--flag` | default | meaning |
	flagRow = regexp.MustCompile("(?m)^\\| `(-{1,2}[a-z0-9-]+)` \\| ([^|]*) \\|")
	// A default given in prose: `--flag` (default VALUE
	flagDefault = regexp.MustCompile("`(--[a-z0-9-]+)` \\(default `?([^`);,]+)")
	// Defaults given as a command line: default ... (`--a=1 --b=2`)
	flagDefaultsLine = regexp.MustCompile("defaults? [^(.]*\\(`((?:--[a-z0-9-]+=[^ `]+ ?)+)`\\)")
	sizeValue        = regexp.MustCompile(`^([0-9]+) (KiB|MiB|GiB)$`)
)

// sameValue tells whether a value as the docs write it is the flag's
// default as -h gives it: durations and byte sizes in any spelling.
func sameValue(doc, def string) bool {
	doc = strings.TrimSpace(strings.Trim(strings.TrimSpace(doc), "`"))
	if doc == def {
		return true
	}
	if d1, err := time.ParseDuration(doc); err == nil {
		d2, err := time.ParseDuration(def)
		return err == nil && d1 == d2
	}
	if m := sizeValue.FindStringSubmatch(doc); m != nil {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		shift := map[string]uint{"KiB": 10, "MiB": 20, "GiB": 30}[m[2]]
		return strconv.FormatInt(n<<shift, 10) == def
	}
	return false
}

// TestFlagDefaultsQuoted: every default the docs quote for a manager flag
// (the configuration page's table, "`--flag` (default X)" in any page, a
// line of defaults) is what `captf manager -h` says.
func TestFlagDefaultsQuoted(t *testing.T) {
	flags := manager.Flags()
	defaultOf := func(page, name string) (string, bool) {
		f := flags.Lookup(strings.TrimLeft(name, "-"))
		if f == nil {
			t.Errorf("%s names %s, which the manager does not have", page, name)
			return "", false
		}
		return f.DefValue, true
	}
	checked := 0
	for page, text := range pages(t) {
		if page == filepath.Join("docs", "configuration.md") {
			for _, m := range flagRow.FindAllStringSubmatch(text, -1) {
				def, ok := defaultOf(page, m[1])
				if !ok || def == "" {
					// No literal default: the cell says what stands in
					// (all namespaces, the manager's image, ...).
					continue
				}
				checked++
				// The cell's first word is the value; what follows explains it.
				value := strings.Fields(strings.TrimSpace(m[2]) + " ")
				if len(value) == 0 || !sameValue(value[0], def) {
					t.Errorf("%s: %s defaults to %q, the table says %q", page, m[1], def, strings.TrimSpace(m[2]))
				}
			}
		}
		for _, m := range flagDefault.FindAllStringSubmatch(text, -1) {
			if def, ok := defaultOf(page, m[1]); ok {
				checked++
				if !sameValue(m[2], def) {
					t.Errorf("%s: %s defaults to %q, the page says %q", page, m[1], def, m[2])
				}
			}
		}
		for _, m := range flagDefaultsLine.FindAllStringSubmatch(text, -1) {
			for _, kv := range strings.Fields(m[1]) {
				name, value, _ := strings.Cut(kv, "=")
				if def, ok := defaultOf(page, name); ok {
					checked++
					if !sameValue(value, def) {
						t.Errorf("%s: %s defaults to %q, the page says %q", page, name, def, value)
					}
				}
			}
		}
	}
	if checked < 30 {
		t.Fatalf("checked only %d defaults: the scan is broken", checked)
	}
}

var (
	alertName = regexp.MustCompile(`\bCAPTF[A-Z][A-Za-z]+\b`)
	// A row of an alerts table: | `CAPTFX` | severity |
	alertRow = regexp.MustCompile("(?m)^\\| `(CAPTF[A-Za-z]+)` \\| (warning|critical|info) \\|")
	// An alert with its severity in prose: `CAPTFX` (critical)
	alertSeverity = regexp.MustCompile("`(CAPTF[A-Za-z]+)` \\((warning|critical|info)\\b")
)

// TestAlertsAsShipped: every alert a page names is in the shipped rules,
// and every severity a page gives one (a table row, "`CAPTFX` (critical)",
// a runbook's first line) is the rules'.
func TestAlertsAsShipped(t *testing.T) {
	rules, err := framework.ShippedAlertRules()
	if err != nil {
		t.Fatal(err)
	}
	severity := map[string]string{}
	for _, r := range rules {
		severity[r.Alert] = r.Labels["severity"]
	}
	checked := 0
	for page, text := range pages(t) {
		for _, name := range alertName.FindAllString(text, -1) {
			if _, ok := severity[name]; !ok {
				t.Errorf("%s names the alert %s, which the shipped rules do not have", page, name)
			}
		}
		var pairs [][]string
		pairs = append(pairs, alertRow.FindAllStringSubmatch(text, -1)...)
		pairs = append(pairs, alertSeverity.FindAllStringSubmatch(text, -1)...)
		if dir, file := filepath.Split(page); dir == filepath.Join("docs", "runbooks")+"/" {
			if m := regexp.MustCompile(`(?m)^Severity: (warning|critical|info)\b`).FindStringSubmatch(text); m != nil {
				pairs = append(pairs, []string{"", strings.TrimSuffix(file, ".md"), m[1]})
			} else {
				t.Errorf("%s does not start with the alert's severity", page)
			}
		}
		for _, p := range pairs {
			checked++
			if got, ok := severity[p[1]]; ok && got != p[2] {
				t.Errorf("%s gives %s severity %s; the shipped rule says %s", page, p[1], p[2], got)
			}
		}
	}
	if checked < len(severity)*2 {
		t.Fatalf("checked only %d severities: the scan is broken", checked)
	}
}
