// Command captf is CAPTF's one binary: `captf manager` runs the controllers,
// webhooks and metrics; `captf runner` runs terraform inside a Job.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/captf/captf/pkg/manager"
	"github.com/captf/captf/pkg/runner"
	"github.com/captf/captf/pkg/version"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "manager":
		err = manager.Main(os.Args[2:])
	case "runner":
		err = runner.Main(os.Args[2:])
	case "version":
		fmt.Println(version.String())
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "captf: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flags were printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "captf:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: captf <command> [flags]

commands:
  manager   run the CAPTF controllers (see captf manager -h)
  runner    run terraform for one object inside a Job (started by the manager)
  version   print the version
`)
}
