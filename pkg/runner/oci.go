package runner

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The OCI distribution API, as far as a module package needs it. The
// runner fetches packages itself rather than leave it to terraform: the
// manifest and the archive are checked against their digests, the archive
// is unpacked with no path outside the module, and it works under
// Terraform, which has no OCI module sources.
const (
	ociModuleArtifactType = "application/vnd.opentofu.modulepkg"
	ociManifestType       = "application/vnd.oci.image.manifest.v1+json"
	ociZipLayer           = "archive/zip"
	// Bounds of what a registry's answers are read of.
	maxOCIManifest = 4 << 20
	maxOCIPackage  = 64 << 20
	maxOCIFiles    = 10000
)

var (
	ociDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	ociTag    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
)

// caBundle is the runner image's certificate authorities.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// fetchClient is the HTTP client of fetches with a catalog entry's
// credentials: direct, not through a proxy of the environment's, trusting
// the image's certificate authorities alone (not SSL_CERT_FILE's), never
// following a redirect from https to http. The environment is the
// tenant's to write.
func fetchClient() *http.Client {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if pem, err := os.ReadFile(caBundle); err == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tlsConfig.RootCAs = pool
	} else {
		tlsConfig.RootCAs = x509.NewCertPool() // trusts nothing: says so at the first https request
	}
	transport := &http.Transport{Proxy: nil, TLSClientConfig: tlsConfig, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: 30 * time.Second, ResponseHeaderTimeout: time.Minute}
	return &http.Client{Transport: transport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("more than 10 redirects")
		}
		if req.URL.Scheme != "https" && !loopback(req.URL.Host) {
			return fmt.Errorf("a redirect to %s://%s: only https", req.URL.Scheme, req.URL.Host)
		}
		return nil
	}}
}

// ociSource is the source address of a package pinned by its manifest's
// digest, as OpenTofu writes it.
func ociSource(repository, digest string) string {
	return "oci://" + repository + "?digest=" + digest
}

// parseOCISource is the repository and digest of an ociSource address.
func parseOCISource(source string) (repository, digest string, err error) {
	rest, ok := strings.CutPrefix(source, "oci://")
	repository, query, _ := strings.Cut(rest, "?")
	q, qerr := url.ParseQuery(query)
	digest = q.Get("digest")
	if !ok || qerr != nil || !ociDigest.MatchString(digest) || !strings.Contains(repository, "/") {
		return "", "", fmt.Errorf("module source %q is not oci://HOST/REPOSITORY?digest=sha256:...", source)
	}
	return repository, digest, nil
}

// ociCredential is what the runner authenticates to one registry host
// with: a user and password (a .dockerconfigjson's), or a bearer token.
type ociCredential struct {
	user, password, token string
}

// ociClient speaks to OCI registries.
type ociClient struct {
	http *http.Client
	// creds are by registry host; "" is for any host (a token key).
	creds map[string]ociCredential
	// bearer are the tokens registries gave, by host.
	bearer map[string]string
}

// newOCIClient is a client with the entry's credentials: creds by host,
// token for any host.
func newOCIClient(creds map[string]ociCredential, token string) *ociClient {
	c := &ociClient{http: fetchClient(), creds: map[string]ociCredential{}, bearer: map[string]string{}}
	for h, cred := range creds {
		c.creds[h] = cred
	}
	if token != "" {
		c.creds[""] = ociCredential{token: token}
	}
	return c
}

// resolve is the digest of the manifest ref (a tag or a digest) names
// in repository (HOST/PATH).
func (c *ociClient) resolve(ctx context.Context, repository, ref string) (string, error) {
	if !ociTag.MatchString(ref) && !ociDigest.MatchString(ref) {
		return "", fmt.Errorf("oci://%s: %q is neither a tag nor a sha256 digest", repository, ref)
	}
	_, digest, err := c.manifest(ctx, repository, ref)
	return digest, err
}

// manifest reads the manifest ref names, checks that it is a module
// package, and returns its archive layer and the manifest's digest.
func (c *ociClient) manifest(ctx context.Context, repository, ref string) (layer ociDescriptor, digest string, err error) {
	host, repo, _ := strings.Cut(repository, "/")
	body, err := c.get(ctx, host, repo, "manifests/"+ref, ociManifestType, maxOCIManifest)
	if err != nil {
		return layer, "", err
	}
	sum := sha256.Sum256(body)
	digest = "sha256:" + hex.EncodeToString(sum[:])
	if ociDigest.MatchString(ref) && ref != digest {
		return layer, "", fmt.Errorf("oci://%s: the manifest of %s has digest %s", repository, ref, digest)
	}
	var m struct {
		MediaType    string          `json:"mediaType"`
		ArtifactType string          `json:"artifactType"`
		Config       ociDescriptor   `json:"config"`
		Layers       []ociDescriptor `json:"layers"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return layer, "", fmt.Errorf("oci://%s:%s: the manifest is not JSON: %w", repository, ref, err)
	}
	if m.ArtifactType != ociModuleArtifactType && m.Config.MediaType != ociModuleArtifactType {
		return layer, "", fmt.Errorf("oci://%s:%s is not a module package (artifact type %q, want %s)", repository, ref, m.ArtifactType, ociModuleArtifactType)
	}
	var zips []ociDescriptor
	for _, l := range m.Layers {
		if l.MediaType == ociZipLayer {
			zips = append(zips, l)
		}
	}
	if len(zips) != 1 {
		return layer, "", fmt.Errorf("oci://%s:%s has %d %s layers, want one", repository, ref, len(zips), ociZipLayer)
	}
	return zips[0], digest, nil
}

type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// fetch unpacks the package of source (an ociSource address) into dir.
func (c *ociClient) fetch(ctx context.Context, source, dir string) error {
	repository, digest, err := parseOCISource(source)
	if err != nil {
		return err
	}
	layer, _, err := c.manifest(ctx, repository, digest)
	if err != nil {
		return err
	}
	if !ociDigest.MatchString(layer.Digest) || layer.Size <= 0 || layer.Size > maxOCIPackage {
		return fmt.Errorf("oci://%s: the package layer (%s, %d bytes) is not a sha256 digest of at most %d bytes", repository, layer.Digest, layer.Size, maxOCIPackage)
	}
	host, repo, _ := strings.Cut(repository, "/")
	body, err := c.get(ctx, host, repo, "blobs/"+layer.Digest, "", layer.Size)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != layer.Digest || int64(len(body)) != layer.Size {
		return fmt.Errorf("oci://%s: the package's content has digest %s (%d bytes), its manifest says %s (%d bytes)", repository, got, len(body), layer.Digest, layer.Size)
	}
	return unzipModule(body, dir)
}

// get reads /v2/REPO/WHAT of host, authenticating as the registry asks
// (a bearer token from its realm, or basic auth), at most limit bytes.
func (c *ociClient) get(ctx context.Context, host, repo, what, accept string, limit int64) ([]byte, error) {
	scheme := "https"
	if loopback(host) {
		scheme = "http"
	}
	target := scheme + "://" + host + "/v2/" + repo + "/" + what
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		cred := c.credential(host)
		switch {
		case c.bearer[host] != "":
			req.Header.Set("Authorization", "Bearer "+c.bearer[host])
		case attempt > 0 && cred.user != "":
			req.SetBasicAuth(cred.user, cred.password)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", target, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", target, err)
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			if err := c.authenticate(ctx, host, resp.Header.Get("WWW-Authenticate")); err != nil {
				return nil, fmt.Errorf("GET %s: %w", target, err)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", target, resp.Status)
		}
		if int64(len(body)) > limit {
			return nil, fmt.Errorf("GET %s: more than %d bytes", target, limit)
		}
		return body, nil
	}
}

func (c *ociClient) credential(host string) ociCredential {
	if cred, ok := c.creds[host]; ok {
		return cred
	}
	return c.creds[""]
}

// authenticate answers a registry's challenge: a bearer token of the
// entry's is sent as it is; otherwise the realm gives one, for the
// entry's user and password or anonymously.
func (c *ociClient) authenticate(ctx context.Context, host, challenge string) error {
	cred := c.credential(host)
	scheme, params := parseChallenge(challenge)
	switch {
	case cred.token != "":
		c.bearer[host] = cred.token
		return nil
	case strings.EqualFold(scheme, "basic"):
		if cred.user == "" {
			return errors.New("the registry wants a user and password, and the catalog entry's credentials have none for " + host)
		}
		return nil // the next attempt sends them
	case !strings.EqualFold(scheme, "bearer") || params["realm"] == "":
		return fmt.Errorf("the registry's challenge %q is neither basic nor bearer with a realm", challenge)
	}
	realm, err := url.Parse(params["realm"])
	if err != nil || (realm.Scheme != "https" && !(realm.Scheme == "http" && loopback(realm.Host) && loopback(host))) {
		return fmt.Errorf("the registry's token realm %q is not an https URL", params["realm"])
	}
	q := realm.Query()
	for _, k := range []string{"service", "scope"} {
		if params[k] != "" {
			q.Set(k, params[k])
		}
	}
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return err
	}
	// The registry names its realm, as Docker's protocol has it: the
	// user and password for this registry go there, over https.
	if cred.user != "" {
		req.SetBasicAuth(cred.user, cred.password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("asking %s for a token: %w", realm.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("asking %s for a token: %s", realm.Host, resp.Status)
	}
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxRegistryBody)).Decode(&tok); err != nil {
		return fmt.Errorf("asking %s for a token: %w", realm.Host, err)
	}
	c.bearer[host] = tok.Token
	if c.bearer[host] == "" {
		c.bearer[host] = tok.AccessToken
	}
	if c.bearer[host] == "" {
		return fmt.Errorf("%s gave no token", realm.Host)
	}
	return nil
}

// parseChallenge splits a WWW-Authenticate value: its scheme and its
// key="value" parameters.
func parseChallenge(s string) (string, map[string]string) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	params := map[string]string{}
	for rest != "" {
		var kv string
		kv, rest = nextParam(rest)
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			params[strings.ToLower(strings.TrimSpace(k))] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return scheme, params
}

// nextParam is the first comma-separated parameter of s (commas inside
// quotes kept) and the rest.
func nextParam(s string) (string, string) {
	quoted := false
	for i, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

// unzipModule writes the regular files and directories of a zip archive
// into dir: no link, no path outside dir, at most maxOCIFiles files.
func unzipModule(archive []byte, dir string) error {
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		return fmt.Errorf("the module package is not a zip archive: %w", err)
	}
	if len(zr.File) > maxOCIFiles {
		return fmt.Errorf("the module package has %d files, more than %d", len(zr.File), maxOCIFiles)
	}
	var written int64
	for _, f := range zr.File {
		name := path.Clean(strings.TrimPrefix(f.Name, "./"))
		if path.IsAbs(f.Name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(f.Name, `\`) {
			return fmt.Errorf("the module package's file %q is outside the module", f.Name)
		}
		// What init and the runner write is theirs: out of the digest's
		// sight, a package's copy would run unlisted.
		if name == ".terraform" || strings.HasPrefix(name, ".terraform/") || isRunnerFile(name) {
			return fmt.Errorf("the module package's file %q is where terraform init or the runner writes", f.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			continue
		case !mode.IsRegular():
			return fmt.Errorf("the module package's %q is not a regular file (%s)", f.Name, mode.Type())
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("the module package's %q: %w", f.Name, err)
		}
		perm := os.FileMode(0o644)
		if mode&0o111 != 0 {
			perm = 0o755
		}
		out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			rc.Close()
			return fmt.Errorf("the module package's %q: %w", f.Name, err)
		}
		n, err := io.Copy(out, io.LimitReader(rc, maxOCIPackage-written+1))
		rc.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("the module package's %q: %w", f.Name, err)
		}
		if written += n; written > maxOCIPackage {
			return fmt.Errorf("the module package unpacks to more than %d bytes", maxOCIPackage)
		}
	}
	return nil
}

// dockerConfigCredentials are the per-host users and passwords of a
// .dockerconfigjson (a kubernetes.io/dockerconfigjson Secret's key).
func dockerConfigCredentials(b []byte) (map[string]ociCredential, error) {
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("the catalog module's .dockerconfigjson is not a Docker config: %w", err)
	}
	out := map[string]ociCredential{}
	for server, a := range cfg.Auths {
		host := server
		if u, err := url.Parse(server); err == nil && u.Host != "" {
			host = u.Host
		}
		cred := ociCredential{user: a.Username, password: a.Password}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("the catalog module's .dockerconfigjson: the auth of %s is not base64", host)
			}
			cred.user, cred.password, _ = strings.Cut(string(raw), ":")
		}
		out[host] = cred
	}
	return out, nil
}
