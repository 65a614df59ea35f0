package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/pkg/retry"
	"github.com/captf/captf/pkg/run"
)

// credentialsDir holds a catalog module's credentials while terraform init
// fetches the module: in the pod's own working directory (never the
// module's: the digest skips it), removed before any module code runs.
const credentialsDir = ".terraform/captf-credentials"

// Keys of a catalog entry's credentials Secret the runner uses.
const (
	credentialGit        = ".git-credentials"
	credentialToken      = "token"
	credentialSSHKey     = "ssh-privatekey" // the key of a kubernetes.io/ssh-auth Secret
	credentialKnownHosts = "known_hosts"
	credentialDocker     = ".dockerconfigjson" // the key of a kubernetes.io/dockerconfigjson Secret
)

// withCredentials reads the catalog entry's credentials through the runner
// API and gives them to git (a credential store) and terraform (a registry
// token) in r.env. It returns the secret values, for the redactor.
// dropCredentials takes them back.
func (r *Runner) withCredentials(ctx context.Context, ref *run.SecretRef, registryHost string) ([]string, error) {
	if ref == nil {
		return nil, nil
	}
	var sec map[string][]byte
	err := retry.Transiently(ctx, func() error {
		s, err := r.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			sec = s.Data
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the catalog module's credentials %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	dir := filepath.Join(r.Config.WorkDir, credentialsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// While the credentials are used, nothing of the run's environment
	// (which a tenant writes) may put itself between the fetch and the
	// source: no proxy, no CA of its choosing. dropCredentials gives it
	// back.
	r.env, r.heldEnv = holdInterception(r.env)
	var secrets []string
	if b := sec[credentialGit]; len(b) > 0 {
		if err := checkGitCredentials(string(b)); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, credentialGit)
		if err := os.WriteFile(path, b, 0o400); err != nil {
			return nil, err
		}
		r.env = append(r.env, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=credential.helper", "GIT_CONFIG_VALUE_0=store --file="+path, "GIT_TERMINAL_PROMPT=0")
		secrets = append(secrets, gitPasswords(string(b))...)
	}
	if key := sec[credentialSSHKey]; len(key) > 0 {
		kh := sec[credentialKnownHosts]
		if len(bytes.TrimSpace(kh)) == 0 {
			return nil, fmt.Errorf("the catalog module's credentials have %s but no %s: without the server's host key, ssh could not tell it from an impostor, and would hand the key to either", credentialSSHKey, credentialKnownHosts)
		}
		keyPath, khPath := filepath.Join(dir, "id"), filepath.Join(dir, credentialKnownHosts)
		if !bytes.HasSuffix(key, []byte("\n")) {
			key = append(slices.Clip(key), '\n') // ssh refuses a key without its last newline
		}
		if err := os.WriteFile(keyPath, key, 0o400); err != nil {
			return nil, err
		}
		if err := os.WriteFile(khPath, kh, 0o400); err != nil {
			return nil, err
		}
		r.env = append(r.env, "GIT_SSH_COMMAND="+sshCommand(keyPath, khPath), "GIT_SSH_VARIANT=ssh")
		secrets = append(secrets, keyLines(key)...)
	}
	if b := sec[credentialDocker]; len(b) > 0 {
		creds, err := dockerConfigCredentials(b)
		if err != nil {
			return nil, err
		}
		r.ociCreds = creds
		for _, c := range creds {
			if c.password != "" {
				secrets = append(secrets, c.password, base64.StdEncoding.EncodeToString([]byte(c.user+":"+c.password)))
			}
		}
	}
	if b := strings.TrimSpace(string(sec[credentialToken])); b != "" {
		r.registryToken = b
		secrets = append(secrets, b)
		if registryHost != "" {
			r.env = append(r.env, "TF_TOKEN_"+tokenHost(registryHost)+"="+b)
		}
	}
	return secrets, nil
}

// dropCredentials removes what withCredentials gave, and returns the
// environment it held back (to add to any environment made meanwhile).
func (r *Runner) dropCredentials() ([]string, error) {
	held := r.heldEnv
	r.env = append(withoutCredentials(r.env), held...)
	r.registryToken, r.ociCreds, r.heldEnv = "", nil, nil
	err := os.RemoveAll(filepath.Join(r.Config.WorkDir, credentialsDir))
	if err != nil {
		return nil, errors.New("removing the catalog module's credentials: " + err.Error())
	}
	return held, nil
}

// interceptionEnv are variables that route or trust a connection: a
// proxy, or certificate authorities (a CA in the environment itself, read
// through /proc/self/environ, would do).
var interceptionEnv = map[string]bool{
	"HTTPS_PROXY": true, "HTTP_PROXY": true, "ALL_PROXY": true, "https_proxy": true, "http_proxy": true, "all_proxy": true,
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true, "GIT_SSL_CAINFO": true, "CURL_CA_BUNDLE": true,
}

// holdInterception splits env into what may stay while credentials are
// used and what is held back.
func holdInterception(env []string) (kept, held []string) {
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if interceptionEnv[name] {
			held = append(held, kv)
		} else {
			kept = append(kept, kv)
		}
	}
	return kept, held
}

// withoutCredentials is env without what withCredentials added.
func withoutCredentials(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GIT_CONFIG_") || strings.HasPrefix(name, "TF_TOKEN_") || strings.HasPrefix(name, "GIT_SSH") || name == "GIT_TERMINAL_PROMPT" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// sshCommand is the ssh git runs: with the entry's key only, and only
// to a server whose host key known_hosts names; no configuration file,
// agent or prompt of the pod's takes part.
func sshCommand(key, knownHosts string) string {
	return "ssh -F /dev/null -i " + shellQuote(key) + " -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes" +
		" -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + shellQuote(knownHosts) + " -o GlobalKnownHostsFile=/dev/null"
}

// shellQuote quotes s for the shell git runs GIT_SSH_COMMAND with.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// keyLines are the lines of a private key that are its secret (the base64
// body), for the redactor.
func keyLines(key []byte) []string {
	var out []string
	for _, line := range strings.Split(string(key), "\n") {
		line = strings.TrimSpace(line)
		if len(line) >= minTokenUser && !strings.HasPrefix(line, "-----") {
			out = append(out, line)
		}
	}
	return out
}

// checkGitCredentials refuses credentials for a plain http:// host other
// than this machine's: git would send them in clear text, through any proxy
// the run's environment names (a tenant's spec.jobs.env may name one).
func checkGitCredentials(s string) error {
	for _, line := range strings.Split(s, "\n") {
		u, err := url.Parse(strings.TrimSpace(line))
		if err != nil || u.Scheme != "http" {
			continue
		}
		if !loopback(u.Host) {
			return fmt.Errorf("the catalog module's .git-credentials name a plain http:// host (%s): git would send them in clear text, through any proxy the run's environment names; use https://", u.Hostname())
		}
	}
	return nil
}

// gitPasswords are the secrets of a .git-credentials file's URLs: each
// password, and each user name long enough to be a token (one often
// stands there; a short one is a name, and would blank out words of the
// log), as written and unescaped.
func gitPasswords(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), "://")
		if !ok {
			continue
		}
		userinfo, _, ok := strings.Cut(rest, "@")
		if !ok {
			continue
		}
		user, pw, _ := strings.Cut(userinfo, ":")
		if len(user) < minTokenUser {
			user = ""
		}
		for _, v := range []string{user, pw} {
			if v == "" {
				continue
			}
			out = append(out, v)
			if u, err := url.PathUnescape(v); err == nil && u != v {
				out = append(out, u)
			}
		}
	}
	return out
}

// minTokenUser is the shortest user name of a git URL taken for a token.
const minTokenUser = 20

// tokenHost is a host as TF_TOKEN_ names it: dots as underscores, dashes
// as double underscores.
func tokenHost(host string) string {
	return strings.NewReplacer(".", "_", "-", "__").Replace(host)
}
