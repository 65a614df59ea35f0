package framework

import (
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// Close stops the server.
func (g *GitServer) Close() { _ = g.srv.Close() }

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
