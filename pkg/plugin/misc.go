package plugin

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/pkg/version"
)

var versionCommand = &command{
	name: "version", args: "", short: "Print the plugin's version",
	long: "Print the plugin's version and VCS revision.",
	run: func(e *env, _ []string) error {
		v, rev := version.Get()
		fmt.Fprintf(e.out, "kubectl-captf %s (revision %s)\n", v, rev)
		return nil
	},
}

var completionCommand = &command{
	name: "completion", args: "bash|zsh", short: "Print a shell completion script",
	long: `Print a completion script for bash or zsh. kubectl completes a plugin's
arguments by running kubectl_complete-captf from PATH; the script also
completes kubectl-captf itself.

Examples:
  kubectl captf completion bash > /etc/bash_completion.d/kubectl-captf
  # and for kubectl captf <TAB>:
  printf '#!/bin/sh\nexec kubectl-captf __complete "$@"\n' > ~/bin/kubectl_complete-captf && chmod +x ~/bin/kubectl_complete-captf`,
	minArgs: 1, maxArgs: 1,
	run: func(e *env, args []string) error {
		var names []string
		for _, c := range commands {
			if c.short != "" {
				names = append(names, c.name)
			}
		}
		words := strings.Join(names, " ")
		switch args[0] {
		case "bash":
			fmt.Fprintf(e.out, `_kubectl_captf() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W %q -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(kubectl-captf __complete "${COMP_WORDS[@]:1}" 2>/dev/null)" -- "$cur"))
  fi
}
complete -F _kubectl_captf kubectl-captf
`, words)
		case "zsh":
			fmt.Fprintf(e.out, `#compdef kubectl-captf
_kubectl_captf() {
  if (( CURRENT == 2 )); then
    compadd -- %s
  else
    compadd -- $(kubectl-captf __complete "${words[@]:1}" 2>/dev/null)
  fi
}
compdef _kubectl_captf kubectl-captf
`, words)
		default:
			return usageError{"completion takes bash or zsh"}
		}
		return nil
	},
}

// completeCommand prints what may come next on a command line: the objects
// of the namespace as KIND/NAME (for kubectl_complete-captf and the
// scripts above). Hidden from help.
var completeCommand = &command{
	name: "__complete", args: "[COMMAND ARGS...]", long: "Print completions.", minArgs: 0, maxArgs: 16,
	run: func(e *env, args []string) error {
		if len(args) <= 1 {
			for _, c := range commands {
				if c.short != "" {
					fmt.Fprintln(e.out, c.name)
				}
			}
			return nil
		}
		if args[0] == "describe" {
			fmt.Fprintln(e.out, "cluster")
			return nil
		}
		c := e.captf.InfrastructureV1alpha1()
		if list, err := c.TerraformClusters(e.namespace).List(e.ctx, metav1.ListOptions{}); err == nil {
			for _, o := range list.Items {
				fmt.Fprintln(e.out, "tfc/"+o.Name)
			}
		}
		if list, err := c.TerraformMachines(e.namespace).List(e.ctx, metav1.ListOptions{}); err == nil {
			for _, o := range list.Items {
				fmt.Fprintln(e.out, "tfm/"+o.Name)
			}
		}
		if list, err := c.TerraformMachinePools(e.namespace).List(e.ctx, metav1.ListOptions{}); err == nil {
			for _, o := range list.Items {
				fmt.Fprintln(e.out, "tfmp/"+o.Name)
			}
		}
		return nil
	},
}
