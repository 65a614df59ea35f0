package framework

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ImageConfig is what of an image's configuration a container runs with.
type ImageConfig struct {
	Ref        string
	Digest     string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// Image is an image read from an OCI image archive (an image layout in a
// tar, as `make images` writes): its configuration and its layers (gzip'd
// tars), bottom first.
type Image struct {
	Config ImageConfig
	Layers [][]byte
}

// ReadImage reads the one image of an OCI image archive.
func ReadImage(archive string) (*Image, error) {
	blobs, err := readLayout(archive)
	if err != nil {
		return nil, err
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		return nil, fmt.Errorf("%s: index.json: %v (want one manifest)", archive, err)
	}
	blob := func(digest string) ([]byte, error) {
		b, ok := blobs["blobs/"+strings.Replace(digest, ":", "/", 1)]
		if !ok {
			return nil, fmt.Errorf("%s: no blob %s", archive, digest)
		}
		return b, nil
	}
	m := index.Manifests[0]
	b, err := blob(m.Digest)
	if err != nil {
		return nil, err
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(b, &manifest); err != nil {
		return nil, err
	}
	if b, err = blob(manifest.Config.Digest); err != nil {
		return nil, err
	}
	var config struct {
		Config ImageConfig `json:"config"`
	}
	if err := json.Unmarshal(b, &config); err != nil {
		return nil, err
	}
	img := &Image{Config: config.Config}
	img.Config.Ref, img.Config.Digest = m.Annotations["org.opencontainers.image.ref.name"], m.Digest
	for _, l := range manifest.Layers {
		b, err := blob(l.Digest)
		if err != nil {
			return nil, err
		}
		img.Layers = append(img.Layers, b)
	}
	return img, nil
}

// UnpackImage unpacks an OCI image archive into dir as a root filesystem,
// layer by layer with their whiteouts, as a container runtime does; owners
// are kept when run as root.
func UnpackImage(archive, dir string) (*ImageConfig, error) {
	img, err := ReadImage(archive)
	if err != nil {
		return nil, err
	}
	for i, l := range img.Layers {
		if err := applyLayer(l, dir); err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", archive, i, err)
		}
	}
	return &img.Config, nil
}

func readLayout(archive string) (map[string][]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return blobs, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if blobs[path.Clean(h.Name)], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
}

// applyLayer extracts one gzip'd layer over dir: ".wh.<name>" removes
// name, ".wh..wh..opq" empties its directory.
func applyLayer(layer []byte, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	root := os.Getuid() == 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean("/" + h.Name)
		target := filepath.Join(dir, filepath.FromSlash(name))
		base := path.Base(name)
		switch {
		case base == ".wh..wh..opq":
			entries, _ := os.ReadDir(filepath.Dir(target))
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(filepath.Dir(target), e.Name())); err != nil {
					return err
				}
			}
			continue
		case strings.HasPrefix(base, ".wh."):
			if err := os.RemoveAll(filepath.Join(filepath.Dir(target), strings.TrimPrefix(base, ".wh."))); err != nil {
				return err
			}
			continue
		}
		mode := os.FileMode(h.Mode).Perm() | os.FileMode(h.Mode)&(os.ModeSticky|os.ModeSetuid|os.ModeSetgid)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			_ = os.RemoveAll(target)
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.RemoveAll(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
			continue // a link's mode and owner are its target's
		case tar.TypeLink:
			_ = os.RemoveAll(target)
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Linkname))), target); err != nil {
				return err
			}
			continue
		default:
			continue // devices and fifos: a runtime provides /dev
		}
		if root {
			if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
				return err
			}
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
		}
	}
}

// MakeDevices creates the device nodes a container runtime gives every
// container (null, zero, full, random, urandom, tty) under rootfs/dev.
// Needs root.
func MakeDevices(rootfs string) error {
	dev := filepath.Join(rootfs, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	for name, n := range map[string][2]uint32{"null": {1, 3}, "zero": {1, 5}, "full": {1, 7}, "random": {1, 8}, "urandom": {1, 9}, "tty": {5, 0}} {
		p := filepath.Join(dev, name)
		_ = os.Remove(p)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n[0], n[1]))); err != nil {
			return fmt.Errorf("mknod %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil { // past the umask
			return err
		}
	}
	return nil
}

// ImageArchives maps the image references `make images` built for this
// checkout's version (hack/version.sh) to their archives in bin/images.
func ImageArchives() (map[string]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return nil, fmt.Errorf("hack/version.sh: %w", err)
	}
	dir, err := BinPath("images")
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "captf-*-"+strings.TrimSpace(string(out))+".tar"))
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("no images of version %s in %s: run make images", strings.TrimSpace(string(out)), dir)
	}
	refs := map[string]string{}
	for _, p := range paths {
		img, err := ReadImage(p)
		if err != nil {
			return nil, err
		}
		refs[img.Config.Ref] = p
	}
	return refs, nil
}

// RunnerImage is the reference of the runner image `make images` built for
// this checkout.
func RunnerImage() (string, error) {
	images, err := ImageArchives()
	if err != nil {
		return "", err
	}
	for ref := range images {
		if strings.Contains(ref, "/captf-runner:") {
			return ref, nil
		}
	}
	return "", fmt.Errorf("no runner image among %v", images)
}

// InstallOverlay writes into dir a kustomization of manifests/default that
// pins the manager and runner images to version, as a user pins a release,
// with extra (kustomize fields) after it; `kubectl apply -k dir` installs it.
func InstallOverlay(dir, root, version, extra string) error {
	base, err := filepath.Rel(dir, filepath.Join(root, "manifests", "default"))
	if err != nil {
		return err
	}
	kustomization := fmt.Sprintf("resources:\n- %s\nimages:\n- {name: ghcr.io/captf/captf, newTag: %s}\n- {name: ghcr.io/captf/captf-runner, newTag: %s}\n%s",
		base, version, version, extra)
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600)
}
