package capi

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/test/framework"
)

var machineHealthChecksGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machinehealthchecks"}

// TestWorkloadCluster runs what follows provisioning with a workload cluster
// whose Nodes come and go with the instances: Machines get Nodes, a
// MachinePool its ready replicas, a MachineHealthCheck replaces a dead host
// (and stops when too many die at once), and a MachineDeployment rolls to a
// new version one machine at a time. Each phase counts CAPTF's Jobs.
func TestWorkloadCluster(t *testing.T) {
	ctx := context.Background()
	root, capi := setup(t)
	const ns, cluster = "workload", "wl"
	if _, err := plane.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	instances := t.TempDir()
	variables := []infrav1.Variable{{Name: "instance_dir", Value: &runtime.RawExtension{Raw: fmt.Appendf(nil, "%q", instances)}}}
	module := func(name string) infrav1.Module {
		b, err := os.ReadFile(filepath.Join(root, "examples", name, "main.tf"))
		if err != nil {
			t.Fatal(err)
		}
		return infrav1.Module{Inline: string(b)}
	}
	create := func(gvr schema.GroupVersionResource, o map[string]any) {
		t.Helper()
		if _, err := plane.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: o}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clusterLabel := map[string]string{"cluster.x-k8s.io/cluster-name": cluster}
	infraRef := func(kind, name string) map[string]any {
		return map[string]any{"apiGroup": infrav1.SchemeGroupVersion.Group, "kind": kind, "name": name}
	}

	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformClusters(ns).Create(ctx, &infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-cloud"), Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(clustersGVR, map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": map[string]any{"name": cluster, "namespace": ns},
		"spec": map[string]any{"infrastructureRef": infraRef("TerraformCluster", cluster)}})
	start := time.Now()
	workload, err := plane.StartWorkload(ctx, ns, cluster, instances)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("workload cluster up in %s", time.Since(start).Round(time.Millisecond))
	tl := startTimeline(t, ns, workload)

	const bootstrap = "#cloud-config\n"
	if _, err := plane.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boot", Labels: map[string]string{infrav1.LabelBootstrapData: "true"}},
		Data: map[string][]byte{"value": []byte(bootstrap)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The control plane is one Machine here (no control-plane provider
	// runs): its Node initializes the cluster for Cluster API.
	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachines(ns).Create(ctx, &infrav1.TerraformMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "wl-cp", Labels: clusterLabel},
		Spec:       infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-machine"), Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(machinesGVR, map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"name": "wl-cp", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": cluster, "cluster.x-k8s.io/control-plane": ""}},
		"spec": map[string]any{"clusterName": cluster, "version": "v1.37.0", "bootstrap": map[string]any{"dataSecretName": "boot"},
			"infrastructureRef": infraRef("TerraformMachine", "wl-cp")}})

	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachineTemplates(ns).Create(ctx, &infrav1.TerraformMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "wl-md"},
		Spec: infrav1.TerraformMachineTemplateSpec{Template: infrav1.TerraformMachineTemplateResource{Spec: infrav1.TerraformMachineSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-machine"), Variables: variables}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	workers := map[string]any{"pool": "wl-md", "cluster.x-k8s.io/cluster-name": cluster}
	create(machineDeploymentsGVR, map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
		"metadata": map[string]any{"name": "wl-md", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": cluster}},
		"spec": map[string]any{
			"clusterName": cluster,
			"replicas":    int64(2),
			// CAPI's defaulting webhook does not run here.
			"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
			"selector": map[string]any{"matchLabels": workers},
			"template": map[string]any{
				"metadata": map[string]any{"labels": workers},
				"spec": map[string]any{"clusterName": cluster, "version": "v1.37.0", "bootstrap": map[string]any{"dataSecretName": "boot"},
					"infrastructureRef": infraRef("TerraformMachineTemplate", "wl-md")},
			},
		}})

	if _, err := plane.Captf.InfrastructureV1alpha1().TerraformMachinePools(ns).Create(ctx, &infrav1.TerraformMachinePool{
		ObjectMeta: metav1.ObjectMeta{Name: "wl-pool", Labels: clusterLabel},
		Spec:       infrav1.TerraformMachinePoolSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Module: module("local-pool"), Variables: variables}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(machinePoolsGVR, map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachinePool",
		"metadata": map[string]any{"name": "wl-pool", "namespace": ns, "labels": map[string]any{"cluster.x-k8s.io/cluster-name": cluster}},
		"spec": map[string]any{"clusterName": cluster, "replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"clusterName": cluster, "version": "v1.37.0", "bootstrap": map[string]any{"dataSecretName": "boot"},
				"infrastructureRef": infraRef("TerraformMachinePool", "wl-pool")}}}})

	// Every Machine Running with its Node, the deployment and the pool with
	// their ready replicas.
	waitWorkers := func(what string, timeout time.Duration, ok func(machines []unstructured.Unstructured, md, mp *unstructured.Unstructured) bool) {
		t.Helper()
		var machines *unstructured.UnstructuredList
		var md, mp *unstructured.Unstructured
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			var err error
			if machines, err = plane.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
				return false, nil
			}
			if md, err = plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Get(ctx, "wl-md", metav1.GetOptions{}); err != nil {
				return false, nil
			}
			if mp, err = plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Get(ctx, "wl-pool", metav1.GetOptions{}); err != nil {
				return false, nil
			}
			return ok(machines.Items, md, mp), nil
		})
		if err != nil {
			for _, m := range machines.Items {
				t.Logf("Machine %s: %v", m.GetName(), m.Object["status"])
			}
			t.Logf("MachineDeployment status: %v", md.Object["status"])
			t.Logf("MachinePool status: %v", mp.Object["status"])
			t.Fatalf("%s: never happened\n%s\ncapi log:\n%s", what, tl, capi.Logs(40))
		}
	}
	allRunning := func(n int) func(machines []unstructured.Unstructured, md, mp *unstructured.Unstructured) bool {
		return func(machines []unstructured.Unstructured, md, mp *unstructured.Unstructured) bool {
			running := 0
			for _, m := range machines {
				phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
				node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
				id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
				if phase == "Running" && node != "" && id == framework.ProviderIDPrefix+node && m.GetDeletionTimestamp() == nil {
					running++
				}
			}
			available, _, _ := unstructured.NestedInt64(md.Object, "status", "availableReplicas")
			upToDate, _, _ := unstructured.NestedInt64(md.Object, "status", "upToDateReplicas")
			poolReady, _, _ := unstructured.NestedInt64(mp.Object, "status", "readyReplicas")
			return running == n+1 && len(machines) == n+1 && available == int64(n) && upToDate == int64(n) && poolReady == 2
		}
	}
	waitWorkers("the control plane and 2 workers Running with Nodes, the deployment's 2 and the pool's 2 ready", 4*time.Minute, allRunning(2))
	t.Logf("provisioned: every Machine Running with its Node %s after the Cluster was created", time.Since(start).Round(time.Second))

	// The pool's provider IDs are CAPI's own copy, and its Nodes are those
	// of its instances.
	mp, err := plane.Dynamic.Resource(machinePoolsGVR).Namespace(ns).Get(ctx, "wl-pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids, _, _ := unstructured.NestedStringSlice(mp.Object, "spec", "providerIDList")
	refs, _, _ := unstructured.NestedSlice(mp.Object, "status", "nodeRefs")
	if want := []string{framework.ProviderIDPrefix + "wl-pool-0", framework.ProviderIDPrefix + "wl-pool-1"}; !slices.Equal(ids, want) || len(refs) != 2 {
		t.Errorf("MachinePool providerIDList %v nodeRefs %v, want %v and their 2 Nodes", ids, refs, want)
	}

	create(machineHealthChecksGVR, map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck",
		"metadata": map[string]any{"name": "wl-md", "namespace": ns},
		"spec": map[string]any{
			"clusterName": cluster,
			"selector":    map[string]any{"matchLabels": map[string]any{"pool": "wl-md"}},
			"checks": map[string]any{"unhealthyNodeConditions": []any{
				map[string]any{"type": "Ready", "status": "Unknown", "timeoutSeconds": int64(5)},
				map[string]any{"type": "Ready", "status": "False", "timeoutSeconds": int64(5)},
			}},
			// One dead host of two is remediated; two at once is a storm.
			"remediation": map[string]any{"triggerIf": map[string]any{"unhealthyLessThanOrEqualTo": int64(1)}},
		}})
	workerNames := func() []string {
		list, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "pool=wl-md"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range list.Items {
			out = append(out, m.GetName())
		}
		sort.Strings(out)
		return out
	}

	t.Run("a dead host is replaced", func(t *testing.T) {
		before := workerNames()
		dead := before[0]
		mark := tl.mark("instance " + dead + " removed out of band")
		if err := os.Remove(filepath.Join(instances, dead)); err != nil {
			t.Fatal(err)
		}
		waitWorkers("the dead host's Machine replaced and the new one Running", 4*time.Minute, func(machines []unstructured.Unstructured, md, mp *unstructured.Unstructured) bool {
			for _, m := range machines {
				if m.GetName() == dead {
					return false
				}
			}
			return allRunning(2)(machines, md, mp)
		})
		after := workerNames()
		replacement := slices.DeleteFunc(slices.Clone(after), func(n string) bool { return slices.Contains(before, n) })
		t.Logf("remediation timeline:\n%s", tl.since(mark))
		want := map[string]int{"destroy " + dead: 1}
		if len(replacement) == 1 {
			want["apply "+replacement[0]] = 1
		} else {
			t.Errorf("workers %v after %v: want one replacement", after, before)
		}
		if got := tl.jobsSince(mark); !maps.Equal(got, want) {
			t.Errorf("Jobs during the remediation: %v, want %v", got, want)
		}
	})

	t.Run("too many dead hosts at once: nothing is replaced", func(t *testing.T) {
		hosts := workerNames()
		mark := tl.mark(fmt.Sprintf("instances %v removed out of band", hosts))
		for _, h := range hosts {
			if err := os.Remove(filepath.Join(instances, h)); err != nil {
				t.Fatal(err)
			}
		}
		var mhc *unstructured.Unstructured
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			mhc, err = plane.Dynamic.Resource(machineHealthChecksGVR).Namespace(ns).Get(ctx, "wl-md", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			healthy, _, _ := unstructured.NestedInt64(mhc.Object, "status", "currentHealthy")
			allowed, found, _ := unstructured.NestedInt64(mhc.Object, "status", "remediationsAllowed")
			return found && healthy == 0 && allowed == 0 && conditionStatus(mhc, "RemediationAllowed") == "False", nil
		})
		if err != nil {
			t.Fatalf("the health check never stopped remediating: %v\n%s", mhc.Object["status"], tl)
		}
		// Long past the health check's 5 s timeouts: nothing deleted,
		// nothing applied or destroyed.
		err = framework.Consistently(20*time.Second, func() error {
			if now := workerNames(); !slices.Equal(now, hosts) {
				return fmt.Errorf("workers %v during the storm, want %v untouched", now, hosts)
			}
			if got := tl.jobsSince(mark); len(got) != 0 {
				return fmt.Errorf("jobs during the storm: %v, want none", got)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		// The hosts come back: their Nodes turn Ready, the health check is
		// satisfied, and still nothing was replaced.
		for _, h := range hosts {
			if err := os.WriteFile(filepath.Join(instances, h), []byte(bootstrap), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		waitWorkers("the hosts back and Running", 2*time.Minute, allRunning(2))
		if now := workerNames(); !slices.Equal(now, hosts) {
			t.Errorf("workers %v after the storm, want %v", now, hosts)
		}
		t.Logf("storm timeline:\n%s", tl.since(mark))
	})

	t.Run("a new version rolls one machine at a time", func(t *testing.T) {
		old := workerNames()
		mark := tl.mark("MachineDeployment version v1.37.0 → v1.37.1")
		minReady := make(chan int, 1)
		stop := make(chan struct{})
		go func() { minReady <- watchReadyWorkers(ctx, workload, instances, "wl-md-", stop) }()
		patch := []byte(`{"spec":{"template":{"spec":{"version":"v1.37.1"}}}}`)
		if _, err := plane.Dynamic.Resource(machineDeploymentsGVR).Namespace(ns).Patch(ctx, "wl-md", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitWorkers("2 new workers Running, the old ones gone", 5*time.Minute, func(machines []unstructured.Unstructured, md, mp *unstructured.Unstructured) bool {
			for _, m := range machines {
				if slices.Contains(old, m.GetName()) {
					return false
				}
				if v, _, _ := unstructured.NestedString(m.Object, "spec", "version"); m.GetName() != "wl-cp" && v != "v1.37.1" {
					return false
				}
			}
			return allRunning(2)(machines, md, mp)
		})
		close(stop)
		t.Logf("rollout timeline:\n%s", tl.since(mark))
		if n := <-minReady; n < 2 {
			t.Errorf("Ready worker Nodes with live hosts fell to %d during the rollout, want never below 2 (maxUnavailable 0)", n)
		}
		want := map[string]int{}
		for _, n := range old {
			want["destroy "+n] = 1
		}
		for _, n := range workerNames() {
			want["apply "+n] = 1
		}
		if got := tl.jobsSince(mark); !maps.Equal(got, want) {
			t.Errorf("Jobs during the rollout: %v, want %v", got, want)
		}
		if files := instanceFiles(instances, "wl-md-"); len(files) != 2 {
			t.Errorf("worker instances %v after the rollout, want 2", files)
		}
	})
}

func conditionStatus(u *unstructured.Unstructured, t string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == t {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

// watchReadyWorkers samples, until stop, the Ready Nodes of prefix whose
// hosts are alive (a destroyed host's Node stays Ready until the node
// lifecycle controller notices) and returns the fewest seen.
func watchReadyWorkers(ctx context.Context, wc *framework.WorkloadCluster, instances, prefix string, stop <-chan struct{}) int {
	fewest := -1
	for {
		nodes, err := wc.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for _, n := range nodes.Items {
				if !strings.HasPrefix(n.Name, prefix) {
					continue
				}
				if _, err := os.Stat(filepath.Join(instances, n.Name)); err != nil {
					continue
				}
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if fewest < 0 || ready < fewest {
				fewest = ready
			}
		}
		select {
		case <-stop:
			return fewest
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// timeline records, from watches, what users would follow during a
// remediation or a rollout: Machines, CAPTF's Jobs and the workload
// cluster's Nodes, in order, with times.
type timeline struct {
	start  time.Time
	mu     sync.Mutex
	events []event
}

type event struct {
	at   time.Duration
	what string
	job  string // "<operation> <object>" for a Job created
}

func startTimeline(t *testing.T, ns string, wc *framework.WorkloadCluster) *timeline {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tl := &timeline{start: time.Now()}
	machines, err := plane.Dynamic.Resource(machinesGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := plane.Kube.BatchV1().Jobs(ns).Watch(ctx, metav1.ListOptions{LabelSelector: names.LabelManagedBy + "=" + names.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := wc.Kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go tl.follow(machines, func(e watch.Event) (string, string, string) {
		m, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return "", "", ""
		}
		phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
		return "Machine " + m.GetName(), string(e.Type) + " " + phase + deleting(m.GetDeletionTimestamp()), ""
	})
	go tl.follow(jobs, func(e watch.Event) (string, string, string) {
		j, ok := e.Object.(*batchv1.Job)
		if !ok {
			return "", "", ""
		}
		state := "running"
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				state = string(c.Type)
			}
		}
		var job string
		if e.Type == watch.Added {
			job = j.Labels[names.LabelOperation] + " " + j.Labels[names.LabelObjectName]
		}
		return "Job " + j.Name, string(e.Type) + " " + state, job
	})
	go tl.follow(nodes, func(e watch.Event) (string, string, string) {
		n, ok := e.Object.(*corev1.Node)
		if !ok {
			return "", "", ""
		}
		ready := "no status"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = "Ready=" + string(c.Status)
			}
		}
		return "Node " + n.Name, string(e.Type) + " " + ready, ""
	})
	return tl
}

func deleting(ts *metav1.Time) string {
	if ts != nil {
		return " deleting"
	}
	return ""
}

// follow records a line each time an object's summary changes.
func (tl *timeline) follow(w watch.Interface, summary func(watch.Event) (key, state, job string)) {
	last := map[string]string{}
	for e := range w.ResultChan() {
		key, s, job := summary(e)
		if key == "" {
			continue
		}
		state := strings.TrimPrefix(strings.TrimPrefix(s, "ADDED "), "MODIFIED ")
		if last[key] == state && e.Type == watch.Modified {
			continue
		}
		last[key] = state
		tl.add(event{what: key + ": " + s, job: job})
	}
}

// add appends e and returns its place in the timeline.
func (tl *timeline) add(e event) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	e.at = time.Since(tl.start)
	tl.events = append(tl.events, e)
	return len(tl.events) - 1
}

// mark records a step of the test and returns its place in the timeline.
func (tl *timeline) mark(what string) int { return tl.add(event{what: "TEST " + what}) }

// jobsSince counts the apply and destroy Jobs created since mark, by
// "<operation> <object>".
func (tl *timeline) jobsSince(mark int) map[string]int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	out := map[string]int{}
	for _, e := range tl.events[mark:] {
		if strings.HasPrefix(e.job, "apply ") || strings.HasPrefix(e.job, "destroy ") {
			out[e.job]++
		}
	}
	return out
}

func (tl *timeline) since(mark int) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var b strings.Builder
	origin := tl.events[mark].at
	for _, e := range tl.events[mark:] {
		fmt.Fprintf(&b, "  +%6.1fs  %s\n", (e.at - origin).Seconds(), e.what)
	}
	return b.String()
}

func (tl *timeline) String() string { return tl.since(0) }
