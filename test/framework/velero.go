package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// VeleroGroup is the API group of Velero's kinds.
const VeleroGroup = "velero.io"

// VeleroResource is the GroupVersionResource of one of Velero's kinds
// (backups, restores, backupstoragelocations).
func VeleroResource(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: VeleroGroup, Version: "v1", Resource: resource}
}

// ObjectStore is the disaster-recovery tests' S3 stand-in
// (bin/velero-s3, an in-memory gofakes3 built by
// hack/build-controlplane.sh --with-velero) with one bucket, "velero". It
// outlives the planes that back up into it and restore from it, as a
// cloud's bucket does.
type ObjectStore struct {
	URL string
	cmd *exec.Cmd
}

// StartObjectStore starts it, logging into dir.
func StartObjectStore(dir string) (*ObjectStore, error) {
	cmd, url, err := startServer(dir, "velero-s3", "", "make velero", "-listen", "127.0.0.1:0", "-bucket", "velero")
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(url, "http://") {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the S3 stand-in printed %q, not its URL", url)
	}
	return &ObjectStore{URL: url, cmd: cmd}, nil
}

// Stop stops it; what it held is gone.
func (s *ObjectStore) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Velero is Velero's server (bin/velero) running against a plane as
// `velero install --provider aws` deploys it: its CRDs, the "velero"
// namespace, the AWS object-store plugin (bin/velero-plugins) and a
// BackupStorageLocation "default" in the object store, with no node agent
// and no volume snapshots. Run is its CLI, as the plane's admin. One at a
// time on a machine: Velero's controller manager binds :8080 whatever its
// flags say.
type Velero struct {
	binary     string
	home       string
	proc       *process
	kubeconfig string
}

// StartVelero installs and starts Velero on the plane, backing up into
// store, and waits until the backup location is Available.
func (cp *ControlPlane) StartVelero(ctx context.Context, store *ObjectStore) (*Velero, error) {
	binary, err := BinPath("velero")
	if err != nil {
		return nil, err
	}
	plugins, err := BinPath("velero-plugins")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(plugins, "velero-plugin-for-aws")); err != nil {
		return nil, fmt.Errorf("%w: run make velero", err)
	}
	dir := filepath.Join(cp.Dir, "velero")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	v := &Velero{binary: binary, home: dir, kubeconfig: cp.KubeconfigFile}

	// The S3 stand-in takes any key; the AWS SDK wants one.
	credentials := filepath.Join(dir, "credentials")
	if err := os.WriteFile(credentials, []byte("[default]\naws_access_key_id = velero\naws_secret_access_key = velero-secret\n"), 0o600); err != nil {
		return nil, err
	}
	// What `velero install` makes: CRDs, the namespace, a service account
	// bound to cluster-admin, the credentials Secret, the backup location
	// and the server's Deployment, scaled to zero here (this plane has no
	// kubelet; the server runs as a process, authenticated as that service
	// account). Restore actions look the Deployment up for its image.
	manifests, err := v.Run(ctx, "install", "--provider=aws", "--plugins=velero/velero-plugin-for-aws:v1.14.3",
		"--bucket=velero", "--secret-file="+credentials, "--use-volume-snapshots=false",
		"--backup-location-config=region=minio,s3ForcePathStyle=true,s3Url="+store.URL,
		"--dry-run", "-o", "yaml")
	if err != nil {
		return nil, err
	}
	objs, err := decodeObjects("velero install", strings.NewReader(manifests))
	if err != nil {
		return nil, err
	}
	if err := cp.CreateCRDs(ctx, objs); err != nil {
		return nil, err
	}
	resources := map[string]schema.GroupVersionResource{
		"Namespace":             {Version: "v1", Resource: "namespaces"},
		"ServiceAccount":        {Version: "v1", Resource: "serviceaccounts"},
		"Secret":                {Version: "v1", Resource: "secrets"},
		"ClusterRoleBinding":    {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		"Deployment":            {Group: "apps", Version: "v1", Resource: "deployments"},
		"BackupStorageLocation": VeleroResource("backupstoragelocations"),
	}
	for _, list := range objs {
		err := list.EachListItem(func(o runtime.Object) error {
			obj := o.(*unstructured.Unstructured)
			if obj.GetKind() == "CustomResourceDefinition" {
				return nil
			}
			gvr, ok := resources[obj.GetKind()]
			if !ok {
				return fmt.Errorf("velero install makes a %s, which the test does not know", obj.GetKind())
			}
			if obj.GetKind() == "Deployment" {
				if err := unstructured.SetNestedField(obj.Object, int64(0), "spec", "replicas"); err != nil {
					return err
				}
			}
			_, err := cp.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Create(ctx, obj, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}

	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	// The server is Velero's service account, as in its pod.
	cfg, err := cp.ServiceAccountConfig(ctx, "velero", "velero")
	if err != nil {
		return nil, err
	}
	serverKubeconfig := filepath.Join(dir, "server.kubeconfig")
	if err := WriteKubeconfig(serverKubeconfig, cfg, "velero"); err != nil {
		return nil, err
	}
	env := append(cleanEnv(), "HOME="+dir, "AWS_SHARED_CREDENTIALS_FILE="+credentials)
	p, err := startProcess("velero", cp.Dir, binary, []string{"server", "--features=", "--uploader-type=kopia",
		"--kubeconfig=" + serverKubeconfig, "--namespace=velero", "--plugin-dir=" + plugins,
		fmt.Sprintf("--metrics-address=127.0.0.1:%d", ports[0]), "--profiler-address=",
	}, env)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	v.proc = p
	var phase string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("velero server exited: %v", p.err)
		}
		got, err := cp.Dynamic.Resource(VeleroResource("backupstoragelocations")).Namespace("velero").Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase, _, _ = unstructured.NestedString(got.Object, "status", "phase")
		return phase == "Available", nil
	})
	if err != nil {
		return nil, fmt.Errorf("velero's backup location is %q, not Available: %w\n%s", phase, err, p.tail(30))
	}
	return v, nil
}

// Run runs the velero CLI against the plane and returns what it printed.
func (v *Velero) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, v.binary, append(args, "--kubeconfig="+v.kubeconfig, "--namespace=velero")...)
	cmd.Env = append(cleanEnv(), "HOME="+v.home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("velero %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Logs is the tail of the server's log.
func (v *Velero) Logs(lines int) string { return v.proc.tail(lines) }

// Stop stops the server (and its plugins, in its process group).
func (v *Velero) Stop() { v.proc.stop(10 * time.Second) }
