package runner

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type zipEntry struct {
	name, content string
	link          bool
}

func zipOf(t *testing.T, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		if e.link {
			h.SetMode(os.ModeSymlink | 0o777)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOCIModules: a module package is found by tag, fetched by digest,
// checked against both digests and unpacked into the module alone; the
// registry's bearer challenge is answered with the entry's Docker config.
func TestOCIModules(t *testing.T) {
	good := zipOf(t, zipEntry{name: "main.tf", content: `output "x" { value = 1 }`}, zipEntry{name: "modules/net/main.tf", content: "# net"})
	for name, tc := range map[string]struct {
		layer        []byte
		artifactType string
		// tamper changes what the registry serves after the manifest is
		// made: "layer" serves other bytes under the layer's digest.
		tamper   string
		auth     bool
		ref      string // the version's ref: v1 unless set
		wantErr  string
		wantFile string
	}{
		"a package":                         {layer: good, wantFile: "modules/net/main.tf"},
		"behind a bearer challenge":         {layer: good, auth: true, wantFile: "main.tf"},
		"a ref that is a path":              {layer: good, ref: "../../other/manifests/v1", wantErr: "neither a tag nor a sha256 digest"},
		"not a module package":              {layer: good, artifactType: "application/vnd.oci.image.config.v1+json", wantErr: "is not a module package"},
		"a layer that is not its digest":    {layer: good, tamper: "layer", wantErr: "its manifest says"},
		"a manifest that is not its digest": {layer: good, tamper: "manifest", wantErr: "has digest"},
		"a path out of the module":          {layer: zipOf(t, zipEntry{name: "../../etc/cron.d/x", content: "x"}), wantErr: "is outside the module"},
		"a file where init writes":          {layer: zipOf(t, zipEntry{name: "main.tf"}, zipEntry{name: ".terraform/providers/registry.opentofu.org/x/y/1.0.0/linux_amd64/terraform-provider-y", content: "ELF"}), wantErr: "where terraform init or the runner writes"},
		"the runner's variables file":       {layer: zipOf(t, zipEntry{name: "terraform.tfvars.json", content: "{}"}), wantErr: "where terraform init or the runner writes"},
		"a link":                            {layer: zipOf(t, zipEntry{name: "creds", content: "/var/run/secrets", link: true}), wantErr: "is not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			artifact := tc.artifactType
			if artifact == "" {
				artifact = ociModuleArtifactType
			}
			manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ociManifestType, "artifactType": artifact,
				"config": map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha([]byte("{}")), "size": 2},
				"layers": []any{map[string]any{"mediaType": ociZipLayer, "digest": sha(tc.layer), "size": len(tc.layer)}}})
			blobs := map[string][]byte{sha(manifest): manifest, sha(tc.layer): tc.layer}
			switch tc.tamper {
			case "layer": // other bytes, of the same size
				evil := bytes.Clone(tc.layer)
				evil[len(evil)/2] ^= 0xff
				blobs[sha(tc.layer)] = evil
			case "manifest": // the tag's manifest is good, the digest's another
				blobs[sha(manifest)] = bytes.Replace(manifest, []byte(sha(tc.layer)), []byte(sha([]byte("{}"))), 1)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/token" {
					if u, p, _ := r.BasicAuth(); u != "robot" || p != "pw" || r.URL.Query().Get("scope") != "repository:mods/vpc:pull" {
						http.Error(w, "no", http.StatusUnauthorized)
						return
					}
					_, _ = w.Write([]byte(`{"token":"t0k"}`))
					return
				}
				if tc.auth && r.Header.Get("Authorization") != "Bearer t0k" {
					w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="reg",scope="repository:mods/vpc:pull"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				ref := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
				if ref == "v1" {
					_, _ = w.Write(manifest)
					return
				}
				if b, ok := blobs[ref]; ok {
					_, _ = w.Write(b)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			creds, err := dockerConfigCredentials([]byte(`{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("robot:pw")) + `"}}}`))
			if err != nil {
				t.Fatal(err)
			}
			c := newOCIClient(creds, "")
			ref := "v1"
			if tc.ref != "" {
				ref = tc.ref
			}
			digest, err := c.resolve(context.Background(), host+"/mods/vpc", ref)
			if err == nil {
				if digest != sha(manifest) {
					t.Fatalf("v1 resolved to %s, want the manifest's digest %s", digest, sha(manifest))
				}
			}
			dir := t.TempDir()
			if err == nil { // a run: a client of its own
				err = newOCIClient(creds, "").fetch(context.Background(), ociSource(host+"/mods/vpc", digest), dir)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, tc.wantFile)); err != nil {
				t.Errorf("unpacked: %v", err)
			}
		})
	}
}

func TestParseOCISource(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	for source, ok := range map[string]bool{
		"oci://reg.example.com/mods/vpc?digest=" + d: true,
		"oci://reg.example.com/mods/vpc?tag=v1":      false,
		"oci://reg.example.com?digest=" + d:          false,
		"git::https://x/y?ref=" + d:                  false,
	} {
		if _, _, err := parseOCISource(source); (err == nil) != ok {
			t.Errorf("%s: %v, want ok %v", source, err, ok)
		}
	}
}

// TestOCITokenRealm: the user and password go to the realm a registry
// names only over https (or on loopback, for a registry on loopback).
func TestOCITokenRealm(t *testing.T) {
	for _, tc := range []struct{ host, realm, wantErr string }{
		{"reg.example.com", "http://127.0.0.1:1/token", "is not an https URL"},
		{"reg.example.com", "http://auth.example.com/token", "is not an https URL"},
		{"reg.example.com", "ftp://auth.example.com/token", "is not an https URL"},
	} {
		c := newOCIClient(map[string]ociCredential{tc.host: {user: "u", password: "p"}}, "")
		err := c.authenticate(context.Background(), tc.host, `Bearer realm="`+tc.realm+`",service="x"`)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("registry %s, realm %s: %v, want %q", tc.host, tc.realm, err, tc.wantErr)
		}
	}
}
