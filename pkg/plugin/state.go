package plugin

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sort"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/captf/captf/pkg/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/pkg/names"
	"github.com/captf/captf/pkg/statestore"
)

// backup is one state backup and what it holds.
type backup struct {
	name    string
	created time.Time
	rescued bool
	// listed: the state Secret lists it among the backups its store made
	// and rotates; a Secret that only looks like a backup is not.
	listed bool
	// what it holds (statestore.AnnotationHolds), "" when not recorded.
	what string
}

// backups lists the object's backups, newest first, by their metadata:
// what each holds is recorded on it when it is made, and none is read.
func (e *env) backups(r ref, obj object) ([]backup, error) {
	n := names.ObjectOf(r.kind, r.name)
	secrets := e.meta.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(e.namespace)
	list, err := secrets.List(e.ctx, metav1.ListOptions{
		LabelSelector: labels.Set{names.LabelManagedBy: names.ManagedByValue, names.LabelKind: n.Kind,
			names.LabelObjectName: names.LabelValue(r.name), names.LabelSecretType: names.SecretTypeBackup}.String()})
	if err != nil {
		return nil, err
	}
	var listed []string
	if head, err := secrets.Get(e.ctx, n.State(), metav1.GetOptions{}); err == nil {
		if listed, err = statestore.BackupsOf(head.Annotations); err != nil {
			return nil, err
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, err
	}
	var out []backup
	for _, s := range list.Items {
		if types := n.FamilyTypes(s.Name); len(types) == 0 || types[0] != names.SecretTypeBackup {
			continue // a chunk, or another object's look-alike
		}
		out = append(out, backup{name: s.Name, created: s.CreationTimestamp.Time, rescued: n.IsRescue(s.Name),
			listed: slices.Contains(listed, s.Name), what: s.Annotations[statestore.AnnotationHolds]})
	}
	// Newest first by when they were made: a rescued state's name
	// (-errored-) sorts apart from the backups'.
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].created.Equal(out[j].created) {
			return out[i].created.After(out[j].created)
		}
		return out[i].name > out[j].name
	})
	return out, nil
}

func (b backup) holds() string {
	if b.what == "" {
		return "? (not recorded: made before CAPTF recorded it, or not a plain state)"
	}
	return b.what
}

// kind says what a backup is: one the state's store made (backup), a
// state terraform could not save (rescued), or a Secret that only looks
// like a backup (unlisted: the state Secret does not list it).
func (b backup) kind() string {
	switch {
	case b.rescued:
		return "rescued"
	case b.listed:
		return "backup"
	}
	return "unlisted"
}

var backupsCommand = &command{
	name: "backups", args: "KIND/NAME", short: "List the object's state backups and what each holds",
	long: `List the object's state backups, newest first: when each was made,
the state's serial and how many resources it holds (recorded on each when
it is made: no backup is read), which are states terraform could not save
(rescued), and which only look like backups (unlisted: the state Secret
does not list them among the backups its store made).

Examples:
  kubectl captf backups tfc/prod -n team-a`,
	minArgs: 1, maxArgs: 1,
	run: func(e *env, args []string) error {
		r, obj, err := e.lookup(args[0])
		if err != nil {
			return err
		}
		list, err := e.backups(r, obj)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BACKUP\tMADE\tKIND\tHOLDS")
		for _, b := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.name, b.created.UTC().Format(time.RFC3339), b.kind(), b.holds())
		}
		return tw.Flush()
	},
}

var restoreCommand = &command{
	name: "restore", args: "KIND/NAME [BACKUP]", short: "Make a backup the object's state (the newest when none is named)",
	long: `Restore a state backup (the newest the state's store made when BACKUP
is not given; never a rescued state or an unlisted look-alike): ask for
confirmation, then set captf.io/restore-state. The manager makes the
backup the current state once no run goes on (the current state becomes a
backup first), and the next apply plans against it. With the approval
policy installed, restoring needs the verb approve.

Examples:
  kubectl captf restore tfc/prod -n team-a
  kubectl captf restore tfc/prod tfc-prod-backup-20261203-101500 -n team-a --yes`,
	minArgs: 1, maxArgs: 2,
	flags: yesFlag("Restore without asking"),
	run: func(e *env, args []string) error {
		r, obj, err := e.lookup(args[0])
		if err != nil {
			return err
		}
		list, err := e.backups(r, obj)
		if err != nil {
			return err
		}
		var chosen *backup
		for i := range list {
			// By default the newest backup the state's store made, never
			// a rescued state (restored by name, once compared) nor a
			// Secret that only looks like a backup.
			if (len(args) == 1 && list[i].kind() == "backup") || (len(args) == 2 && list[i].name == args[1]) {
				chosen = &list[i]
				break
			}
		}
		if chosen == nil {
			if len(args) == 1 {
				if len(list) > 0 {
					// The state Secret is gone or lists none of them: which
					// to take is a person's choice, by name.
					return fmt.Errorf("%s has no backup its state Secret lists, and %d that it does not (kubectl captf backups %s lists them): name the one to restore", r, len(list), r)
				}
				return fmt.Errorf("%s has no state backup", r)
			}
			return fmt.Errorf("%s is no state backup of %s (kubectl captf backups %s lists them)", args[1], r, r)
		}
		if chosen.kind() == "unlisted" {
			fmt.Fprintf(e.out, "Backup %s is not one the state's store made (the state Secret does not list it): whoever may write Secrets here may have made it.\n", chosen.name)
		}
		fmt.Fprintf(e.out, "Restoring makes backup %s (made %s, %s) the state of %s.\n"+
			"The current state becomes a backup first. The next apply plans against the restored state:\n"+
			"what it lacks, terraform creates again; what it holds that is gone, terraform plans to create or replace.\n",
			chosen.name, chosen.created.UTC().Format(time.RFC3339), chosen.holds(), r)
		if !e.yes && !e.confirm("Restore?") {
			return errors.New("not restored")
		}
		if err := e.annotate(r, infrav1.AnnotationRestoreState, chosen.name); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s: restore of %s asked (%s); the StateRestored condition says when it is done\n", r, chosen.name, infrav1.AnnotationRestoreState)
		return nil
	},
}

var abandonCommand = &command{
	name: "abandon", args: "KIND/NAME", short: "Let the object be deleted without destroying its infrastructure",
	long: `Ask for confirmation, then set captf.io/abandon-infrastructure: a delete
of the object then destroys nothing. Its resources keep running, no longer
managed; its state and backups stay, labelled captf.io/abandoned=true, for
an import elsewhere. It deletes nothing by itself. With the approval policy
installed, abandoning needs the verb approve.

Examples:
  kubectl captf abandon tfc/prod -n team-a`,
	minArgs: 1, maxArgs: 1,
	flags: yesFlag("Abandon without asking"),
	run: func(e *env, args []string) error {
		r, err := parseRef(args[0])
		if err != nil {
			return err
		}
		if _, err := e.get(r); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "Abandoning lets %s be deleted without destroying its infrastructure:\n"+
			"its resources keep running, unmanaged; its state and backups stay, labelled %s=true.\n"+
			"A run going on is stopped first. Nothing is deleted now.\n", r, names.LabelAbandoned)
		if !e.yes && !e.confirm("Abandon?") {
			return errors.New("not abandoned")
		}
		if err := e.annotate(r, infrav1.AnnotationAbandonInfrastructure, "true"); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s abandoned: deleting it now leaves its infrastructure running\n", r)
		return nil
	},
}

func yesFlag(usage string) func(fs *flag.FlagSet, e *env) {
	return func(fs *flag.FlagSet, e *env) { fs.BoolVar(&e.yes, "yes", false, usage) }
}

// annotate sets one annotation of the object (a merge patch).
func (e *env) annotate(r ref, key, value string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	c := e.captf.InfrastructureV1alpha1()
	var err error
	switch r.kind {
	case "TerraformCluster":
		_, err = c.TerraformClusters(e.namespace).Patch(e.ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
	case "TerraformMachine":
		_, err = c.TerraformMachines(e.namespace).Patch(e.ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
	default:
		_, err = c.TerraformMachinePools(e.namespace).Patch(e.ctx, r.name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}
