// Package images tests the image archives `make images` builds: what each
// image holds and runs as, its tag, and that a rebuild of the same commit
// gives the same digests.
package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/captf/captf/test/framework"
)

type image struct {
	ref    string
	digest string
	config framework.ImageConfig
	files  map[string]*tar.Header // every layer's entries, upper layers last
	data   map[string][]byte      // regular files' contents
}

// readArchive reads an OCI image archive and lists its layers' files.
func readArchive(t *testing.T, path string) *image {
	t.Helper()
	read, err := framework.ReadImage(path)
	if err != nil {
		t.Fatal(err)
	}
	img := &image{ref: read.Config.Ref, digest: read.Config.Digest, config: read.Config,
		files: map[string]*tar.Header{}, data: map[string][]byte{}}
	for _, l := range read.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(l))
		if err != nil {
			t.Fatal(err)
		}
		lr := tar.NewReader(zr)
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := "/" + strings.TrimSuffix(h.Name, "/")
			img.files[name] = h
			if h.Typeflag == tar.TypeReg {
				if img.data[name], err = io.ReadAll(lr); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return img
}

func archives(t *testing.T) (version, manager, runner string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	version = strings.TrimSpace(string(out))
	dir, err := framework.BinPath("images")
	if err != nil {
		t.Fatal(err)
	}
	manager, runner = filepath.Join(dir, "captf-manager-"+version+".tar"), filepath.Join(dir, "captf-runner-"+version+".tar")
	for _, p := range []string{manager, runner} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run make images (make test does)", err)
		}
	}
	return version, manager, runner
}

// TestImages: both images run captf as 65532 with CA certificates; the tag
// is the version the binary prints; the manager has no shell; the runner
// has tofu, git and a shell, and works in /workspace.
func TestImages(t *testing.T) {
	version, managerPath, runnerPath := archives(t)
	manager, runner := readArchive(t, managerPath), readArchive(t, runnerPath)
	for _, tc := range []struct {
		img  *image
		repo string
	}{{manager, "captf"}, {runner, "captf-runner"}} {
		c := tc.img.config
		if !strings.HasSuffix(tc.img.ref, "/"+tc.repo+":"+version) {
			t.Errorf("ref %s, want <registry>/%s:%s", tc.img.ref, tc.repo, version)
		}
		if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/captf" {
			t.Errorf("%s: user %q entrypoint %v, want 65532:65532 and /captf", tc.repo, c.User, c.Entrypoint)
		}
		if h := tc.img.files["/captf"]; h == nil || h.Mode&0o111 == 0 {
			t.Errorf("%s: no executable /captf", tc.repo)
		}
		if len(tc.img.data["/etc/ssl/certs/ca-certificates.crt"]) < 100_000 {
			t.Errorf("%s: no CA bundle", tc.repo)
		}
		if h := tc.img.files["/tmp"]; h == nil || h.Mode&0o1777 != 0o1777 {
			t.Errorf("%s: /tmp is not world-writable with the sticky bit", tc.repo)
		}
		if h := tc.img.files["/home/nonroot"]; h == nil || h.Uid != 65532 {
			t.Errorf("%s: the home directory does not belong to 65532", tc.repo)
		}
		for name, h := range tc.img.files {
			if h.ModTime.Unix() != tc.img.files["/captf"].ModTime.Unix() {
				t.Errorf("%s: %s has its own time %s: the build is not reproducible", tc.repo, name, h.ModTime)
				break
			}
		}
	}
	for _, shell := range []string{"/bin/sh", "/bin/busybox", "/usr/bin/git"} {
		if _, ok := manager.files[shell]; ok {
			t.Errorf("the manager image holds %s", shell)
		}
	}
	for _, want := range []string{"/usr/local/bin/tofu", "/usr/bin/git", "/usr/lib/git-core/git-remote-https", "/usr/bin/ssh", "/bin/sh", "/bin/busybox"} {
		if _, ok := runner.files[want]; !ok {
			t.Errorf("the runner image lacks %s", want)
		}
	}
	if runner.config.WorkingDir != "/workspace" {
		t.Errorf("runner working directory %q", runner.config.WorkingDir)
	}
	// The binary inside prints the tag's version.
	bin := filepath.Join(t.TempDir(), "captf")
	if err := os.WriteFile(bin, manager.data["/captf"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "captf "+version+" ") {
		t.Errorf("captf version in the image: %q %v, want %s", out, err, version)
	}
}

// TestImagesReproducible: building the same commit again gives the same
// digests.
func TestImagesReproducible(t *testing.T) {
	_, managerPath, runnerPath := archives(t)
	before := []string{readArchive(t, managerPath).digest, readArchive(t, runnerPath).digest}
	root, _ := framework.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "hack", "build-images.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-images.sh: %v\n%s", err, out)
	}
	after := []string{readArchive(t, managerPath).digest, readArchive(t, runnerPath).digest}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("digests %v, then %v", before, after)
	}
}

// TestRunnerImageRuns: unpacked as a runtime unpacks it and run chrooted as
// its user, the runner image runs captf, tofu, a shell and git (a clone of
// a local repository); the manager image has no shell to run.
func TestRunnerImageRuns(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("chroot needs root")
	}
	version, managerPath, runnerPath := archives(t)
	rootfs := t.TempDir()
	cfg, err := framework.UnpackImage(runnerPath, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.MakeDevices(rootfs); err != nil { // git reads /dev/null and /dev/urandom
		t.Fatal(err)
	}
	run := func(root string, args ...string) (string, error) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = cfg.Env
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"/captf", "version"}, "captf " + version},
		{[]string{"/usr/local/bin/tofu", "version"}, "OpenTofu v"},
		{[]string{"/bin/sh", "-c", "echo $HOME; mkdir -p /tmp/repo && cd /tmp/repo && git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m first && git clone -q file:///tmp/repo /tmp/clone && git -C /tmp/clone log --format=%s"},
			"/home/nonroot\nfirst"},
		{[]string{"/usr/bin/ssh", "-V"}, "OpenSSH_"},
	} {
		out, err := run(rootfs, tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%v in the runner image: %v\n%s", tc.args, err, out)
		}
	}

	managerRoot := t.TempDir()
	if _, err := framework.UnpackImage(managerPath, managerRoot); err != nil {
		t.Fatal(err)
	}
	if out, err := run(managerRoot, "/captf", "version"); err != nil || !strings.Contains(out, version) {
		t.Errorf("captf in the manager image: %v %s", err, out)
	}
	if _, err := run(managerRoot, "/bin/sh", "-c", "true"); err == nil {
		t.Error("the manager image runs a shell")
	}
}
