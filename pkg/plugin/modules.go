package plugin

import (
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
)

var modulesCommand = &command{
	name: "modules", args: "[NAME]", short: "List the module catalog: entries, versions, digests and who uses them",
	long: `List the module catalog (TerraformModules): each entry's versions, the
commit and digest each was pinned to, whether it resolved, and the objects
that use it. With NAME, one entry, with the variables and outputs of each
version. Users are counted by the manager (usedBy) and listed from the
objects you may list: in every namespace, or in -n's when you may not.

Examples:
  kubectl captf modules
  kubectl captf modules network --json`,
	minArgs: 0, maxArgs: 1,
	flags: func(fs *flag.FlagSet, e *env) {
		fs.BoolVar(&e.json, "json", false, "Print the entries as JSON")
	},
	run: func(e *env, args []string) error {
		var entries []infrav1.TerraformModule
		if len(args) == 1 {
			m, err := e.captf.InfrastructureV1alpha1().TerraformModules().Get(e.ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return err
			}
			entries = append(entries, *m)
		} else {
			list, err := e.captf.InfrastructureV1alpha1().TerraformModules().List(e.ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			entries = list.Items
		}
		if e.json {
			enc := json.NewEncoder(e.out)
			enc.SetIndent("", "  ")
			return enc.Encode(entries)
		}
		users, scope, err := e.catalogUsers()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MODULE\tVERSION\tREF\tCOMMIT\tDIGEST\tUSED BY\tSTATUS")
		for _, m := range entries {
			byName := map[string]infrav1.CatalogVersionStatus{}
			for _, st := range m.Status.Versions {
				byName[st.Name] = st
			}
			for _, v := range m.Spec.Versions {
				st, ok := byName[v.Name]
				status := "resolving"
				switch {
				case ok && st.Digest != "":
					status = "resolved " + st.ResolvedTime.UTC().Format("2006-01-02 15:04")
				case ok && st.Error != "":
					status = "failed: " + oneLine(st.Error)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, v.Name, dash(st.Ref), dash(short(st.Commit, 12)), dash(short(st.Digest, 19)), st.UsedBy, status)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, m := range entries {
			for _, v := range m.Spec.Versions {
				if u := users[m.Name+"/"+v.Name]; len(u) > 0 {
					sort.Strings(u)
					fmt.Fprintf(e.out, "%s %s is used by (%s): %s\n", m.Name, v.Name, scope, strings.Join(u, ", "))
				}
			}
		}
		if len(args) == 1 {
			e.printInterface(entries[0])
		}
		return nil
	},
}

// catalogUsers lists the objects that name a catalog version, by
// "entry/version": in every namespace, or in e.namespace when the user may
// not list every namespace's.
func (e *env) catalogUsers() (map[string][]string, string, error) {
	users := map[string][]string{}
	scope := "all namespaces"
	ns := ""
	c := e.captf.InfrastructureV1alpha1()
	add := func(kind, namespace, name string, ws *infrav1.WorkspaceSpec) {
		if ref := ws.Module.CatalogRef; ref != nil {
			users[ref.Name+"/"+ref.Version] = append(users[ref.Name+"/"+ref.Version], kind+"/"+name+" -n "+namespace)
		}
	}
	tcs, err := c.TerraformClusters(ns).List(e.ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		ns, scope = e.namespace, "namespace "+e.namespace
		tcs, err = c.TerraformClusters(ns).List(e.ctx, metav1.ListOptions{})
	}
	if err != nil {
		return nil, "", err
	}
	for i := range tcs.Items {
		add("tfc", tcs.Items[i].Namespace, tcs.Items[i].Name, tcs.Items[i].Workspace())
	}
	tms, err := c.TerraformMachines(ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	for i := range tms.Items {
		add("tfm", tms.Items[i].Namespace, tms.Items[i].Name, tms.Items[i].Workspace())
	}
	tmps, err := c.TerraformMachinePools(ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", err
	}
	for i := range tmps.Items {
		add("tfmp", tmps.Items[i].Namespace, tmps.Items[i].Name, tmps.Items[i].Workspace())
	}
	return users, scope, nil
}

// printInterface prints each resolved version's variables and outputs.
func (e *env) printInterface(m infrav1.TerraformModule) {
	for _, st := range m.Status.Versions {
		if st.Digest == "" {
			continue
		}
		fmt.Fprintf(e.out, "\n%s %s (%s):\n", m.Name, st.Name, st.Source)
		tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  VARIABLE\tTYPE\tREQUIRED\tDEFAULT\tDESCRIPTION")
		for _, v := range st.Variables {
			def := "-"
			if v.Default != nil {
				def = short(string(v.Default.Raw), 30)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%t\t%s\t%s\n", v.Name, dash(v.Type), v.Required, def, oneLine(v.Description))
		}
		_ = tw.Flush()
		for _, o := range st.Outputs {
			fmt.Fprintf(e.out, "  output %s: %s\n", o.Name, oneLine(o.Description))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
