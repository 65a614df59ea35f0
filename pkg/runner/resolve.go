package runner

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/captf/captf/pkg/catalog"
	"github.com/captf/captf/pkg/run"
)

// commitID is a full git commit ID (SHA-1 or SHA-256).
var commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// errCatalogDigest: a catalog module's code is not the code the catalog
// resolved.
var errCatalogDigest = errors.New("the module's code is not the catalog's")

// resolve is a catalog Job's run: it fetches one version of a catalog
// module as a run would (at the commit its ref names, for git), and
// reports the code's digest as a run's init leaves it, and the variables
// and outputs the code declares. It takes no lock, reads no state and runs
// no module code: terraform init fetches modules and installs providers,
// and plans nothing.
func (r *Runner) resolve(ctx context.Context, res *run.Result) error {
	res.Stage = run.StageWorkspace
	inputs, err := r.readInputs(ctx, r.obj.RunInputs(r.Config.Job))
	if err != nil {
		return fmt.Errorf("reading the inputs: %w", err)
	}
	var module run.Module
	if err := json.Unmarshal(inputs.Data[run.KeyModule], &module); err != nil {
		return fmt.Errorf("inputs: %s: %w", run.KeyModule, err)
	}
	tf, err := r.terraform()
	if err != nil {
		return err
	}
	if r.env, err = r.providerInstallation(ctx); err != nil {
		return err
	}
	secrets, err := r.withCredentials(ctx, module.Credentials, "")
	if err != nil {
		return err
	}
	// Never in the log, status or a condition: git and a registry may
	// quote what they were given.
	if r.redact, err = NewRedactor(nil, nil, secrets...); err != nil {
		return err
	}
	defer func() { _, _ = r.dropCredentials() }() // no module code runs in a resolve
	resolved := &run.Resolved{}
	if g := module.Git; g != nil {
		if resolved.Commit, err = r.gitCommit(ctx, g); err != nil {
			return err
		}
		module = run.Module{Source: GitSource(g.URL, g.Path, resolved.Commit)}
	}
	if o := module.OCI; o != nil {
		digest, err := newOCIClient(r.ociCreds, r.registryToken).resolve(ctx, o.Repository, o.Ref)
		if err != nil {
			return err
		}
		module = run.Module{Source: ociSource(o.Repository, digest)}
	}
	fromRegistry := module.Registry != nil
	if reg := module.Registry; reg != nil {
		source, err := registrySource(ctx, fetchClient(), reg, r.registryToken)
		if err != nil {
			return err
		}
		module = run.Module{Source: source}
	}
	if !fromRegistry {
		// A registry's location may be short-lived (a signed URL):
		// runs ask the registry again, and the digest pins the code.
		resolved.Source = module.Source
	}
	res.Stage = run.StageInit
	if err := r.prepare(ctx, tf, r.Config.WorkDir, module, []byte("{}")); err != nil {
		return err
	}
	if module.Source == "" || strings.HasPrefix(module.Source, "oci://") {
		// What a run's init adds to files it wrote: child modules and
		// the providers' lock file, which the digest covers.
		if _, err := r.exec(ctx, tf, r.Config.WorkDir, r.env, "init", "-input=false", "-no-color", "-backend=false"); err != nil {
			return err
		}
	}
	res.Stage = run.StageModule
	if err := dropGitMetadata(r.Config.WorkDir); err != nil {
		return fmt.Errorf("removing the modules' git metadata: %w", err)
	}
	if res.Module, err = moduleCode(r.Config.WorkDir); err != nil {
		return fmt.Errorf("hashing the module's code: %w", err)
	}
	if resolved.Variables, resolved.Outputs, err = catalog.Inspect(r.Config.WorkDir); err != nil {
		return fmt.Errorf("reading the module's variables and outputs: %w", err)
	}
	res.Resolved = resolved
	res.Stage = ""
	return nil
}

// GitSource is the module source address of path in the repository url at
// commit.
func GitSource(url, path, commit string) string {
	s := "git::" + url
	if path != "" {
		s += "//" + path
	}
	return s + "?ref=" + commit
}

// gitCommit is the commit g.Ref names now: a commit ID as it is, else the
// branch or tag of that name (a tag's commit, not the tag object).
func (r *Runner) gitCommit(ctx context.Context, g *run.GitModule) (string, error) {
	if commitID.MatchString(g.Ref) {
		return g.Ref, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", "ls-remote", "--", g.URL)
	cmd.Env, cmd.Stdout, cmd.Stderr = r.env, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git ls-remote %s: %v: %s", g.URL, err, excerpt(r.redact.String(strings.TrimSpace(stderr.String()))))
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if id, ref, ok := strings.Cut(sc.Text(), "\t"); ok {
			refs[ref] = id
		}
	}
	for _, name := range []string{"refs/tags/" + g.Ref + "^{}", "refs/tags/" + g.Ref, "refs/heads/" + g.Ref, g.Ref} {
		if id, ok := refs[name]; ok && commitID.MatchString(id) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%s has no branch or tag %q", g.URL, g.Ref)
}
