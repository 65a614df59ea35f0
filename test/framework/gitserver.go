package framework

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// GitServer is a real git server on loopback: git's own http-backend (the
// smart HTTP protocol) behind Go's CGI handler, with basic auth in front
// when User is set. Repositories are bare ones under Root.
type GitServer struct {
	Root string
	URL  string // http://127.0.0.1:port
	// User and Password, when set, are required of every request.
	User, Password string
	srv            *http.Server
	sshd           *exec.Cmd
}

// StartGitServer serves the bare repositories under root.
func StartGitServer(root, user, password string) (*GitServer, error) {
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git-http-backend (Debian package git): %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &GitServer{Root: root, URL: "http://" + ln.Addr().String(), User: user, Password: password}
	cgiHandler := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	g.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.User != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != g.User || p != g.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "authentication required", http.StatusUnauthorized)
				return
			}
		}
		cgiHandler.ServeHTTP(w, r)
	})}
	go g.srv.Serve(ln) //nolint:errcheck // closed by Close
	return g, nil
}

// Close stops the server (and its SSH server).
func (g *GitServer) Close() {
	_ = g.srv.Close()
	if g.sshd != nil {
		_ = g.sshd.Process.Kill()
		_ = g.sshd.Wait()
	}
}

// GitSSH is the SSH side of a GitServer: the URL of its repositories and
// the only key it accepts, with the known_hosts line of its host key.
type GitSSH struct {
	URL                    string // ssh://git@127.0.0.1:port
	PrivateKey, KnownHosts []byte
}

var buildGitSSHD = sync.OnceValues(func() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(root, "bin", "gitsshd")
	cmd := exec.Command("go", "build", "-o", out, "./gitsshd")
	cmd.Dir = filepath.Join(root, "hack", "tools")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building hack/tools/gitsshd: %v\n%s", err, b)
	}
	return out, nil
})

// ServeSSH serves the same repositories over SSH as well (git-upload-pack
// only), with hack/tools/gitsshd: a key of its own making, a host key
// known_hosts names.
func (g *GitServer) ServeSSH() (*GitSSH, error) {
	bin, err := buildGitSSHD()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "captf-gitsshd-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(bin, "-root", g.Root, "-dir", dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g.sshd = cmd
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		return nil, fmt.Errorf("gitsshd did not start: %q %v", line, err)
	}
	s := &GitSSH{URL: "ssh://git@" + addr}
	if s.PrivateKey, err = os.ReadFile(filepath.Join(dir, "id_ed25519")); err != nil {
		return nil, err
	}
	if s.KnownHosts, err = os.ReadFile(filepath.Join(dir, "known_hosts")); err != nil {
		return nil, err
	}
	return s, nil
}

// Commit writes files into repository name (a bare repository made on
// first use), as one commit on branch, and returns its ID.
func (g *GitServer) Commit(name, branch string, files map[string]string) (string, error) {
	bare := filepath.Join(g.Root, name+".git")
	if _, err := os.Stat(bare); os.IsNotExist(err) {
		if out, err := exec.Command("git", "init", "-q", "--bare", "-b", branch, bare).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git init: %v: %s", err, out)
		}
	}
	work, err := os.MkdirTemp("", "captf-git-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=captf", "GIT_AUTHOR_EMAIL=captf@example.com",
			"GIT_COMMITTER_NAME=captf", "GIT_COMMITTER_EMAIL=captf@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := git("clone", "-q", bare, "."); err != nil {
		return "", err
	}
	if _, err := git("checkout", "-q", "-B", branch); err != nil {
		return "", err
	}
	for path, content := range files {
		p := filepath.Join(work, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if _, err := git("add", "-A"); err != nil {
		return "", err
	}
	if _, err := git("commit", "-q", "--allow-empty", "-m", "change"); err != nil {
		return "", err
	}
	if _, err := git("push", "-q", "origin", branch); err != nil {
		return "", err
	}
	return git("rev-parse", "HEAD")
}

// Tag points tag of repository name at the head of branch.
func (g *GitServer) Tag(name, branch, tag string) error {
	bare := filepath.Join(g.Root, name+".git")
	if out, err := exec.Command("git", "-C", bare, "tag", "-f", tag, branch).CombinedOutput(); err != nil {
		return fmt.Errorf("git tag: %v: %s", err, out)
	}
	return nil
}
