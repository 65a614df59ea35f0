package manager

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/catalog"
	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/runnerapi"
)

// catalogCredentials says why the runner of id may not read the credentials
// Secret name, or nil: its object (this very one, by UID) names a catalog
// entry whose credentials are name and that selects its namespace. Read
// live: once per run, and a credential is worth the request.
func catalogCredentials(kube kubernetes.Interface, captf versioned.Interface, namespace string) func(ctx context.Context, id *runnerapi.Identity, name string) error {
	return func(ctx context.Context, id *runnerapi.Identity, name string) error {
		if err := designated(ctx, kube, namespace, name); err != nil {
			return err
		}
		if id.Catalog {
			entry, err := captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, id.ObjectRef.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading the Job's catalog module: %w", err)
			}
			if entry.UID != id.ObjectRef.UID || entry.Spec.CredentialsSecretName != name {
				return errors.New("the Job's catalog module does not name these credentials")
			}
			return nil
		}
		ws, uid, err := workspaceOf(ctx, captf, id.Namespace, id.ObjectRef.Kind, id.ObjectRef.Name)
		if err != nil {
			return fmt.Errorf("reading the run's object: %w", err)
		}
		if uid != string(id.ObjectRef.UID) || ws.Module.CatalogRef == nil {
			return errors.New("the run's object names no catalog module")
		}
		entry, err := captf.InfrastructureV1alpha1().TerraformModules().Get(ctx, ws.Module.CatalogRef.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading catalog module %s: %w", ws.Module.CatalogRef.Name, err)
		}
		if entry.Spec.CredentialsSecretName != name {
			return fmt.Errorf("catalog module %s does not name these credentials", entry.Name)
		}
		selected, err := catalog.Selects(entry.Spec.NamespaceSelector, func() (map[string]string, error) {
			ns, err := kube.CoreV1().Namespaces().Get(ctx, id.Namespace, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return ns.Labels, nil
		})
		if err != nil {
			return err
		}
		if !selected {
			return fmt.Errorf("catalog module %s does not select namespace %s", entry.Name, id.Namespace)
		}
		return nil
	}
}

// designated checks that the Secret name of the manager's namespace (the
// runner API's CatalogNamespace) was made for the catalog: its label says
// so. Else a catalog entry could name any Secret there (the manager's own
// certificates, a token) and hand it to runners.
func designated(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	sec, err := kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the credentials: %w", err)
	}
	if sec.Labels[infrav1.LabelCatalogCredentials] != "true" {
		return fmt.Errorf("Secret %s is not labelled %s=true, which the platform team sets on the credentials of catalog modules", name, infrav1.LabelCatalogCredentials)
	}
	return nil
}

// workspaceOf reads the spec and UID of a Terraform* object.
func workspaceOf(ctx context.Context, captf versioned.Interface, namespace, kind, name string) (*infrav1.WorkspaceSpec, string, error) {
	c := captf.InfrastructureV1alpha1()
	get := metav1.GetOptions{}
	switch kind {
	case "TerraformCluster":
		o, err := c.TerraformClusters(namespace).Get(ctx, name, get)
		if err != nil {
			return nil, "", err
		}
		return &o.Spec.WorkspaceSpec, string(o.UID), nil
	case "TerraformMachine":
		o, err := c.TerraformMachines(namespace).Get(ctx, name, get)
		if err != nil {
			return nil, "", err
		}
		return &o.Spec.WorkspaceSpec, string(o.UID), nil
	case "TerraformMachinePool":
		o, err := c.TerraformMachinePools(namespace).Get(ctx, name, get)
		if err != nil {
			return nil, "", err
		}
		return &o.Spec.WorkspaceSpec, string(o.UID), nil
	}
	return nil, "", fmt.Errorf("kind %s runs no module", kind)
}
