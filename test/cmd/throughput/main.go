// Command throughput measures CAPTF end to end against the machine's limit:
// it brings up the quickstart (the local cloud, Cluster API's controllers,
// the executor running runner pods as processes with real terraform, the
// manager), scales a MachineDeployment of the module -module names by N and
// times N TerraformMachines from the scale to all their Machines holding
// provider IDs; then it runs the same module N times back to back with bare
// terraform (init, apply, output, a user's three commands) and prints the
// ratio, and the runner's own time per Job alone (its pod's run less its
// terraform commands', which its last log line gives).
//
//	go run ./test/cmd/throughput -n 200                         # the quickstart's workers, on the local cloud
//	go run ./test/cmd/throughput -n 200 -module terraform_data  # examples/local-machine: files, no provider
package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/captf/captf/test/framework"
)

func main() {
	n := flag.Int("n", 200, "machines")
	profile := flag.Duration("apiserver-profile", 0, "take a CPU profile of kube-apiserver for this long from the scale on (kept in bin/bench/)")
	byClient := flag.Bool("by-client", false, "count the API server's requests during the scale by client, from an audit log (which costs the API server CPU: the ratio is then not the one to quote)")
	module := flag.String("module", moduleLocalCloud, "the machines' module: "+moduleLocalCloud+" (the quickstart's, examples/localcloud-machine) or "+moduleTerraformData+" (examples/local-machine)")
	flag.Parse()
	if *module != moduleLocalCloud && *module != moduleTerraformData {
		fmt.Fprintf(os.Stderr, "throughput: -module %q: want %s or %s\n", *module, moduleLocalCloud, moduleTerraformData)
		os.Exit(2)
	}
	if err := run(*n, *profile, *byClient, *module); err != nil {
		fmt.Fprintln(os.Stderr, "throughput:", err)
		os.Exit(1)
	}
}

// everyRequest logs every request's metadata, reads and watches too.
const everyRequest = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

// The modules -module chooses from.
const (
	moduleLocalCloud    = "localcloud"
	moduleTerraformData = "terraform_data"
)

func run(n int, profile time.Duration, byClient bool, module string) error {
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	binary, err := framework.BuildCAPTF("captf")
	if err != nil {
		return err
	}
	var apiArgs []string
	if profile > 0 {
		apiArgs = []string{"--profiling=true"}
	}
	var auditLog string
	if byClient {
		dir := filepath.Join(filepath.Dir(binary), "bench")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var args []string
		if args, auditLog, err = framework.AuditArgs(dir, everyRequest); err != nil {
			return err
		}
		_ = os.Remove(auditLog)
		apiArgs = append(apiArgs, args...)
	}
	local, err := framework.StartLocal(ctx, root, binary, framework.Options{ExtraAPIServerArgs: apiArgs})
	if err != nil {
		return err
	}
	defer local.Stop()
	cp, ex, mgr := local.ControlPlane, local.Executor, local.Manager
	if err := cp.ApplyQuickstart(ctx, root, local.Cloud.URL); err != nil {
		return err
	}
	if _, err := cp.WaitQuickstartReady(ctx); err != nil {
		return err
	}
	if _, err := cp.WaitQuickstartMachines(ctx, framework.QuickstartMachines); err != nil {
		return err
	}
	// Cluster API's share first, on the same plane: no Job runs.
	nullTook, nullCPU, err := nullScale(ctx, cp, n)
	if err != nil {
		return fmt.Errorf("null provider: %w", err)
	}
	// The quickstart's workers, or a pool of their own.
	pool, replicas := "demo-workers", 2
	instances := filepath.Join(cp.Dir, "instances")
	if module == moduleTerraformData {
		if err := filesPool(ctx, cp, root, instances); err != nil {
			return err
		}
		pool, replicas = filesPoolName, 0
	}
	before := len(ex.Runs())

	token, err := cp.MetricsReaderToken(ctx, "captf-system")
	if err != nil {
		return err
	}
	cpu0, req0, adds0 := cpuByCommand(), apiRequests(ctx, cp), queueAdds(mgr, token)
	start := time.Now()
	if err := scale(ctx, cp, pool, n+replicas); err != nil {
		return err
	}
	profiled := make(chan string, 1)
	if profile > 0 {
		go func() { profiled <- apiServerProfile(ctx, cp, binary, profile) }()
	}
	if _, err := cp.WaitQuickstartMachines(ctx, n+framework.QuickstartMachines); err != nil {
		return err
	}
	captf := time.Since(start)
	cpu, req1, adds1 := cpuSince(cpu0), apiRequests(ctx, cp), queueAdds(mgr, token)
	pods := appliesSince(ex, before)
	podCPU := runnerCPU(ex, before)

	// One machine at a time: a runner pod alone on the machine, so that its
	// time less a bare run's is the runner's own, not a share of 2 cores.
	var alone []time.Duration
	aloneRuns := len(ex.Runs())
	for k := 1; k <= 5; k++ {
		seen := len(ex.Runs())
		if err := scale(ctx, cp, pool, n+replicas+k); err != nil {
			return err
		}
		if _, err := cp.WaitQuickstartMachines(ctx, n+framework.QuickstartMachines+k); err != nil {
			return err
		}
		alone = append(alone, appliesSince(ex, seen)...)
	}

	bare, bareTotal, err := bareRuns(cp, root, module, local.Cloud, n, instances)
	if err != nil {
		return err
	}

	slices.Sort(pods)
	slices.Sort(bare)
	fmt.Printf("module: %s\n", module)
	fmt.Printf("CAPTF: %d machines from the scale to every Machine with its provider ID: %s (%.3f s per machine)\n", n, captf.Round(time.Millisecond), captf.Seconds()/float64(n))
	fmt.Printf("bare terraform: %d init+apply+output runs back to back: %s (%.3f s per run; median %s)\n", n, bareTotal.Round(time.Millisecond), bareTotal.Seconds()/float64(n), median(bare))
	fmt.Printf("ratio: %.2f×\n", captf.Seconds()/bareTotal.Seconds())
	fmt.Printf("null provider (Cluster API and the API server alone, machines provisioned at once): T0 %s; CAPTF T1 %s; bare runs T2 %s; CAPTF's own (T1 - T0) / T2 = %.2f\n",
		nullTook.Round(time.Millisecond), captf.Round(time.Millisecond), bareTotal.Round(time.Millisecond), (captf-nullTook).Seconds()/bareTotal.Seconds())
	if len(pods) > 0 {
		fmt.Printf("runner pods (%d apply Jobs): median %s, p90 %s; the runner's own time per Job: %s (median pod less median bare run)\n",
			len(pods), median(pods), pods[len(pods)*9/10], (median(pods) - median(bare)).Round(time.Millisecond))
	}
	if len(alone) > 0 {
		slices.Sort(alone)
		fmt.Printf("a runner pod alone (%d one-machine scales): median %s; less the median bare run: %s\n",
			len(alone), median(alone), (median(alone) - median(bare)).Round(time.Millisecond))
	}
	if own, inits := ownTimes(ex, aloneRuns); len(own) > 0 {
		slices.Sort(own)
		slices.Sort(inits)
		fmt.Printf("the runner's own time per Job alone (its pod's run less its terraform commands'): median %s (%s–%s); terraform init in those pods: median %s (%s–%s)\n",
			median(own), own[0], own[len(own)-1], median(inits), inits[0], inits[len(inits)-1])
	}
	fmt.Print(cpuTable(nullTook, nullCPU, captf, cpu, n))
	if len(podCPU.own) > 0 {
		fmt.Printf("a runner pod's CPU (%d apply Jobs of the scale): median %s the runner's own, %s its terraform commands'\n",
			len(podCPU.own), median(podCPU.own), median(podCPU.terraform))
	}
	type count struct {
		key string
		n   float64
	}
	var reqs []count
	total := 0.0
	for k, v := range req1 {
		if d := v - req0[k]; d > 0 {
			reqs = append(reqs, count{k, d})
			total += d
		}
	}
	slices.SortFunc(reqs, func(a, b count) int { return int(b.n - a.n) })
	fmt.Printf("API server requests during the scale: %.0f (%.1f per machine); the most:\n", total, total/float64(n))
	for _, r := range reqs[:min(15, len(reqs))] {
		fmt.Printf("  %-60s %6.0f\n", r.key, r.n)
	}
	if byClient {
		events, err := framework.ReadAudit(auditLog)
		if err != nil {
			return err
		}
		fmt.Print(requestsByClient(events, start, start.Add(captf), n))
		fmt.Print(managerRequests(events, start, start.Add(captf), n))
	}
	if profile > 0 {
		fmt.Print(<-profiled)
	}
	fmt.Printf("manager syncs queued during the scale: ")
	for _, k := range slices.Sorted(maps.Keys(adds1)) {
		if d := adds1[k] - adds0[k]; d > 0 {
			fmt.Printf("%s %.0f (%.1f per machine); ", k, d, d/float64(n))
		}
	}
	fmt.Println()
	return nil
}

// appliesSince is how long each TerraformMachine's apply pod that
// succeeded ran, of the executor's runs from the seen-th on.
func appliesSince(ex *framework.Executor, seen int) []time.Duration {
	var out []time.Duration
	for _, r := range ex.Runs()[seen:] {
		if isApply(r) {
			out = append(out, r.Finished.Sub(r.Started))
		}
	}
	return out
}

// isApply says whether a run is a TerraformMachine's apply pod that
// succeeded.
func isApply(r framework.PodRun) bool {
	return strings.HasPrefix(r.Name, "tfm-") && strings.Contains(r.Name, "-apply-") && r.ExitCode == 0
}

// ownTimeLog is the runner's last line: its pod's run less the time its
// terraform commands took; initLog the line of its terraform init;
// cpuLog the CPU time of the terraform commands and of the runner's own
// process, from the same last line.
var (
	ownTimeLog = regexp.MustCompile(`"Run ended".* ownTime="([^"]+)"`)
	initLog    = regexp.MustCompile(`"Terraform command ended".* command="init" took="([^"]+)"`)
	cpuLog     = regexp.MustCompile(`"Run ended".* terraformCPU="([^"]+)" ownCPU="([^"]+)"`)
)

// podCPU is the CPU time of apply pods: their runner's own, their
// terraform commands', each sorted.
type podCPU struct{ own, terraform []time.Duration }

// runnerCPU reads the CPU time of each apply pod that succeeded since
// seen from the runner's last log line.
func runnerCPU(ex *framework.Executor, seen int) podCPU {
	var out podCPU
	for name, logs := range applyLogs(ex, seen) {
		m := cpuLog.FindStringSubmatch(logs)
		if m == nil {
			fmt.Fprintf(os.Stderr, "throughput: pod %s logged no CPU time\n", name)
			continue
		}
		tf, err1 := time.ParseDuration(m[1])
		own, err2 := time.ParseDuration(m[2])
		if err1 != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "throughput: pod %s: %v %v\n", name, err1, err2)
			continue
		}
		out.own, out.terraform = append(out.own, own), append(out.terraform, tf)
	}
	slices.Sort(out.own)
	slices.Sort(out.terraform)
	return out
}

// cpuTable is the CPU seconds by process during the null provider's scale
// and CAPTF's, and CAPTF's own: the difference, per machine.
func cpuTable(nullTook time.Duration, nullCPU map[string]float64, took time.Duration, cpu map[string]float64, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CPU seconds by process on %d cores: during the null provider's scale (T0, %.1f s), CAPTF's (T1, %.1f s), and CAPTF's own per machine ((T1 - T0) / %d, ms):\n",
		runtime.NumCPU(), nullTook.Seconds(), took.Seconds(), n)
	var t0, t1 float64
	for _, k := range slices.Sorted(maps.Keys(cpu)) {
		t0, t1 = t0+nullCPU[k], t1+cpu[k]
		if cpu[k] >= 0.5 || nullCPU[k] >= 0.5 {
			fmt.Fprintf(&b, "  %-40s %6.1f %6.1f %6.0f\n", k, nullCPU[k], cpu[k], (cpu[k]-nullCPU[k])*1000/float64(n))
		}
	}
	fmt.Fprintf(&b, "  %-40s %6.1f %6.1f %6.0f\n", "all", t0, t1, (t1-t0)*1000/float64(n))
	return b.String()
}

// ownTimes reads the runner's own time of each apply pod since seen, from
// its log (the pod's run, to the nanosecond, less its terraform commands),
// and how long its terraform init took.
func ownTimes(ex *framework.Executor, seen int) (own, inits []time.Duration) {
	for name, logs := range applyLogs(ex, seen) {
		m, i := ownTimeLog.FindStringSubmatch(logs), initLog.FindStringSubmatch(logs)
		if m == nil || i == nil {
			fmt.Fprintf(os.Stderr, "throughput: pod %s logged no own time or init\n", name)
			continue
		}
		d, err1 := time.ParseDuration(m[1])
		di, err2 := time.ParseDuration(i[1])
		if err1 == nil && err2 == nil {
			own, inits = append(own, d), append(inits, di)
		}
	}
	return own, inits
}

// applyLogs yields the log of each TerraformMachine's apply pod that
// succeeded, of the executor's runs from the seen-th on, by its name.
func applyLogs(ex *framework.Executor, seen int) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, r := range ex.Runs()[seen:] {
			if !isApply(r) {
				continue
			}
			logs, err := ex.Logs(r.Namespace, r.Name)
			if err != nil {
				fmt.Fprintln(os.Stderr, "throughput:", err)
				continue
			}
			if !yield(r.Namespace+"/"+r.Name, logs) {
				return
			}
		}
	}
}

// requestsByClient counts the requests received between from and to by
// client (user, with a ServiceAccount's namespace left out, and the
// program in its user agent), reads apart from writes.
func requestsByClient(events []framework.AuditEvent, from, to time.Time, n int) string {
	type count struct{ reads, writes int }
	by := map[string]*count{}
	total := 0
	for _, ev := range events {
		if at := ev.RequestReceivedTimestamp.Time; at.Before(from) || !at.Before(to) {
			continue
		}
		user := ev.User.Username
		if parts := strings.Split(user, ":"); len(parts) == 4 && parts[1] == "serviceaccount" {
			user = "serviceaccount " + parts[3]
		}
		program, _, _ := strings.Cut(ev.UserAgent, "/")
		key := user + " (" + program + ")"
		if by[key] == nil {
			by[key] = &count{}
		}
		switch ev.Verb {
		case "get", "list", "watch":
			by[key].reads++
		default:
			by[key].writes++
		}
		total++
	}
	keys := slices.SortedFunc(maps.Keys(by), func(a, b string) int {
		return (by[b].reads + by[b].writes) - (by[a].reads + by[a].writes)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "API server requests during the scale by client, from the audit log: %d (%.1f per machine)\n", total, float64(total)/float64(n))
	fmt.Fprintf(&b, "  %-70s %8s %8s %10s\n", "client", "reads", "writes", "per machine")
	for _, k := range keys {
		c := by[k]
		fmt.Fprintf(&b, "  %-70s %8d %8d %10.1f\n", k, c.reads, c.writes, float64(c.reads+c.writes)/float64(n))
	}
	return b.String()
}

// apiServerProfile takes kube-apiserver's CPU profile for d and returns the
// top of it.
func apiServerProfile(ctx context.Context, cp *framework.ControlPlane, binary string, d time.Duration) string {
	body, err := cp.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + time.Minute).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("kube-apiserver CPU profile: %v\n", err)
	}
	file := filepath.Join(filepath.Dir(binary), "bench", "apiserver-cpu.pb.gz")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err.Error()
	}
	if err := os.WriteFile(file, body, 0o644); err != nil {
		return err.Error()
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", file).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v\n%s", err, out)
	}
	return fmt.Sprintf("kube-apiserver CPU profile (%s, %s):\n%s", d, file, out)
}

// queueAdds reads the manager's workqueue_adds_total by queue.
func queueAdds(mgr *framework.Manager, token string) map[string]float64 {
	out := map[string]float64{}
	_, body, err := mgr.Scrape(token)
	if err != nil {
		fmt.Println("scraping the manager:", err)
		return out
	}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, `workqueue_adds_total{name="`) {
			continue
		}
		name := strings.TrimPrefix(line, `workqueue_adds_total{name="`)
		name = name[:strings.Index(name, `"`)]
		v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		out[name] = v
	}
	return out
}

// apiRequests reads the API server's apiserver_request_total, by verb,
// resource and subresource.
func apiRequests(ctx context.Context, cp *framework.ControlPlane) map[string]float64 {
	out := map[string]float64{}
	body, err := cp.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		fmt.Println("reading the API server's metrics:", err)
		return out
	}
	label := func(line, name string) string {
		i := strings.Index(line, name+`="`)
		if i < 0 {
			return ""
		}
		rest := line[i+len(name)+2:]
		return rest[:strings.Index(rest, `"`)]
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			continue
		}
		key := label(line, "verb") + " " + label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			key += "/" + sub
		}
		out[key] += v
	}
	return out
}

// cpuByCommand sums the CPU time of the machine's processes by command
// name; this process's exited children (runner pods, and the terraform
// they ran) are counted apart from the executor in it.
func cpuByCommand() map[string]float64 {
	out := map[string]float64{}
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st := string(b)
		comm := st[strings.Index(st, "(")+1 : strings.LastIndex(st, ")")]
		f := strings.Fields(st[strings.LastIndex(st, ")")+2:])
		ticks := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v / 100 }
		if pid == self {
			out["executor (this process)"] += ticks(11) + ticks(12)
			out["runner pods and their terraform (exited)"] += ticks(13) + ticks(14)
			continue
		}
		out[comm] += ticks(11) + ticks(12)
	}
	return out
}

// cpuSince is the CPU seconds by command used since before was taken.
func cpuSince(before map[string]float64) map[string]float64 {
	out := cpuByCommand()
	for k := range out {
		out[k] -= before[k]
	}
	return out
}

func median(sorted []time.Duration) time.Duration {
	return sorted[len(sorted)/2].Round(time.Millisecond)
}

// managerRequests counts CAPTF's manager's requests (its own and those it
// makes for the runners) by verb, resource and, for Secrets and Leases, what
// the name says they are: what docs/scaling.md names one by one.
func managerRequests(events []framework.AuditEvent, from, to time.Time, n int) string {
	by := map[string]int{}
	for _, ev := range events {
		if at := ev.RequestReceivedTimestamp.Time; at.Before(from) || !at.Before(to) || !strings.HasSuffix(ev.User.Username, ":captf-manager") {
			continue
		}
		what := ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			what += "/" + ev.ObjectRef.Subresource
		}
		if name := ev.ObjectRef.Name; name != "" && (what == "secrets" || what == "leases") {
			what += " " + secretRole(name)
		}
		by[ev.Verb+" "+what]++
	}
	keys := slices.SortedFunc(maps.Keys(by), func(a, b string) int { return by[b] - by[a] })
	var b strings.Builder
	fmt.Fprintf(&b, "the manager's requests by what they are (per machine):\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-60s %6.2f\n", k, float64(by[k])/float64(n))
	}
	return b.String()
}

// secretRole names a CAPTF Secret or Lease by the end of its name
// (pkg/names): state, state chunk, backup, durable inputs, result, lock, or
// a Job's run inputs.
func secretRole(name string) string {
	parts := strings.Split(name, "-")
	last := parts[len(parts)-1]
	switch {
	case last == "state" || last == "inputs" || last == "result" || last == "lock":
		return last
	case slices.Contains(parts, "backup") || slices.Contains(parts, "errored"):
		return "backup"
	case len(parts) > 3 && parts[len(parts)-3] == "state":
		return "state chunk"
	case slices.Contains(parts, "apply") || slices.Contains(parts, "destroy") || slices.Contains(parts, "drift") || slices.Contains(parts, "refresh"):
		return "run inputs"
	}
	return "other"
}
