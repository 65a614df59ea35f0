// Package logflags gives `captf manager` and `captf runner` the logging
// flags of a Kubernetes component, and only those: -v, -vmodule and
// --logging-format (text or json).
package logflags

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"k8s.io/klog/v2"
)

// Flags are the logging flags of one command.
type Flags struct {
	format string
	klog   *flag.FlagSet
}

// Bind adds -v, -vmodule and --logging-format to fs. klog's other flags
// (log files, headers, stderr thresholds) are left out: a container logs
// to stderr, in text or JSON.
func Bind(fs *flag.FlagSet) *Flags {
	f := &Flags{klog: flag.NewFlagSet("klog", flag.ContinueOnError)}
	klog.InitFlags(f.klog)
	for _, name := range []string{"v", "vmodule"} {
		fl := f.klog.Lookup(name)
		fs.Var(fl.Value, fl.Name, fl.Usage)
	}
	fs.StringVar(&f.format, "logging-format", "text", "log format: text (klog's) or json (one object per line, -vmodule ignored)")
	return f
}

// Apply sets up logging as the parsed flags say.
func (f *Flags) Apply() error {
	switch f.format {
	case "text":
		return nil
	case "json":
		v, err := strconv.Atoi(f.klog.Lookup("v").Value.String())
		if err != nil {
			return err
		}
		// logr's V(n) is slog's level -n.
		h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-v)})
		klog.SetSlogLogger(slog.New(h))
		return nil
	default:
		return fmt.Errorf("--logging-format=%s: want text or json", f.format)
	}
}
