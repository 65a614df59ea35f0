package framework

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// LocalCloud is a running local cloud API server (test/localcloud, built
// into bin/ by hack/build-localcloud.sh, which make images runs).
type LocalCloud struct {
	// URL is the API's address, for the provider's endpoint.
	URL string
	cmd *exec.Cmd
}

// StartLocalCloud starts bin/localcloud on a free loopback port with args
// (-instances, -rate, -create-latency, ...), keeping its resources in dir.
func StartLocalCloud(dir string, args ...string) (*LocalCloud, error) {
	cmd, url, err := startServer(dir, "localcloud", "localcloud serving on ", "make images (hack/build-localcloud.sh)",
		append([]string{"-listen", "127.0.0.1:0", "-state", filepath.Join(dir, "cloud.json")}, args...)...)
	if err != nil {
		return nil, err
	}
	return &LocalCloud{URL: url, cmd: cmd}, nil
}

// startServer starts bin/NAME with args, logging into dir/NAME.log, and
// returns the address it prints on its first line after prefix. make is
// the target that builds it, for the error when it is missing.
func startServer(dir, name, prefix, make string, args ...string) (*exec.Cmd, string, error) {
	bin, err := BinPath(name)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, "", fmt.Errorf("%w: run %s", err, make)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", fmt.Errorf("%s did not start: %q %v", name, line, err)
	}
	return cmd, url, nil
}

// Stop stops the server.
func (c *LocalCloud) Stop() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// SetLimits sets an account's quotas, rate and create latency (the
// server's Limits, as JSON).
func (c *LocalCloud) SetLimits(account, limits string) error {
	req, err := http.NewRequest(http.MethodPut, c.URL+"/admin/accounts/"+account, strings.NewReader(limits))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("setting the limits of %s: %s", account, resp.Status)
	}
	return nil
}

// CloudResource is a resource as the cloud's API shows it.
type CloudResource struct {
	ID, Name, Status, Zone string
}

// List lists an account's resources of kind (networks, load_balancers,
// instances).
func (c *LocalCloud) List(account, kind string) ([]CloudResource, error) {
	req, err := http.NewRequest(http.MethodGet, c.URL+"/v1/"+kind, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+account)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing %s: %s: %s", kind, resp.Status, buf.String())
	}
	var out []CloudResource
	return out, json.Unmarshal(buf.Bytes(), &out)
}

// CloudKinds are the kinds of resources the local cloud makes.
var CloudKinds = []string{"networks", "load_balancers", "instances"}

// Resources lists all of an account's resources: "kind/name" → ID, to tell
// whether one was made, replaced (a new ID) or destroyed.
func (c *LocalCloud) Resources(account string) (map[string]string, error) {
	out := map[string]string{}
	for _, kind := range CloudKinds {
		list, err := c.List(account, kind)
		if err != nil {
			return nil, err
		}
		for _, r := range list {
			out[kind+"/"+r.Name] = r.ID
		}
	}
	return out, nil
}

// Hosts lists an account's instances as a workload cluster's node agent
// wants them (StartWorkloadOf): Node name (the instance's ID) → provider
// ID, as the provider writes it.
func (c *LocalCloud) Hosts(account string) func() map[string]string {
	var last map[string]string
	return func() map[string]string {
		instances, err := c.List(account, "instances")
		if err != nil {
			return last // a failed list is no instance gone
		}
		last = map[string]string{}
		for _, i := range instances {
			last[i.ID] = "localcloud:///" + i.Zone + "/" + i.ID
		}
		return last
	}
}

// LocalCloudStats are the cloud's counts: creates and deletes by kind,
// quota refusals, throttled requests.
type LocalCloudStats struct {
	Creates, Deletes         map[string]int
	QuotaRefusals, Throttled int
	Requests                 int
}

// Stats reads the cloud's counts.
func (c *LocalCloud) Stats() (*LocalCloudStats, error) {
	resp, err := http.Get(c.URL + "/admin/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var s LocalCloudStats
	return &s, json.NewDecoder(resp.Body).Decode(&s)
}

// LocalCloudLockFile is the .terraform.lock.hcl of modules that use the
// local cloud's provider: what init checks the mirror's package against.
func LocalCloudLockFile() (string, error) {
	p, err := BinPath("localcloud.lock.hcl")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	return string(b), err
}

// ProviderMirrorImage is the reference of the local cloud's provider
// mirror image (hack/build-localcloud.sh) for this checkout.
func ProviderMirrorImage() (string, error) {
	images, err := ImageArchives()
	if err != nil {
		return "", err
	}
	for ref := range images {
		if strings.Contains(ref, "/captf-localcloud-providers:") {
			return ref, nil
		}
	}
	return "", errors.New("no provider mirror image: run make images (hack/build-localcloud.sh)")
}
