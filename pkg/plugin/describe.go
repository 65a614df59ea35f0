package plugin

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/providerid"
)

var capiGroupVersion = schema.GroupVersion{Group: "cluster.x-k8s.io", Version: "v1beta2"}

var describeCommand = &command{
	name: "describe", args: "cluster NAME", short: "Show a Cluster, its Terraform objects, plans and running Jobs as a tree",
	long: `Show a Cluster API Cluster as a tree: its TerraformCluster, its Machines with
their TerraformMachines, its MachinePools with their TerraformMachinePools;
for each Terraform object whether it is Ready and why, the plan waiting for
approval, the run going on and the instances it holds (provider IDs).

Examples:
  kubectl captf describe cluster prod -n team-a`,
	minArgs: 2, maxArgs: 2,
	run: func(e *env, args []string) error {
		if args[0] != "cluster" && args[0] != "clusters" {
			return usageError{"describe takes cluster NAME"}
		}
		return e.describeCluster(args[1])
	},
}

// row is one line of the tree.
type row struct {
	depth             int
	name, ready, note string
}

func (e *env) describeCluster(name string) error {
	selector := metav1.ListOptions{LabelSelector: "cluster.x-k8s.io/cluster-name=" + name}
	var rows []row
	cluster, err := e.dynamic.Resource(capiGroupVersion.WithResource("clusters")).Namespace(e.namespace).Get(e.ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		rows = append(rows, row{0, "Cluster/" + name, "-", "not found: the Terraform objects labelled for it"})
	case err != nil:
		return err
	default:
		rows = append(rows, row{0, "Cluster/" + name, capiReady(cluster), ""})
	}
	c := e.captf.InfrastructureV1alpha1()
	tcs, err := c.TerraformClusters(e.namespace).List(e.ctx, selector)
	if err != nil {
		return err
	}
	for i := range tcs.Items {
		rows = append(rows, e.objectRow(1, "TerraformCluster", &tcs.Items[i]))
	}
	// Machines with their TerraformMachines, matched by the Machine's
	// infrastructure reference; TerraformMachines no Machine names yet
	// stand alone.
	tms, err := c.TerraformMachines(e.namespace).List(e.ctx, selector)
	if err != nil {
		return err
	}
	infra := map[string]object{}
	for i := range tms.Items {
		infra["TerraformMachine/"+tms.Items[i].Name] = &tms.Items[i]
	}
	tmps, err := c.TerraformMachinePools(e.namespace).List(e.ctx, selector)
	if err != nil {
		return err
	}
	for i := range tmps.Items {
		infra["TerraformMachinePool/"+tmps.Items[i].Name] = &tmps.Items[i]
	}
	for _, owner := range []string{"machines", "machinepools"} {
		list, err := e.dynamic.Resource(capiGroupVersion.WithResource(owner)).Namespace(e.namespace).List(e.ctx, selector)
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			continue // the user may not read them, or no MachinePool API: the objects stand alone
		}
		if err != nil {
			return err
		}
		sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].GetName() < list.Items[j].GetName() })
		for _, m := range list.Items {
			rows = append(rows, row{1, m.GetKind() + "/" + m.GetName(), capiReady(&m), ""})
			kind, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "kind")
			if owner == "machinepools" {
				kind, _, _ = unstructured.NestedString(m.Object, "spec", "template", "spec", "infrastructureRef", "kind")
			}
			refName, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
			if owner == "machinepools" {
				refName, _, _ = unstructured.NestedString(m.Object, "spec", "template", "spec", "infrastructureRef", "name")
			}
			if obj, ok := infra[kind+"/"+refName]; ok {
				rows = append(rows, e.objectRow(2, kind, obj))
				delete(infra, kind+"/"+refName)
			}
		}
	}
	var alone []string
	for k := range infra {
		alone = append(alone, k)
	}
	sort.Strings(alone)
	for _, k := range alone {
		kind, _, _ := strings.Cut(k, "/")
		rows = append(rows, e.objectRow(1, kind, infra[k]))
	}
	printTree(e.out, rows)
	return nil
}

// objectRow is a Terraform object's line: Ready, its reason, the plan
// waiting and the run going on.
func (e *env) objectRow(depth int, kind string, obj object) row {
	r := row{depth: depth, name: kind + "/" + obj.GetName(), ready: "Unknown"}
	var notes []string
	if c := condition(obj, infrav1.ConditionReady); c != nil {
		r.ready = string(c.Status)
		notes = append(notes, c.Reason)
	}
	st := obj.WorkspaceStatus()
	if annotation, protected := gate(obj); protected != nil && st.LastPlan != nil {
		notes = append(notes, "plan "+st.LastPlan.Hash+" refused: protected")
	} else if annotation != "" && st.LastPlan != nil {
		notes = append(notes, "plan "+st.LastPlan.Hash+" waits for "+annotation)
	}
	for _, j := range st.LastJobs {
		if j.Outcome == "Running" {
			notes = append(notes, "running "+string(j.Operation)+" Job "+j.Name)
		}
	}
	// The instances it holds, as the manager and the webhook read them.
	switch ids, _ := providerid.Held(obj); {
	case len(ids) == 1 && kind == "TerraformMachine":
		notes = append(notes, "instance "+oneLine(ids[0]))
	case len(ids) == 1:
		notes = append(notes, "1 instance")
	case len(ids) > 1:
		notes = append(notes, fmt.Sprintf("%d instances", len(ids)))
	}
	r.note = strings.Join(notes, "; ")
	return r
}

// capiReady is a Cluster API object's Ready condition.
func capiReady(u *unstructured.Unstructured) string {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			if s, ok := m["status"].(string); ok {
				return s
			}
		}
	}
	return "Unknown"
}

func printTree(w io.Writer, rows []row) {
	width := len("NAME")
	names := make([]string, len(rows))
	for i, r := range rows {
		prefix := ""
		if r.depth > 0 {
			prefix = strings.Repeat("  ", r.depth-1)
			last := true
			for _, next := range rows[i+1:] {
				if next.depth < r.depth {
					break
				}
				if next.depth == r.depth {
					last = false
					break
				}
			}
			if last {
				prefix += "└─"
			} else {
				prefix += "├─"
			}
		}
		names[i] = prefix + r.name
		width = max(width, len([]rune(names[i])))
	}
	fmt.Fprintf(w, "%-*s  %-7s  %s\n", width, "NAME", "READY", "REASON, PLAN, RUN")
	for i, r := range rows {
		pad := width - len([]rune(names[i]))
		fmt.Fprintf(w, "%s%s  %-7s  %s\n", names[i], strings.Repeat(" ", pad), r.ready, r.note)
	}
}

// oneLine is s as it is when it holds no space or control character, else
// quoted: a provider ID comes from module code, and must not add a line
// (or a column) to the tree.
func oneLine(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
