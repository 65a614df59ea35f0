package framework

import (
	"fmt"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ShippedRole is the ClusterRole name of manifests/roles as a Role of its
// rules: the tests' tenants and users have exactly the rights the shipped
// Roles give a team's people.
func ShippedRole(name string) (*rbacv1.Role, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	objs, err := ReadObjects(filepath.Join(root, "manifests", "roles", "roles.yaml"))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" || o.GetName() != name {
			continue
		}
		var role rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			return nil, err
		}
		return &rbacv1.Role{ObjectMeta: role.ObjectMeta, Rules: role.Rules}, nil
	}
	return nil, fmt.Errorf("manifests/roles ships no ClusterRole %s", name)
}
