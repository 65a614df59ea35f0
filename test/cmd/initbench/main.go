// Command initbench measures what `init` costs a runner Job with the local
// cloud's provider: installed from a filesystem mirror (what runner pods
// get from --provider-mirror-image) against downloaded, as from a
// registry, from a provider network mirror served over HTTPS here. Each
// init runs in a fresh directory with no plugin cache, as every Job does.
//
//	go run ./test/cmd/initbench -runs 5
package main

import (
	"archive/zip"
	"bytes"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/captf/captf/test/framework"
)

const (
	providerPath = "captf.io/captf/localcloud"
	version      = "0.1.0"
	module       = `terraform {
  required_providers {
    localcloud = { source = "captf.io/captf/localcloud", version = "0.1.0" }
  }
}
`
)

func main() {
	runs := flag.Int("runs", 5, "inits of each kind")
	flag.Parse()
	if err := run(*runs); err != nil {
		fmt.Fprintln(os.Stderr, "initbench:", err)
		os.Exit(1)
	}
}

func run(runs int) error {
	mirror, err := framework.BinPath("providers")
	if err != nil {
		return err
	}
	tofu, err := framework.BinPath("tofu")
	if err != nil {
		return err
	}
	binary := filepath.Join(mirror, providerPath, version, "linux_"+runtime.GOARCH, "terraform-provider-localcloud_v"+version)
	provider, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("%w: run make images (hack/build-localcloud.sh)", err)
	}
	pkg, err := zipped("terraform-provider-localcloud_v"+version, provider)
	if err != nil {
		return err
	}
	server := httptest.NewTLSServer(networkMirror(pkg))
	defer server.Close()
	work, err := os.MkdirTemp("", "initbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ca := filepath.Join(work, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}), 0o644); err != nil {
		return err
	}
	configs := map[string]string{
		"filesystem mirror (--provider-mirror-image)": fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", mirror),
		"download over HTTPS (a network mirror)":      fmt.Sprintf("provider_installation {\n  network_mirror {\n    url = %q\n  }\n}\n", server.URL+"/"),
	}
	fmt.Printf("tofu init of a module requiring %s %s (%d MB unpacked), %d runs each, fresh directory and no plugin cache:\n", providerPath, version, len(provider)>>20, runs)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range configs {
			if !yield(k) {
				return
			}
		}
	}) {
		rc := filepath.Join(work, strings.Fields(name)[0]+".tfrc")
		if err := os.WriteFile(rc, []byte(configs[name]), 0o644); err != nil {
			return err
		}
		var took []time.Duration
		for i := range runs {
			dir := filepath.Join(work, fmt.Sprintf("%s-%d", strings.Fields(name)[0], i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(module), 0o644); err != nil {
				return err
			}
			cmd := exec.Command(tofu, "init", "-backend=false", "-input=false", "-no-color")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "SSL_CERT_FILE="+ca, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: tofu init: %v\n%s", name, err, out)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		fmt.Printf("  %-45s median %s (min %s, max %s)\n", name, took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
	return nil
}

// networkMirror serves the provider network mirror protocol for one
// provider package.
func networkMirror(pkg []byte) http.Handler {
	base := "/" + providerPath + "/"
	mux := http.NewServeMux()
	mux.HandleFunc(base+"index.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"versions":{%q:{}}}`, version)
	})
	mux.HandleFunc(base+version+".json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"archives":{"linux_%s":{"url":"localcloud.zip"}}}`, runtime.GOARCH)
	})
	mux.HandleFunc(base+"localcloud.zip", func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "localcloud.zip", time.Time{}, bytes.NewReader(pkg))
	})
	return mux
}

func zipped(name string, content []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	h := &zip.FileHeader{Name: name, Method: zip.Deflate}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(content); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
