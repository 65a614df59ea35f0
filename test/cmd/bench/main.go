// Command bench measures the manager at scale: it creates N TerraformClusters
// with their owner Clusters (no executor: Jobs never run) and prints the
// manager's RSS and CPU, create→Job latency, the API writes the manager
// made per object until its Job existed, and its writes per minute once
// idle. API writes are counted from the API server's audit log.
//
// With -drift, a fake runner then completes every Job (no terraform), and
// the bench measures how evenly drift checks come at that interval.
//
//	go run ./test/cmd/bench -n 1000
//	go run ./test/cmd/bench -n 10000 -drift 4m
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
  - group: "batch"
  - group: "rbac.authorization.k8s.io"
  - group: "coordination.k8s.io"
  - group: "infrastructure.cluster.x-k8s.io"
  - group: "cluster.x-k8s.io"
- level: None
`

func main() {
	n := flag.Int("n", 1000, "TerraformClusters to create")
	idle := flag.Duration("idle", time.Minute, "how long to count idle writes")
	managerArgs := flag.String("manager-args", "", "extra manager flags, space separated")
	managerEnv := flag.String("manager-env", "", "extra manager environment (GOGC=25), space separated")
	drift := flag.Duration("drift", 0, "then make every object Ready (a fake runner completes the Jobs) and measure drift checks at this --drift-default-interval")
	driftFor := flag.Duration("drift-for", 0, "how long to measure drift checks (default twice -drift)")
	flag.Parse()
	args := strings.Fields(*managerArgs)
	if *drift > 0 {
		args = append(args, "--drift-default-interval="+drift.String())
		if *driftFor == 0 {
			*driftFor = 2 * *drift
		}
		if *driftFor < *drift {
			fmt.Fprintln(os.Stderr, "bench: -drift-for must be at least -drift: every object is due once in the window")
			os.Exit(2)
		}
	}
	if err := bench(*n, *idle, args, strings.Fields(*managerEnv), *drift, *driftFor); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func bench(n int, idle time.Duration, managerArgs, managerEnv []string, drift, driftFor time.Duration) error {
	ctx := context.Background()
	binary, err := framework.BuildCAPTF("captf")
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "captf-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	auditArgs, auditLog, err := framework.AuditArgs(dir, auditPolicy)
	if err != nil {
		return err
	}
	var kcmArgs []string
	if drift > 0 {
		// The Job controller completes every Job of -drift: at its default
		// 20 requests a second it, not the manager, would be measured.
		kcmArgs = []string{"--kube-api-qps=500", "--kube-api-burst=1000", "--concurrent-job-syncs=20"}
	}
	cp, err := framework.Start(ctx, framework.Options{Dir: filepath.Join(dir, "plane"), ExtraAPIServerArgs: auditArgs,
		ExtraControllerManagerArgs: kcmArgs})
	if err != nil {
		return err
	}
	defer cp.Stop()
	if err := cp.InstallRBAC(ctx, "captf-system"); err != nil {
		return err
	}
	ns := "bench"
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, namespace(ns), metav1.CreateOptions{}); err != nil {
		return err
	}
	mgr, err := cp.StartManager(ctx, framework.ManagerOptions{Binary: binary, Namespace: "captf-system", Dir: dir, Args: managerArgs, Env: managerEnv})
	if err != nil {
		return err
	}
	defer mgr.Stop()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return mgr.Ready(), nil }); err != nil {
		return fmt.Errorf("manager not ready")
	}
	rss0, cpu0 := procStats(mgr.Pid())
	fmt.Printf("objects: %d; manager at start: RSS %.1f MiB\n", n, float64(rss0)/(1<<20))
	fmt.Print(memoryBreakdown(ctx, cp, mgr))

	clusters := schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}
	start := time.Now()
	for i := range n {
		name := fmt.Sprintf("c%04d", i)
		cl := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "TerraformCluster", "name": name}},
		}}
		created, err := cp.Dynamic.Resource(clusters).Namespace(ns).Create(ctx, cl, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		tc := &infrav1.TerraformCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"cluster.x-k8s.io/cluster-name": name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: name, UID: created.GetUID()}}},
			Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: infrav1.Module{Source: "git::https://example.com/m.git?ref=v1"}}},
		}
		if _, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	created := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		jobs, err := cp.Kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelManagedBy + "=" + names.ManagedByValue})
		return err == nil && len(jobs.Items) >= n, nil
	})
	if err != nil {
		return fmt.Errorf("not every object got its Job")
	}
	allJobs := time.Since(start)
	rss1, cpu1 := procStats(mgr.Pid())
	// Symbolizing a profile maps most of the binary into the manager's RSS
	// (its file pages): a run that measures drift takes its one profile
	// at the end.
	heap := profile{file: "none", top: "  (taken at the end of the drift window only)\n"}
	if drift == 0 {
		if heap, err = heapProfile(ctx, cp, mgr, binary, strconv.Itoa(n)); err != nil {
			return err
		}
	}
	settled := time.Now()
	time.Sleep(idle)
	rss2, cpu2 := procStats(mgr.Pid())

	user := "system:serviceaccount:captf-system:captf-manager"
	events, err := framework.ReadAudit(auditLog)
	if err != nil {
		return err
	}
	tcCreated := map[string]time.Time{}
	jobCreated := map[string]time.Time{}
	var busyWrites, idleWrites int
	byResource := map[string]int{}
	idleBy := map[string]int{}
	for _, ev := range events {
		at := ev.RequestReceivedTimestamp.Time
		switch {
		case ev.User.Username != user && ev.Verb == "create" && ev.ObjectRef.Resource == "terraformclusters":
			tcCreated[ev.ObjectRef.Name] = at
		case ev.User.Username == user && at.Before(settled):
			busyWrites++
			key := ev.Verb + " " + ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				key += "/" + ev.ObjectRef.Subresource
			}
			byResource[key]++
			if ev.Verb == "create" && ev.ObjectRef.Resource == "jobs" {
				obj := strings.TrimPrefix(ev.ObjectRef.Name, "tfc-")
				jobCreated[obj[:strings.Index(obj, "-apply-")]] = at
			}
		case ev.User.Username == user:
			idleWrites++
			idleBy[ev.Verb+" "+ev.ObjectRef.Resource+"/"+ev.ObjectRef.Subresource+" "+strconv.Itoa(ev.ResponseStatus.Code)]++
		}
	}
	var lat []time.Duration
	for name, t0 := range tcCreated {
		if t1, ok := jobCreated[name]; ok {
			lat = append(lat, t1.Sub(t0))
		}
	}
	slices.Sort(lat)
	fmt.Printf("created %d Clusters + TerraformClusters in %s; every Job existed after %s\n", n, created.Round(time.Millisecond), allJobs.Round(time.Millisecond))
	fmt.Printf("manager RSS: %.1f MiB with every Job created, %.1f MiB after %s idle\n", float64(rss1)/(1<<20), float64(rss2)/(1<<20), idle)
	fmt.Printf("manager CPU: %.2f s until every Job existed, %.2f s while idle\n", cpu1-cpu0, cpu2-cpu1)
	if len(lat) > 0 {
		fmt.Printf("create→Job latency over %d objects: p50 %s, p99 %s, max %s\n", len(lat), pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	}
	fmt.Printf("manager heap with every Job created (in use, top 12; %s):\n%s", heap.file, heap.top)
	fmt.Printf("manager API writes until every Job existed: %d (%.2f per object)\n", busyWrites, float64(busyWrites)/float64(n))
	for _, k := range sortedKeys(byResource) {
		fmt.Printf("  %-40s %d\n", k, byResource[k])
	}
	fmt.Printf("manager API writes while idle: %d in %s (%.1f per minute)\n", idleWrites, idle, float64(idleWrites)/idle.Minutes())
	for _, k := range sortedKeys(idleBy) {
		fmt.Printf("  %-40s %d\n", k, idleBy[k])
	}
	if drift > 0 {
		return measureDrift(ctx, cp, mgr, binary, auditLog, user, ns, n, drift, driftFor)
	}
	return nil
}

// measureDrift makes every object Ready with a fake runner, waits until
// each has had its first drift check at its phase (half an interval after
// the last apply), then counts drift Jobs over driftFor.
func measureDrift(ctx context.Context, cp *framework.ControlPlane, mgr *framework.Manager, binary, auditLog, user, ns string, n int, drift, driftFor time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	fr := startFakeRunner(ctx, cp, ns, 8)
	var objects []string
	// Ten thousand applies take this two-core machine about half an hour.
	readyWithin := max(30*time.Minute, time.Duration(n)*300*time.Millisecond)
	lastReport := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 5*time.Second, readyWithin, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Captf.InfrastructureV1alpha1().TerraformClusters(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		objects = objects[:0]
		for _, tc := range list.Items {
			if tc.Status.Ready {
				objects = append(objects, tc.Name)
			}
		}
		if time.Since(lastReport) > time.Minute {
			lastReport = time.Now()
			fmt.Printf("  %s: %d of %d Ready, %d fake runs\n", time.Since(start).Round(time.Second), len(objects), n, fr.done.Load())
		}
		return len(objects) == n, nil
	})
	if err != nil {
		return fmt.Errorf("not every object became Ready: %d of %d", len(objects), n)
	}
	allReady := time.Now()
	fmt.Printf("fake runner: every object Ready %s after it started (%d runs)\n", allReady.Sub(start).Round(time.Second), fr.done.Load())
	from := allReady.Add(drift / 2)
	time.Sleep(time.Until(from))
	_, cpu0 := procStats(mgr.Pid())
	time.Sleep(time.Until(from.Add(driftFor)) + 5*time.Second)
	rss, cpu1 := procStats(mgr.Pid())
	fmt.Printf("manager RSS with every object Ready and drift checks running: %.1f MiB; fake runs: %d\n", float64(rss)/(1<<20), fr.done.Load())
	fmt.Printf("manager CPU over the drift window: %.1f s (%.1f%% of a core)\n", cpu1-cpu0, 100*(cpu1-cpu0)/time.Since(from).Seconds())
	fmt.Print(memoryBreakdown(ctx, cp, mgr))
	heap, err := heapProfile(ctx, cp, mgr, binary, fmt.Sprintf("%d-drift", n))
	if err != nil {
		return err
	}
	fmt.Printf("manager heap with drift checks running (in use, top 12; %s):\n%s", heap.file, heap.top)
	events, err := framework.ReadAudit(auditLog)
	if err != nil {
		return err
	}
	fmt.Print(driftFigures(events, user, from, driftFor, drift+drift/10+30*time.Second, objects))
	return nil
}

type profile struct{ file, top string }

// heapProfile takes the manager's heap profile (after a GC) from
// /debug/pprof/heap, keeps it in bin/bench/heap-<n>.pb.gz and returns the
// top of its in-use space.
func heapProfile(ctx context.Context, cp *framework.ControlPlane, mgr *framework.Manager, binary, name string) (profile, error) {
	token, err := cp.ProfilerToken(ctx, "captf-system")
	if err != nil {
		return profile{}, err
	}
	code, body, err := mgr.GetMetricsPath("/debug/pprof/heap?gc=1", token)
	if err != nil || code != http.StatusOK {
		return profile{}, fmt.Errorf("heap profile: %d %v", code, err)
	}
	dir := filepath.Join(filepath.Dir(binary), "bench") // bin/bench
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return profile{}, err
	}
	file := filepath.Join(dir, "heap-"+name+".pb.gz")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		return profile{}, err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=12", "-sample_index=inuse_space", binary, file).Output()
	if err != nil {
		return profile{}, fmt.Errorf("go tool pprof: %w", err)
	}
	lines := strings.Split(string(out), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "flat") {
			lines = lines[i:]
			break
		}
	}
	return profile{file: file, top: "  " + strings.Join(lines, "\n  ") + "\n"}, nil
}

// memoryBreakdown says where the manager's RSS goes: anonymous memory
// against the binary's mapped pages, and the Go runtime's own account.
func memoryBreakdown(ctx context.Context, cp *framework.ControlPlane, mgr *framework.Manager) string {
	var out strings.Builder
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", mgr.Pid())); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && (f[0] == "RssAnon:" || f[0] == "RssFile:") {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				fmt.Fprintf(&out, "  %s %.1f MiB\n", f[0], float64(kb)/1024)
			}
		}
	}
	token, err := cp.MetricsReaderToken(ctx, "captf-system")
	if err != nil {
		return out.String() + "  metrics: " + err.Error() + "\n"
	}
	code, body, err := mgr.Scrape(token)
	if err != nil || code != http.StatusOK {
		return fmt.Sprintf("%s  metrics: %d %v\n", out.String(), code, err)
	}
	for _, line := range strings.Split(body, "\n") {
		for _, name := range []string{"heap_inuse", "heap_idle", "heap_released", "next_gc", "stack_inuse", "gc_sys", "other_sys", "mspan_inuse"} {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "go_memstats_"+name+"_bytes" {
				v, _ := strconv.ParseFloat(f[1], 64)
				fmt.Fprintf(&out, "  go %s %.1f MiB\n", name, v/(1<<20))
			}
		}
	}
	return out.String()
}

// procStats reads a process's RSS (bytes) and CPU time (seconds).
func procStats(pid int) (rss int64, cpu float64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				rss = kb << 10
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		cpu = (utime + stime) / 100 // clock ticks; 100 on Linux
	}
	return rss, cpu
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i-1, len(sorted)-1))].Round(time.Millisecond)
}

func sortedKeys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
