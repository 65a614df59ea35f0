package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/captf/captf/pkg/run"
)

// Files of the working directory that are the runner's, not the module's:
// the backend it serves, the variables it writes, the plan it makes, and
// what terraform init keeps of its own (providers come from the lock file's
// hashes, which the digest covers).
var runnerFiles = map[string]bool{
	backendOverrideFile:            true,
	tfvarsFile:                     true,
	planFile:                       true,
	cliConfigFile:                  true,
	credentialsDir:                 true,
	".terraform/terraform.tfstate": true,
	".terraform/environment":       true,
	".terraform/providers":         true,
}

const (
	backendOverrideFile = "zz_captf_backend_override.tf"
	tfvarsFile          = "terraform.tfvars.json"
	planFile            = "captf.tfplan"
)

// maxListedFiles bounds the files a ModuleCode lists by name: the digest
// covers every file, the list is for people.
const maxListedFiles = 500

// dropGitMetadata removes what git keeps of the modules init cloned (every
// .git below dir): terraform never reads it, and code kept there, out of
// the digest's sight, could be named by a module source later.
func dropGitMetadata(dir string) error {
	var gits []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, path); isRunnerFile(filepath.ToSlash(rel)) {
			return skip(d)
		}
		if d.Name() == ".git" {
			gits = append(gits, path)
			return skip(d)
		}
		return nil
	})
	for _, path := range gits {
		err = errors.Join(err, os.RemoveAll(path))
	}
	return err
}

func skip(d fs.DirEntry) error {
	if d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

// isRunnerFile tells whether rel (a slash path in the working directory)
// is, or lies in, one of runnerFiles.
func isRunnerFile(rel string) bool {
	for f := range runnerFiles {
		if rel == f || strings.HasPrefix(rel, f+"/") {
			return true
		}
	}
	return false
}

// moduleCode hashes the code a run in dir would execute: every file (its
// path, whether it is executable, its content; a link's target) but the
// runner's own, as terraform init left them
// (dropGitMetadata first).
func moduleCode(dir string) (*run.ModuleCode, error) {
	files := map[string]string{}
	digest := sha256.New()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if isRunnerFile(rel) {
			return skip(d)
		}
		if !d.IsDir() {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	for _, rel := range paths {
		sum, kind, err := hashFile(dir, rel)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(digest, "%s %q %s\n", kind, rel, sum)
		files[rel] = kind + ":" + sum[:16]
	}
	code := &run.ModuleCode{Digest: "sha256:" + hex.EncodeToString(digest.Sum(nil))}
	if len(files) <= maxListedFiles {
		code.Files = files
	}
	return code, nil
}

// hashFile is the hash of the file rel of dir and its kind: "l" a link
// (its target), "x" an executable file, "f" another. A link may point
// only into dir and not at the runner's files, where what it points at is
// hashed at its own path: terraform reads through links, and a module
// file linked to the variables file (or to one outside the module) would
// be code that changes while the digest stays.
func hashFile(dir, rel string) (string, string, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	info, err := os.Lstat(path)
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	kind := "f"
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return "", "", err
		}
		to := target
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(path), to)
		}
		inside, err := filepath.Rel(dir, to)
		if err != nil || inside == ".." || strings.HasPrefix(inside, "../") || isRunnerFile(filepath.ToSlash(inside)) {
			return "", "", fmt.Errorf("module file %q is a link to %q, outside the module or to a file of the runner's: links may point only at the module's own files", rel, target)
		}
		kind = "l"
		io.WriteString(h, target)
	case !info.Mode().IsRegular():
		return "", "", fmt.Errorf("module file %q is neither a file nor a link", rel)
	default:
		if info.Mode()&0o111 != 0 {
			kind = "x"
		}
		if err := hashContent(h, path); err != nil {
			return "", "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), kind, nil
}

func hashContent(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// checkOverrides refuses a root module file that would replace what the
// runner's backend override sets: terraform merges override files in name
// order, the last one winning, and OpenTofu reads a .tofu file instead of
// the .tf of the same name. A module's own backend would take the state
// out of CAPTF's hands at init, before the code gate.
func checkOverrides(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if name <= backendOverrideFile {
			continue
		}
		base := name
		for _, ext := range []string{".tf", ".tf.json", ".tofu", ".tofu.json"} {
			if b, ok := strings.CutSuffix(name, ext); ok {
				base = b
			}
		}
		if base != name && (base == "override" || strings.HasSuffix(base, "_override")) {
			return fmt.Errorf("module file %q is an override file named after the runner's %s, so it could replace the state backend: rename it to sort before %q (override files merge in name order)",
				name, backendOverrideFile, backendOverrideFile)
		}
	}
	return nil
}
