package plugin

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/captf/captf/pkg/run"
)

var runsCommand = &command{
	name: "runs", args: "KIND/NAME", short: "List the object's runs: operation, plan, outcome, times",
	long: `List the object's runs, newest first: what each Job ran, the plan it
made, how it ended and when; also runs whose Job and pod are gone, as far
as the Job history limits keep their records, and the run going on.

Examples:
  kubectl captf runs tfc/prod -n team-a
  kubectl captf runs tfm/prod-md-7x2kq -n team-a`,
	minArgs: 1, maxArgs: 1,
	run: func(e *env, args []string) error {
		r, obj, err := e.lookup(args[0])
		if err != nil {
			return err
		}
		records, err := e.records(r, obj)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tOPERATION\tOUTCOME\tPLAN\tCHANGES\tSTARTED\tDURATION\tREASON\tVOUCHED")
		seen := map[string]bool{}
		for _, j := range obj.WorkspaceStatus().LastJobs {
			// A run going on has no record yet.
			if j.Outcome == "Running" {
				started := "-"
				if j.StartTime != nil {
					started = j.StartTime.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\tRunning\t-\t-\t%s\t-\t-\tyes\n", j.Name, j.Operation, started)
				seen[j.Name] = true
			}
		}
		for _, rec := range records {
			if seen[rec.Job] {
				continue
			}
			plan, changes := "-", "-"
			if rec.Plan != nil {
				s := rec.Plan.Summary
				plan = rec.Plan.Hash
				changes = fmt.Sprintf("+%d ~%d -%d ±%d", s.Add, s.Change, s.Destroy, s.Replace)
			}
			started, took := "-", "-"
			if rec.Started != nil {
				started = rec.Started.UTC().Format(time.RFC3339)
				if rec.Finished != nil {
					took = rec.Finished.Sub(rec.Started.Time).Round(time.Second).String()
				}
			}
			reason := rec.Reason
			if reason == "" && rec.Outcome == run.OutcomeFailed {
				reason = "at " + rec.Stage
			}
			vouched := "-"
			if rec.vouched {
				vouched = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rec.Job, rec.Operation, rec.Outcome, plan, changes, started, took, orDash(reason), vouched)
		}
		return tw.Flush()
	},
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

var logsCommand = &command{
	name: "logs", args: "KIND/NAME [RUN]", short: "Print a run's log, also after its pod is gone",
	long: `Print the log of one of the object's runs (the newest when RUN is not
given): the tail of terraform's output its run record keeps, redacted, also
once its Job and pod are gone. RUN is a Job's name, as runs lists them.

Examples:
  kubectl captf logs tfc/prod -n team-a
  kubectl captf logs tfc/prod tfc-prod-apply-4f1c2a9e0b7d3e61-2 -n team-a`,
	minArgs: 1, maxArgs: 2,
	run: func(e *env, args []string) error {
		r, obj, err := e.lookup(args[0])
		if err != nil {
			return err
		}
		records, err := e.records(r, obj)
		if err != nil {
			return err
		}
		var rec *record
		for i := range records {
			if len(args) == 1 || records[i].Job == args[1] || records[i].name == args[1] {
				rec = &records[i]
				break
			}
		}
		if rec == nil {
			for _, j := range obj.WorkspaceStatus().LastJobs {
				if j.Outcome == "Running" && (len(args) == 1 || j.Name == args[1]) {
					return fmt.Errorf("run %s is going on: its log is its pod's until it ends (kubectl logs -n %s job/%s)", j.Name, e.namespace, j.Name)
				}
			}
			if len(args) == 1 {
				return fmt.Errorf("%s keeps no run record", r)
			}
			return fmt.Errorf("%s keeps no record of run %s (kubectl captf runs %s lists those kept)", r, args[1], r)
		}
		if !rec.vouched {
			fmt.Fprintf(e.err, "(run record %s is not one the object's status vouches for: older than the last run of its operation, or changed or made by someone else since)\n", rec.name)
		}
		for _, c := range rec.Cut {
			if c == run.KeyLog {
				fmt.Fprintf(e.err, "(the last %d KiB of the log of run %s)\n", run.MaxLogTail>>10, rec.Job)
			}
		}
		log := rec.data[run.KeyLog]
		fmt.Fprint(e.out, log)
		if log != "" && !strings.HasSuffix(log, "\n") {
			fmt.Fprintln(e.out)
		}
		if rec.Error != "" {
			fmt.Fprintf(e.out, "\n%s %s at %s: %s\n", rec.Operation, rec.Outcome, rec.Stage, rec.Error)
		}
		return nil
	},
}
