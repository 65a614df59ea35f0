package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/captf/captf/pkg/run"
)

// maxRegistryBody bounds what a registry's answer is read of.
const maxRegistryBody = 1 << 20

// registrySource asks the module registry of m where the code of m's
// version is (the registry protocol: service discovery, then the version's
// download, answered with X-Terraform-Get), with the entry's token when
// its credentials hold one.
func registrySource(ctx context.Context, client *http.Client, m *run.RegistryModule, token string) (string, error) {
	host, path, ok := strings.Cut(m.Address, "/")
	if !ok || strings.Count(path, "/") != 2 {
		return "", fmt.Errorf("registry address %q is not HOST/NAMESPACE/NAME/SYSTEM", m.Address)
	}
	base := &url.URL{Scheme: "https", Host: host}
	if loopback(host) {
		base.Scheme = "http" // a registry of this very machine: a test's, a developer's
	}
	var disco struct {
		Modules string `json:"modules.v1"`
	}
	if _, err := registryGet(ctx, client, base.JoinPath("/.well-known/terraform.json").String(), token, &disco); err != nil {
		return "", fmt.Errorf("the registry's service discovery: %w", err)
	}
	if disco.Modules == "" {
		return "", fmt.Errorf("%s serves no module registry (no modules.v1 in its service discovery)", host)
	}
	modules, err := base.Parse(disco.Modules)
	if err != nil {
		return "", fmt.Errorf("the registry's modules.v1 %q: %w", disco.Modules, err)
	}
	download := modules.JoinPath(path, m.Version, "download")
	var body struct {
		Location string `json:"location"`
	}
	header, err := registryGet(ctx, client, download.String(), token, &body)
	if err != nil {
		return "", fmt.Errorf("version %s of %s: %w", m.Version, m.Address, err)
	}
	loc := header.Get("X-Terraform-Get")
	if loc == "" {
		loc = body.Location
	}
	if loc == "" {
		return "", fmt.Errorf("version %s of %s: the registry said no location (X-Terraform-Get)", m.Version, m.Address)
	}
	// A location relative to the download URL is a URL on its host.
	if u, err := url.Parse(loc); err == nil && u.Scheme == "" && !strings.Contains(loc, "::") && (strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, ".")) {
		loc = download.ResolveReference(u).String()
	}
	return loc, nil
}

// registryGet GETs url with the token, decodes a JSON answer into out and
// returns the answer's header.
func registryGet(ctx context.Context, client *http.Client, target, token string, out any) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRegistryBody))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("GET %s: %s: the registry refused the entry's token (or none was given)", target, resp.Status)
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("GET %s: %s", target, resp.Status)
	}
	if len(b) > 0 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("GET %s: not JSON: %w", target, err)
		}
	}
	return resp.Header, nil
}

func loopback(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
