package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// CAPIVersion is the Cluster API release whose CRDs the tests install.
const CAPIVersion = "v1.14.2"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// authnTokenRequest: the tokens the framework gives managers and metrics
// readers are not refreshed as a kubelet refreshes a pod's, so they last a
// day: a benchmark's manager at 10,000 objects runs for over an hour, and
// one whose token had expired got only 401s from then on.
var authnTokenRequest = authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(24 * 3600))}}

// RepoRoot finds the CAPTF module's root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/captf/captf\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the CAPTF repository")
		}
		dir = parent
	}
}

// CAPICRDDir is the directory of Cluster API's core CRDs in the module cache;
// it downloads the module once when it is not there yet.
func CAPICRDDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "cluster-api@"+CAPIVersion, "core", "config", "crd", "bases")
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	cmd := exec.Command("go", "mod", "download", "sigs.k8s.io/cluster-api@"+CAPIVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("downloading cluster-api %s: %v: %s", CAPIVersion, err, out)
	}
	return dir, nil
}

// InstallCRDs creates every CRD in the YAML files of dirs (server-side: some
// are too big for client-side apply) and waits until all are established.
func (cp *ControlPlane) InstallCRDs(ctx context.Context, dirs ...string) error {
	var crds []*unstructured.Unstructured
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			return err
		}
		if len(files) == 0 {
			return fmt.Errorf("no CRDs in %s", dir)
		}
		for _, f := range files {
			objs, err := ReadObjects(f)
			if err != nil {
				return err
			}
			crds = append(crds, objs...)
		}
	}
	return cp.CreateCRDs(ctx, crds)
}

// CreateCRDs creates the CustomResourceDefinitions among objs (and in the
// Lists among them) and waits until they are established.
func (cp *ControlPlane) CreateCRDs(ctx context.Context, objs []*unstructured.Unstructured) error {
	var names []string
	create := func(crd *unstructured.Unstructured) error {
		if crd.GetKind() != "CustomResourceDefinition" {
			return nil
		}
		_, err := cp.Dynamic.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{FieldManager: "captf-test"})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
		}
		names = append(names, crd.GetName())
		return nil
	}
	for _, obj := range objs {
		if obj.IsList() {
			if err := obj.EachListItem(func(o runtime.Object) error { return create(o.(*unstructured.Unstructured)) }); err != nil {
				return err
			}
		} else if err := create(obj); err != nil {
			return err
		}
	}
	if len(names) == 0 && len(objs) > 0 {
		return fmt.Errorf("no CRDs among %d objects", len(objs))
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := cp.Dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", name, err)
		}
	}
	return nil
}

// ReadObjects decodes every object of a multi-document YAML file.
func ReadObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeObjects(path, f)
}

// Kustomize builds a kustomization and decodes its objects.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	out, err := kustomizeText(dir)
	if err != nil {
		return nil, err
	}
	return decodeObjects(dir, bytes.NewReader(out))
}

// Kubectl runs the kubectl hack/build-controlplane.sh builds against the
// plane, as its admin, and returns what it printed.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) (string, error) {
	kubectl, err := BinPath("kubectl")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig=" + cp.KubeconfigFile}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// BinDir is where the hack/ scripts put what they build: $CAPTF_BIN_DIR,
// else <repo>/bin.
func BinDir() (string, error) {
	if dir := os.Getenv("CAPTF_BIN_DIR"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// PathEnv is PATH=<this process's PATH>:<BinDir>, for processes that run
// terraform or tofu from BinDir.
func PathEnv() string {
	dir, err := BinDir()
	if err != nil {
		return "PATH=" + os.Getenv("PATH")
	}
	return "PATH=" + os.Getenv("PATH") + ":" + dir
}

// BinPath is a binary the hack/ scripts built, in BinDir.
func BinPath(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing in %s: run make controlplane (make test does)", name, dir)
	}
	return path, nil
}

func decodeObjects(source string, r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", source, err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// ToUnstructured converts a typed object for the dynamic client.
func ToUnstructured(obj any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, u.UnmarshalJSON(b)
}

func resourceMust(s string) resource.Quantity { return resource.MustParse(s) }

func ptrTo[T any](v T) *T { return &v }

// FromUnstructured converts u into a typed object.
func FromUnstructured(u *unstructured.Unstructured, into any) error {
	b, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}
