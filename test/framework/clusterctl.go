package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CAPIImages maps the reference of Cluster API's core manager image, as
// its released components name it, to the archive hack/build-capi.sh built.
func CAPIImages() (map[string]string, error) {
	dir, err := BinPath("capi-images")
	if err != nil {
		return nil, err
	}
	archive := filepath.Join(dir, "cluster-api-controller-"+CAPIVersion+".tar")
	if _, err := os.Stat(archive); err != nil {
		return nil, fmt.Errorf("%s is missing: run hack/build-capi.sh (make test does)", archive)
	}
	img, err := ReadImage(archive)
	if err != nil {
		return nil, err
	}
	return map[string]string{img.Config.Ref: archive}, nil
}

// capiProviders are the providers of Cluster API's module that clusterctl
// installs on a first init: their kustomize base, local repository
// directory, components file and image.
var capiProviders = []struct{ name, typ, base, dir, file, image string }{
	{"cluster-api", "CoreProvider", "core/config/default", "cluster-api", "core-components.yaml", "cluster-api-controller"},
	{"kubeadm", "BootstrapProvider", "bootstrap/kubeadm/config/default", "bootstrap-kubeadm", "bootstrap-components.yaml", "kubeadm-bootstrap-controller"},
	{"kubeadm", "ControlPlaneProvider", "controlplane/kubeadm/config/default", "control-plane-kubeadm", "control-plane-components.yaml", "kubeadm-control-plane-controller"},
}

// ClusterctlConfig writes into dir a clusterctl local repository of
// Cluster API's core provider and of the kubeadm bootstrap and control-plane
// providers clusterctl adds on a first init (their components built from
// the module's kustomize bases, images named as released: only the core
// manager's image exists here, see CAPIImages), and a clusterctl
// configuration that names them and CAPTF's provider in captfRepository
// (hack/release.sh's output). It returns the configuration's path.
func ClusterctlConfig(dir, captfRepository, captfVersion string) (string, error) {
	capi, err := CAPICRDDir()
	if err != nil {
		return "", err
	}
	module := strings.TrimSuffix(capi, filepath.Join("core", "config", "crd", "bases"))
	metadata, err := os.ReadFile(filepath.Join(module, "metadata.yaml"))
	if err != nil {
		return "", err
	}
	var cfg strings.Builder
	cfg.WriteString("providers:\n")
	for _, p := range capiProviders {
		overlay := filepath.Join(dir, "kustomize", p.dir)
		if err := os.MkdirAll(overlay, 0o755); err != nil {
			return "", err
		}
		base, err := filepath.Rel(overlay, filepath.Join(module, p.base))
		if err != nil {
			return "", err
		}
		kustomization := fmt.Sprintf("resources:\n- %s\nimages:\n- {name: gcr.io/k8s-staging-cluster-api/%s, newName: registry.k8s.io/cluster-api/%s, newTag: %s}\n",
			base, p.image, p.image, CAPIVersion)
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
			return "", err
		}
		components, err := kustomizeText(overlay)
		if err != nil {
			return "", err
		}
		release := filepath.Join(dir, p.dir, CAPIVersion)
		if err := os.MkdirAll(release, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(release, p.file), components, 0o644); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(release, "metadata.yaml"), metadata, 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&cfg, "- {name: %s, type: %s, url: %q}\n", p.name, p.typ, filepath.Join(release, p.file))
	}
	fmt.Fprintf(&cfg, "- {name: terraform, type: InfrastructureProvider, url: %q}\n",
		filepath.Join(captfRepository, "infrastructure-terraform", captfVersion, "infrastructure-components.yaml"))
	path := filepath.Join(dir, "clusterctl.yaml")
	return path, os.WriteFile(path, []byte(cfg.String()), 0o644)
}

// kustomizeText builds a kustomization with the kubectl that
// hack/build-controlplane.sh builds, as users run `kubectl apply -k`.
func kustomizeText(dir string) ([]byte, error) {
	kubectl, err := BinPath("kubectl")
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", dir, err, stderr.String())
	}
	return out, nil
}

// Clusterctl runs the clusterctl hack/build-capi.sh built against the
// plane with the configuration config; env adds template and provider
// variables. clusterctl's own files (overrides, cache) go to the plane's
// directory, and it does not look for a newer release online.
func (cp *ControlPlane) Clusterctl(ctx context.Context, config string, env []string, args ...string) (string, error) {
	clusterctl, err := BinPath("clusterctl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, clusterctl, append(args, "--kubeconfig="+cp.KubeconfigFile, "--config="+config)...)
	cmd.Env = append(cleanEnv(), "HOME="+filepath.Join(cp.Dir, "clusterctl-home"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("clusterctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
