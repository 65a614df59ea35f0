// Command imagebuild writes an OCI image archive (an OCI image layout in a
// tar) from root filesystem directories, one layer each, without a
// container engine. The output depends only on the inputs: files in name
// order, every time set to --epoch, owners as --owner says, so the same
// inputs give the same image digest on any machine.
//
//	imagebuild --out captf.tar --ref ghcr.io/captf/captf:v0.1.0 --epoch 1700000000 \
//	  --entrypoint /captf --user 65532:65532 --layer rootfs-base --layer rootfs-app
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run() error {
	var layers, env, labels, owners list
	out := flag.String("out", "", "the OCI image archive to write")
	ref := flag.String("ref", "", "the image's name and tag (org.opencontainers.image.ref.name)")
	epoch := flag.Int64("epoch", 0, "the time of every file and of the image (seconds since 1970: the commit's)")
	entrypoint := flag.String("entrypoint", "", "the entrypoint")
	user := flag.String("user", "", "uid:gid the container runs as")
	workdir := flag.String("workdir", "/", "the working directory")
	flag.Var(&layers, "layer", "a root filesystem directory, one layer each, bottom first")
	flag.Var(&env, "env", "KEY=value for the image's environment")
	flag.Var(&labels, "label", "key=value label")
	flag.Var(&owners, "owner", "path=uid:gid: files under path (in every layer) belong to uid:gid; the rest to 0:0")
	flag.Parse()
	if *out == "" || *ref == "" || len(layers) == 0 {
		return errors.New("--out, --ref and at least one --layer are required")
	}
	when := time.Unix(*epoch, 0).UTC()
	img := empty.Image
	for _, dir := range layers {
		var buf bytes.Buffer
		if err := tarDir(&buf, dir, when, owners); err != nil {
			return err
		}
		b := buf.Bytes()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: when}, CreatedBy: "imagebuild " + filepath.Base(dir)}}); err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Created, cfg.OS, cfg.Architecture = v1.Time{Time: when}, "linux", "amd64"
	cfg.Config.User, cfg.Config.WorkingDir, cfg.Config.Env = *user, *workdir, env
	if *entrypoint != "" {
		cfg.Config.Entrypoint = []string{*entrypoint}
	}
	cfg.Config.Labels = map[string]string{}
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		cfg.Config.Labels[k] = v
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	img = mutate.MediaType(mutate.ConfigMediaType(img, types.OCIConfigJSON), types.OCIManifestSchema1)

	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": *ref})); err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := tarDir(f, tmp, when, nil); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", *out, *ref, digest)
	return nil
}

// tarDir writes the tree under dir as a tar: names relative to dir, in
// order, times set to when, owners per owners (path=uid:gid), else 0:0.
func tarDir(w io.Writer, dir string, when time.Time, owners []string) error {
	type owner struct {
		prefix   string
		uid, gid int
	}
	var own []owner
	for _, o := range owners {
		path, ids, ok := strings.Cut(o, "=")
		var uid, gid int
		if _, err := fmt.Sscanf(ids, "%d:%d", &uid, &gid); !ok || err != nil {
			return fmt.Errorf("--owner %q: want path=uid:gid", o)
		}
		own = append(own, owner{strings.Trim(path, "/"), uid, gid})
	}
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = when, time.Time{}, time.Time{}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		for _, o := range own {
			if hdr.Name == o.prefix || strings.HasPrefix(hdr.Name, o.prefix+"/") {
				hdr.Uid, hdr.Gid = o.uid, o.gid
			}
		}
		hdr.Format = tar.FormatPAX
		hdr.PAXRecords = nil
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
