// Package plugin is `kubectl captf`: what a person reads of CAPTF's objects
// (plans, runs, logs, backups, a cluster's tree) and the approvals,
// restores and abandons they set, each with the user's own kubeconfig and
// rights: nothing the user could not do with kubectl.
package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	versioned "github.com/captf/captf/pkg/generated/clientset/versioned"
	"github.com/captf/captf/pkg/version"
)

// env is what a command runs with: the parsed flags, the clients, and the
// streams.
type env struct {
	ctx       context.Context
	in        io.Reader
	out, err  io.Writer
	namespace string
	kube      kubernetes.Interface
	captf     versioned.Interface
	dynamic   dynamic.Interface
	meta      metadata.Interface
	// Flags of the commands that take them.
	json, yes bool
	// recordsHidden: the user may not list run records.
	recordsHidden bool
}

type command struct {
	name, args, short, long string
	// flags adds the command's own flags.
	flags func(fs *flag.FlagSet, e *env)
	run   func(e *env, args []string) error
	// minArgs and maxArgs bound the positional arguments.
	minArgs, maxArgs int
}

// commands are the plugin's commands, in the order help lists them.
var commands []*command

func init() {
	commands = []*command{planCommand, approveCommand, runsCommand, logsCommand, backupsCommand, restoreCommand, abandonCommand,
		describeCommand, modulesCommand, completionCommand, versionCommand, completeCommand}
}

// usageError is a mistake in the command line: exit code 1, with the
// command's usage.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

// Main runs the plugin with args (without the program's name) and returns
// its exit code: 0, or 1 on any error, as kubectl's.
func Main(args []string, in io.Reader, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(out) // with no arguments too, as kubectl: help is no error
		return 0
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(errOut, "error: unknown command %q for \"kubectl captf\"\nRun 'kubectl captf --help' for usage.\n", args[0])
		return 1
	}
	// What module code or a writer wrote reaches a terminal only printable.
	printOut, printErr := newPrintable(out), newPrintable(errOut)
	defer printOut.Flush()
	defer printErr.Flush()
	out, errOut = printOut, printErr
	e := &env{ctx: context.Background(), in: in, out: out, err: errOut}
	fs := flag.NewFlagSet("kubectl captf "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var kubeconfig, kubecontext string
	help := false
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to the kubeconfig file to use")
	fs.StringVar(&kubecontext, "context", "", "The name of the kubeconfig context to use")
	fs.StringVar(&e.namespace, "namespace", "", "The namespace of the object (default: the context's)")
	fs.StringVar(&e.namespace, "n", "", "Short for --namespace")
	fs.BoolVar(&help, "h", false, "Help for "+cmd.name)
	fs.BoolVar(&help, "help", false, "Help for "+cmd.name)
	if cmd.flags != nil {
		cmd.flags(fs, e)
	}
	positional, err := parseInterspersed(fs, args[1:])
	if err == nil && !help && (len(positional) < cmd.minArgs || len(positional) > cmd.maxArgs) {
		err = usageError{fmt.Sprintf("%s takes %s", cmd.name, cmd.args)}
	}
	if help {
		commandUsage(out, cmd, fs)
		return 0
	}
	if err != nil {
		fmt.Fprintf(errOut, "error: %v\nSee 'kubectl captf %s -h' for help and examples.\n", err, cmd.name)
		return 1
	}
	if cmd.name != "completion" && cmd.name != "version" {
		if err := e.connect(kubeconfig, kubecontext); err != nil {
			fmt.Fprintf(errOut, "error: %v\n", err)
			return 1
		}
	}
	if err := cmd.run(e, positional); err != nil {
		// As kubectl says them: the API server's refusals with their
		// reason, the plugin's own as errors.
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			fmt.Fprintf(errOut, "Error from server (%s): %v\n", apierrors.ReasonForError(err), err)
		} else {
			fmt.Fprintf(errOut, "error: %v\n", err)
		}
		return 1
	}
	return 0
}

// parseInterspersed parses flags anywhere among the arguments, as kubectl
// does, and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// connect makes the clients from the kubeconfig, as kubectl loads it.
func (e *env) connect(kubeconfig, kubecontext string) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubecontext})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return err
	}
	v, _ := version.Get()
	cfg.UserAgent = "kubectl-captf/" + v
	if e.namespace == "" {
		if e.namespace, _, err = loader.Namespace(); err != nil {
			return err
		}
	}
	if e.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if e.captf, err = versioned.NewForConfig(cfg); err != nil {
		return err
	}
	if e.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	e.meta, err = metadata.NewForConfig(cfg)
	return err
}

func usage(w io.Writer) {
	fmt.Fprint(w, `kubectl captf: see and act on the Terraform runs of CAPTF's objects.

Objects are KIND/NAME: tfc (terraformcluster), tfm (terraformmachine) or
tfmp (terraformmachinepool), e.g. tfc/prod.

Commands:
`)
	for _, c := range commands {
		if c.short != "" {
			fmt.Fprintf(w, "  %-10s %s\n", c.name, c.short)
		}
	}
	fmt.Fprint(w, `
Flags of every command:
  -n, --namespace   the object's namespace (default: the context's)
      --kubeconfig  the kubeconfig file
      --context     the kubeconfig context

Use "kubectl captf <command> -h" for more about a command.
`)
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  kubectl captf %s %s [flags]\n\nFlags:\n", c.long, c.name, c.args)
	var lines []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "n" || f.Name == "h" {
			return
		}
		name := "--" + f.Name
		if f.Name == "namespace" {
			name = "-n, --namespace"
		}
		if f.Name == "help" {
			name = "-h, --help"
		}
		lines = append(lines, fmt.Sprintf("  %-18s %s", name, f.Usage))
	})
	sort.Strings(lines)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}
