package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleCode: the digest changes with every file of the module and of
// the modules init fetched, and with nothing the runner or init writes of
// their own.
func TestModuleCode(t *testing.T) {
	base := map[string]string{
		"main.tf":                                 `resource "terraform_data" "x" {}`,
		".terraform.lock.hcl":                     `provider "captf.io/captf/localcloud" {}`,
		".terraform/modules/modules.json":         `{"Modules":[{"Key":"net","Dir":".terraform/modules/net"}]}`,
		".terraform/modules/net/main.tf":          `resource "terraform_data" "net" {}`,
		".terraform/modules/net/.git/HEAD":        "ref: refs/heads/main",
		".terraform/providers/p/terraform-plugin": "binary",
		".terraform/terraform.tfstate":            `{"backend":{"type":"http"}}`,
		backendOverrideFile:                       "terraform {}",
		tfvarsFile:                                `{"a":1}`,
		planFile:                                  "plan",
		cliConfigFile:                             "provider_installation {}",
	}
	digest := func(t *testing.T, files map[string]string, exec string) string {
		t.Helper()
		dir := t.TempDir()
		for name, content := range files {
			path := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if name == exec {
				mode = 0o755
			}
			if err := os.WriteFile(path, []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := dropGitMetadata(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, ".terraform/modules/net/.git")); !os.IsNotExist(err) {
			t.Fatalf("git's metadata after dropGitMetadata: %v", err)
		}
		code, err := moduleCode(dir)
		if err != nil {
			t.Fatal(err)
		}
		return code.Digest
	}
	with := func(name, content string) map[string]string {
		files := map[string]string{}
		for k, v := range base {
			files[k] = v
		}
		if content == "" {
			delete(files, name)
		} else {
			files[name] = content
		}
		return files
	}
	want := digest(t, base, "")
	cases := []struct {
		name    string
		files   map[string]string
		exec    string
		changed bool
	}{
		{"the root module's file", with("main.tf", `resource "terraform_data" "y" {}`), "", true},
		{"a file added", with("extra.tf", `data "external" "x" {}`), "", true},
		{"a file removed", with("main.tf", ""), "", true},
		{"a called module's file", with(".terraform/modules/net/main.tf", `resource "terraform_data" "other" {}`), "", true},
		{"the lock file", with(".terraform.lock.hcl", `provider "other" {}`), "", true},
		{"a script made executable", base, "main.tf", true},
		{"git's metadata", with(".terraform/modules/net/.git/HEAD", "ref: refs/heads/other"), "", false},
		{"code kept in git's metadata", with(".terraform/modules/net/.git/hidden/main.tf", `data "external" "x" {}`), "", false},
		{"the variables", with(tfvarsFile, `{"a":2}`), "", false},
		{"the providers init installed", with(".terraform/providers/p/terraform-plugin", "other"), "", false},
		{"the backend", with(backendOverrideFile, "terraform { backend \"http\" {} }"), "", false},
		{"the plan", with(planFile, "another plan"), "", false},
	}
	for _, tc := range cases {
		if got := digest(t, tc.files, tc.exec); (got != want) != tc.changed {
			t.Errorf("%s: digest %s, before %s: want changed %v", tc.name, got, want, tc.changed)
		}
	}
}

// TestModuleCodeLinks: a link may point only at the module's own files
// (hashed at their own paths): linked to the variables file (or
// out of the working directory) a module file would be code that changes
// while the digest stays.
func TestModuleCodeLinks(t *testing.T) {
	setup := func(t *testing.T, link, target, targetContent string) string {
		t.Helper()
		dir := t.TempDir()
		files := map[string]string{"main.tf": `resource "terraform_data" "x" {}`, tfvarsFile: `{"a":1}`, "shared/vars.tf": targetContent}
		for name, content := range files {
			path := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	digest := func(t *testing.T, dir string) (string, error) {
		code, err := moduleCode(dir)
		if err != nil {
			return "", err
		}
		return code.Digest, nil
	}
	if _, err := digest(t, setup(t, "vars.tf", "shared/vars.tf", `variable "a" {}`)); err != nil {
		t.Errorf("a link to the module's own file: %v", err)
	}
	for _, tc := range []struct{ name, link, target string }{
		{"the variables file", "vars.tf.json", tfvarsFile},
		{"the variables file, by a longer way", "vars.tf.json", "shared/../" + tfvarsFile},
		{"the providers init installed", "p.tf", ".terraform/providers"},
		{"outside the module", "host.tf", "../../etc/hostname"},
		{"an absolute path outside", "token.tf", "/var/run/secrets/captf.io/runner/token"},
	} {
		dir := setup(t, tc.link, tc.target, `variable "a" {}`)
		if _, err := digest(t, dir); err == nil || !strings.Contains(err.Error(), "links may point only at the module's own files") {
			t.Errorf("a link to %s: %v, want it refused", tc.name, err)
		}
	}
}

// TestCheckOverrides: a module file that terraform would merge after the
// runner's backend override, or that OpenTofu would read instead of it,
// is refused before init; other files, override files before it too, are
// the module's.
func TestCheckOverrides(t *testing.T) {
	tests := map[string]bool{ // file name: refused
		"main.tf":                           false,
		"override.tf":                       false,
		"a_override.tf":                     false,
		"zz_captf_backend_override.tf":      false, // the runner's own
		"zzz_override.tf":                   true,
		"zzz_override.tf.json":              true,
		"zz_captf_backend_override.tofu":    true,
		"zz_captf_backend_override.tf.json": true,
		"zzz_override.tofu.json":            true,
		"zzz.tf":                            false,
		"zzz_override.txt":                  false,
		"zzz_override_notes.tf":             false,
	}
	for name, refused := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{name, backendOverrideFile} {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("terraform {}\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := checkOverrides(dir)
			if (err != nil) != refused {
				t.Errorf("checkOverrides with %s: %v, want refused %v", name, err, refused)
			}
			if err != nil && !strings.Contains(err.Error(), name) {
				t.Errorf("the refusal %q does not name the file", err)
			}
		})
	}
}
