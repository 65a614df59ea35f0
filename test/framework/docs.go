package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DocsRole is the example Role name that docs/security.md shows: the tests'
// tenants have exactly the rights the docs give a team.
func DocsRole(name string) (*rbacv1.Role, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		return nil, err
	}
	for i, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		objs, err := decodeObjects(fmt.Sprintf("docs/security.md, YAML example %d", i+1), strings.NewReader(block))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() != "Role" || o.GetName() != name {
				continue
			}
			var role rbacv1.Role
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				return nil, err
			}
			return &role, nil
		}
	}
	return nil, fmt.Errorf("docs/security.md shows no Role %s", name)
}
