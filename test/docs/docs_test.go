// Package docs checks that the documentation keeps up with the code: every
// reason CAPTF can give in a condition or event is explained in the
// troubleshooting page, every relative link in the README and docs/ leads
// somewhere inside the repository, every series name a page gives is
// exported, every flag default a page quotes is the flag's, and every alert
// a page names is shipped with the severity the page gives. (That every
// flag has a line in the configuration page is checked by the e2e suite
// against -h, that every metric is documented by test/prometheus.)
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/captf/captf/test/framework"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestReasonsDocumented: every Reason* constant in pkg/ (condition and event
// reasons), and every failure reason the runner reports, has an entry in
// docs/troubleshooting.md.
func TestReasonsDocumented(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{} // reason → where it is defined
	err = filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "generated" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				switch {
				case strings.HasPrefix(name.Name, "Reason") && i < len(spec.Values):
					if s, ok := stringLit(spec.Values[i]); ok {
						reasons[s] = rel + ": " + name.Name
					}
				case name.Name == "failureReasons":
					ast.Inspect(spec, func(n ast.Node) bool {
						if s, ok := stringLit(n); ok {
							reasons[s] = rel + ": failureReasons"
						}
						return true
					})
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) < 40 {
		t.Fatalf("found only %d reasons in pkg/: the scan is broken", len(reasons))
	}
	for reason, where := range reasons {
		if !strings.Contains(string(page), "`"+reason+"`") {
			t.Errorf("reason %s (%s) has no entry in docs/troubleshooting.md", reason, where)
		}
	}
}

func stringLit(n ast.Node) (string, bool) {
	lit, ok := n.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil && s != ""
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	notInTag = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// anchors are the fragment names GitHub gives a page's headings.
func anchors(page string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(page, -1) {
		out = append(out, strings.ReplaceAll(notInTag.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-"))
	}
	return out
}

// TestRelativeLinks: every relative link of README.md and docs/ names a
// file in the repository (never outside it, as ../shared would be), and a
// fragment names a heading of the page it points at.
func TestRelativeLinks(t *testing.T) {
	root := repoRoot(t)
	pages := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			u, err := url.Parse(m[1])
			if err != nil || u.Scheme != "" || u.Host != "" {
				continue
			}
			target := page
			if u.Path != "" {
				target = filepath.Join(filepath.Dir(page), u.Path)
			}
			checked++
			if r, err := filepath.Rel(root, target); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s links %s, outside the repository", rel, m[1])
				continue
			}
			info, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s links %s, which does not exist", rel, m[1])
				continue
			}
			if u.Fragment == "" || info.IsDir() || !strings.HasSuffix(target, ".md") {
				continue
			}
			tb, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(anchors(string(tb)), u.Fragment) {
				t.Errorf("%s links %s: no heading of that page has the anchor #%s", rel, m[1], u.Fragment)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d links: the scan is broken", checked)
	}
}
