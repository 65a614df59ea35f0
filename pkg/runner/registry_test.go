package runner

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
