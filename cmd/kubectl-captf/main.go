// Command kubectl-captf is the kubectl plugin of CAPTF (`kubectl captf`):
// plans, approvals, runs, logs, backups and restores of Terraform objects,
// with the user's kubeconfig and rights.
package main

import (
	"os"

	"github.com/captf/captf/pkg/plugin"
)

func main() {
	os.Exit(plugin.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
