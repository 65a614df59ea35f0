package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/captf/captf/pkg/run"
)

// TestRegistrySource: the module registry protocol, as a private registry
// that wants a token speaks it.
func TestRegistrySource(t *testing.T) {
	var paths []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/.well-known/terraform.json":
			fmt.Fprint(w, `{"modules.v1":"/api/modules/"}`)
		case "/api/modules/platform/vpc/aws/1.2.0/download":
			w.Header().Set("X-Terraform-Get", "git::https://git.example.com/vpc.git?ref=v1.2.0")
			w.WriteHeader(http.StatusNoContent)
		case "/api/modules/platform/vpc/aws/1.3.0/download":
			w.Header().Set("X-Terraform-Get", "./archives/vpc-1.3.0.tar.gz")
			w.WriteHeader(http.StatusNoContent)
		default:
			http.NotFound(w, r)
		}
	}))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	tests := map[string]struct {
		version, token, want, wantErr string
	}{
		"a version":                  {version: "1.2.0", token: "tok", want: "git::https://git.example.com/vpc.git?ref=v1.2.0"},
		"a location of the registry": {version: "1.3.0", token: "tok", want: reg.URL + "/api/modules/platform/vpc/aws/1.3.0/archives/vpc-1.3.0.tar.gz"},
		"no such version":            {version: "9.9.9", token: "tok", wantErr: "404"},
		"a wrong token":              {version: "1.2.0", token: "bad", wantErr: "the registry refused the entry's token"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := registrySource(context.Background(), reg.Client(), &run.RegistryModule{Address: host + "/platform/vpc/aws", Version: tc.version}, tc.token)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("registrySource = %q, %v, want %q", got, err, tc.want)
			}
		})
	}
	if _, err := registrySource(context.Background(), reg.Client(), &run.RegistryModule{Address: "registry.example.com/vpc", Version: "1"}, ""); err == nil {
		t.Error("an address without namespace, name and system was taken")
	}
}

func TestGitPasswords(t *testing.T) {
	got := gitPasswords("https://platform:s3cr%2Ft@git.example.com\nhttps://ghp_0123456789abcdefghij:x-oauth-basic@github.com\nnot a url\n")
	want := []string{"s3cr%2Ft", "s3cr/t", "ghp_0123456789abcdefghij", "x-oauth-basic"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("gitPasswords = %q, want %q", got, want)
	}
}

func TestCheckGitCredentials(t *testing.T) {
	for creds, ok := range map[string]bool{
		"https://u:p@git.example.com\n":       true,
		"http://u:p@127.0.0.1:8080\n":         true,
		"http://u:p@localhost:8080\n":         true,
		"http://u:p@git.example.com\n":        false,
		"https://a:b@x.com\nhttp://c:d@y.com": false,
	} {
		if err := checkGitCredentials(creds); (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", creds, err, ok)
		}
	}
}

// TestSSHCredentials: an entry's SSH key reaches git as a read-only file
// with known_hosts pinned, never without known_hosts, and is gone (file
// and environment) once dropped.
func TestSSHCredentials(t *testing.T) {
	const key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n-----END OPENSSH PRIVATE KEY-----\n"
	for _, tc := range []struct {
		name    string
		data    map[string][]byte
		wantErr string
	}{
		{name: "key and known_hosts", data: map[string][]byte{"ssh-privatekey": []byte(key), "known_hosts": []byte("[127.0.0.1]:2222 ssh-ed25519 AAAA\n")}},
		{name: "a key without known_hosts", data: map[string][]byte{"ssh-privatekey": []byte(key), "known_hosts": []byte(" \n")}, wantErr: "no known_hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "captf-system"}, Data: tc.data}
			work := t.TempDir()
			r := &Runner{Client: fake.NewClientset(sec), Config: Config{Spec: run.Spec{WorkDir: work}},
				env: []string{"GIT_SSH_COMMAND=tenant", "PATH=/bin", "HTTPS_PROXY=http://tenant:3128", "SSL_CERT_FILE=/proc/self/environ"}}
			secrets, err := r.withCredentials(context.Background(), &run.SecretRef{Namespace: "captf-system", Name: "creds"}, "")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Nothing of the tenant's may stand between the fetch and
			// the source while the key is in use.
			for _, kv := range r.env {
				if strings.HasPrefix(kv, "HTTPS_PROXY=") || strings.HasPrefix(kv, "SSL_CERT_FILE=") {
					t.Errorf("%s stays while the credentials are used", kv)
				}
			}
			if !slices.Contains(secrets, "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB") {
				t.Errorf("the key's body is not given to the redactor: %q", secrets)
			}
			keyFile := filepath.Join(work, credentialsDir, "id")
			if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o400 {
				t.Fatalf("key file: %v %v, want mode 0400", fi, err)
			}
			// The last value is the one git sees.
			last := ""
			for _, kv := range r.env {
				if v, ok := strings.CutPrefix(kv, "GIT_SSH_COMMAND="); ok {
					last = v
				}
			}
			for _, want := range []string{"-F /dev/null", "-i '" + keyFile + "'", "StrictHostKeyChecking=yes", "UserKnownHostsFile='" + filepath.Join(work, credentialsDir, "known_hosts") + "'", "IdentitiesOnly=yes"} {
				if !strings.Contains(last, want) {
					t.Errorf("GIT_SSH_COMMAND %q lacks %q", last, want)
				}
			}
			held, err := r.dropCredentials()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(held, "HTTPS_PROXY=http://tenant:3128") || !slices.Contains(r.env, "HTTPS_PROXY=http://tenant:3128") {
				t.Errorf("the proxy is not given back once the credentials are dropped: held %q, env %q", held, r.env)
			}
			if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
				t.Errorf("the key file is still there: %v", err)
			}
			if slices.ContainsFunc(r.env, func(kv string) bool { return strings.HasPrefix(kv, "GIT_SSH") }) {
				t.Errorf("env after the drop: %q", r.env)
			}
		})
	}
}
