package framework

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// OCIRegistry is an OCI distribution registry on loopback, for pulls: it
// holds module packages as OpenTofu publishes them (an image manifest of
// artifact type application/vnd.opentofu.modulepkg with one archive/zip
// layer). With a user set it authenticates as Docker Hub and most
// registries do: a 401 with a Bearer challenge, whose realm hands out a
// token for the user's basic auth.
type OCIRegistry struct {
	Host           string // 127.0.0.1:port
	User, Password string
	mu             sync.Mutex
	blobs          map[string][]byte            // by digest
	tags           map[string]map[string]string // repository → tag → manifest digest
	tokens         map[string]bool
	// Pulls counts the manifest and blob requests served.
	Pulls int
	srv   *http.Server
}

// StartOCIRegistry starts a registry; user "" needs no authentication.
func StartOCIRegistry(user, password string) (*OCIRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &OCIRegistry{Host: ln.Addr().String(), User: user, Password: password,
		blobs: map[string][]byte{}, tags: map[string]map[string]string{}, tokens: map[string]bool{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(ln) //nolint:errcheck // closed by Close
	return r, nil
}

// Close stops the registry.
func (r *OCIRegistry) Close() { _ = r.srv.Close() }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Push stores files as a module package in repository under tag and
// returns the manifest's digest.
func (r *OCIRegistry) Push(repository, tag string, files map[string]string) (string, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w, err := zw.Create(name)
		if err != nil {
			return "", err
		}
		if _, err := w.Write([]byte(files[name])); err != nil {
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return r.PushLayer(repository, tag, "application/vnd.opentofu.modulepkg", buf.Bytes())
}

// PushLayer stores a manifest of artifactType with one archive/zip layer
// of content, under tag, and returns the manifest's digest.
func (r *OCIRegistry) PushLayer(repository, tag, artifactType string, content []byte) (string, error) {
	empty := []byte("{}")
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"artifactType":  artifactType,
		"config":        map[string]any{"mediaType": "application/vnd.oci.empty.v1+json", "digest": digestOf(empty), "size": len(empty)},
		"layers":        []any{map[string]any{"mediaType": "archive/zip", "digest": digestOf(content), "size": len(content)}},
	})
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.blobs[digestOf(empty)] = empty
	r.blobs[digestOf(content)] = content
	d := digestOf(manifest)
	r.blobs[d] = manifest
	if r.tags[repository] == nil {
		r.tags[repository] = map[string]string{}
	}
	r.tags[repository][tag] = d
	return d, nil
}

func (r *OCIRegistry) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/token" {
		u, p, ok := req.BasicAuth()
		if !ok || u != r.User || p != r.Password {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		tok := hex.EncodeToString(b)
		r.mu.Lock()
		r.tokens[tok] = true
		r.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"token": tok})
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/v2/")
	if !ok {
		http.NotFound(w, req)
		return
	}
	if r.User != "" {
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		r.mu.Lock()
		valid := r.tokens[tok]
		r.mu.Unlock()
		if !valid {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="%s",scope="repository:%s:pull"`, r.Host, r.Host, rest))
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
	}
	var repo, kind, ref string
	for _, k := range []string{"/manifests/", "/blobs/"} {
		if i := strings.LastIndex(rest, k); i > 0 {
			repo, kind, ref = rest[:i], strings.Trim(k, "/"), rest[i+len(k):]
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if kind == "manifests" && !strings.HasPrefix(ref, "sha256:") {
		ref = r.tags[repo][ref]
	}
	b, found := r.blobs[ref]
	if kind == "" || !found {
		http.Error(w, `{"errors":[{"code":"NOT_FOUND"}]}`, http.StatusNotFound)
		return
	}
	r.Pulls++
	if kind == "manifests" {
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
	}
	w.Header().Set("Docker-Content-Digest", ref)
	_, _ = w.Write(b)
}
