package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/run"
)

// The terraform process: which binary, its CLI configuration (providers
// from the mirror), the module prepared in its directory, and each command
// run with its output kept, bounded and interruptible.

// cliConfigFile is terraform's CLI configuration when the run has a
// provider mirror: in the working directory's .terraform, the one entry
// init -from-module allows in the directory it fills, and where no module
// file goes.
const cliConfigFile = ".terraform/captf-cli.tfrc"

// providerInstallation returns terraform's environment: the pod's, and
// with a provider mirror a CLI configuration that installs the providers
// it holds from it and only others from their registries. init checks
// what it installs against the module's .terraform.lock.hcl, if it has
// one, as it does for a download.
func (r *Runner) providerInstallation(ctx context.Context) ([]string, error) {
	env := os.Environ()
	mirror := r.Config.ProviderMirror
	if mirror == "" {
		return env, nil
	}
	// HOST/NAMESPACE/TYPE, as terraform providers mirror lays them out.
	dirs, err := filepath.Glob(filepath.Join(mirror, "*", "*", "*"))
	if err != nil {
		return nil, err
	}
	var providers []string
	for _, d := range dirs {
		rel, _ := filepath.Rel(mirror, d)
		rel = filepath.ToSlash(rel)
		if info, err := os.Stat(d); err != nil || !info.IsDir() || !providerAddress.MatchString(rel) {
			// Not a provider: an image built FROM a distribution has
			// its directories too. One odd pattern would make terraform
			// drop the whole installation block.
			klog.FromContext(ctx).V(2).Info("Not a provider of the mirror; skipped", "path", rel)
			continue
		}
		providers = append(providers, strconv.Quote(rel))
	}
	if len(providers) == 0 {
		return nil, fmt.Errorf("the provider mirror %s holds no provider (want HOST/NAMESPACE/TYPE directories, as terraform providers mirror writes them)", mirror)
	}
	klog.FromContext(ctx).V(2).Info("Installing providers from the mirror", "mirror", mirror, "providers", providers)
	// The CLI configuration the pod has (the image's, or the Job's env)
	// keeps its credentials, hosts and cache: the mirror's is added to it.
	existing, err := currentCLIConfig()
	if err != nil {
		return nil, err
	}
	if bytes.Contains(existing, []byte("provider_installation")) {
		return nil, errors.New("the pod's terraform CLI configuration has a provider_installation block of its own: it and the manager's --provider-mirror-image exclude each other; drop one")
	}
	list := strings.Join(providers, ", ")
	config := string(existing) + "\n" + fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path    = %q\n    include = [%s]\n  }\n  direct {\n    exclude = [%s]\n  }\n}\n", mirror, list, list)
	path := filepath.Join(r.Config.WorkDir, cliConfigFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return append(env, "TF_CLI_CONFIG_FILE="+path), nil
}

// providerAddress is HOST/NAMESPACE/TYPE of a provider, as a mirror lays
// them out; a registry's host name has a dot (etc/ssl/certs is no
// provider).
var providerAddress = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)+(:[0-9]+)?/[a-zA-Z0-9][a-zA-Z0-9_-]*/[a-z0-9][a-z0-9_-]*$`)

// currentCLIConfig is the CLI configuration terraform would read in this
// pod: the file TF_CLI_CONFIG_FILE names, else ~/.terraformrc.
func currentCLIConfig() ([]byte, error) {
	path := os.Getenv("TF_CLI_CONFIG_FILE")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, nil
		}
		path = filepath.Join(home, ".terraformrc")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// prepare writes the root module, the backend override and the inputs.
func (r *Runner) prepare(ctx context.Context, tf, dir string, m run.Module, tfvars []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(m.Source, "oci://") && (m.Digest != "" || r.Config.Operation == infrav1.OperationResolve):
		// A catalog version's package: the runner fetches it (a
		// tenant's own oci:// source is terraform's to fetch).
		if err := newOCIClient(r.ociCreds, r.registryToken).fetch(ctx, m.Source, dir); err != nil {
			return err
		}
	case m.Source != "":
		// Terraform's own installer fetches the module (git, registry,
		// https, s3, ...) into the empty working directory.
		if _, err := r.exec(ctx, tf, dir, r.env, "init", "-input=false", "-no-color", "-backend=false", "-from-module="+m.Source); err != nil {
			return err
		}
	case m.Inline != "":
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(m.Inline), 0o644); err != nil {
			return err
		}
	case len(m.Files) > 0:
		for name, content := range m.Files {
			// The dependency lock file is the one hidden file a module has:
			// init checks the providers it installs against its hashes.
			if name != filepath.Base(name) || (strings.HasPrefix(name, ".") && name != ".terraform.lock.hcl") {
				return fmt.Errorf("module file name %q is not a plain file name", name)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
	default:
		return errors.New("the inputs name no module")
	}
	if err := checkOverrides(dir); err != nil {
		return err
	}
	backend := "terraform {\n  backend \"http\" {}\n}\n"
	if err := os.WriteFile(filepath.Join(dir, backendOverrideFile), []byte(backend), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, tfvarsFile), tfvars, 0o600)
}

// interruptLocked sends the running terraform one SIGTERM, however many
// reasons to stop come (the pod's SIGTERM, a second one, the lock lost): a
// second interrupt makes terraform exit at once and lose what an apply
// made. r.mu is held.
func (r *Runner) interruptLocked() {
	if r.child != nil && r.child.Process != nil && r.interrupted != r.child {
		r.interrupted = r.child
		_ = r.child.Process.Signal(syscall.SIGTERM)
	}
}

// exec runs terraform; its output goes to the log, stdout is also returned.
// A failure carries terraform's own message.
func (r *Runner) exec(ctx context.Context, tf, dir string, env []string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tf, args...)
	cmd.Dir, cmd.Env = dir, env
	// A process group of its own: where SIGTERM reaches the pod's whole
	// group (an init that signals groups), terraform must not get it as
	// well as the runner's forwarded one. Two interrupts make it exit at
	// once and lose what the apply made.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Each stream its own line buffer: a line of stderr written amid one of
	// stdout must not split a value of either.
	var outLog, errLog io.Writer = io.Discard, io.Discard
	if r.Log != nil {
		log := &lockedWriter{w: r.Log}
		ow, ew := r.redact.Writer(log), r.redact.Writer(log)
		defer ow.Close()
		defer ew.Close()
		outLog, errLog = ow, ew
	}
	if args[0] == "show" || args[0] == "output" {
		cmd.Stdout = &stdout // machine-readable, and outputs may be sensitive: not logged
	} else {
		cmd.Stdout = io.MultiWriter(&stdout, outLog)
	}
	cmd.Stderr = io.MultiWriter(&stderr, errLog)
	r.mu.Lock()
	if r.signal {
		r.mu.Unlock()
		return nil, errors.New("interrupted by SIGTERM before terraform " + args[0])
	}
	if r.lockLost != nil {
		r.mu.Unlock()
		return nil, errors.New("the state lock was lost before terraform " + args[0])
	}
	started := r.clock().Now()
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("starting %s: %w", tf, err)
	}
	r.child = cmd
	r.mu.Unlock()
	err := cmd.Wait()
	// What the command left running in its group (a program of the
	// module's code that lingers) goes with it: it would act while the
	// runner goes on, on a plan it could change.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	r.mu.Lock()
	r.child = nil
	took := r.clock().Since(started)
	r.terraformTime += took
	r.terraformRuns++
	if cmd.ProcessState != nil {
		r.terraformCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	r.mu.Unlock()
	klog.FromContext(ctx).Info("Terraform command ended", "command", args[0], "took", took.Round(time.Millisecond))
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		if oom := r.outOfMemory(args[0]); oom != nil {
			return nil, fmt.Errorf("%w. terraform %s: %v: %s", oom, args[0], err, msg)
		}
		return nil, &terraformError{command: args[0], err: err, message: msg}
	}
	return stdout.Bytes(), ctx.Err()
}

// terraformError is a terraform command that failed, with terraform's own
// message: what the cloud said, unlike the runner's own failures.
type terraformError struct {
	command, message string
	err              error
}

func (e *terraformError) Error() string {
	return fmt.Sprintf("terraform %s: %v: %s", e.command, e.err, e.message)
}

// terraform is the binary the run executes: terraform or tofu from the
// image, never a file of the module (the working directory is the
// module's), whatever $CAPTF_TERRAFORM or PATH say: an envFrom the writer
// controls sets either.
func (r *Runner) terraform() (string, error) {
	candidates := []string{"terraform", "tofu"}
	if r.Config.Terraform != "" {
		candidates = []string{r.Config.Terraform}
	}
	for _, b := range candidates {
		p, err := exec.LookPath(b)
		if err != nil {
			if r.Config.Terraform != "" {
				return "", err
			}
			continue
		}
		return p, r.checkTerraform(p)
	}
	return "", errors.New("neither terraform nor tofu is on PATH")
}

// checkTerraform refuses a binary that is not named terraform or tofu, or
// that lies in the working directory.
func (r *Runner) checkTerraform(p string) error {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return err
	}
	if base := filepath.Base(real); !strings.HasPrefix(base, "terraform") && !strings.HasPrefix(base, "tofu") {
		return fmt.Errorf("%s is neither terraform nor tofu: the runner runs only those", p)
	}
	work, err := filepath.Abs(r.Config.WorkDir)
	if err != nil {
		return err
	}
	if abs, err := filepath.Abs(real); err != nil || abs == work || strings.HasPrefix(abs, work+string(filepath.Separator)) {
		return fmt.Errorf("%s is in the working directory, where the module's files are: the runner runs only the image's terraform or tofu", p)
	}
	return nil
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// excerpt keeps the start of an error, where terraform says what went
// wrong, short enough for a condition message.
func excerpt(s string) string {
	s = ansi.ReplaceAllString(s, "")
	const max = 2000
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// lockedWriter writes whole lines of two streams one at a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
