// Package version is CAPTF's version, set at build time with
// -ldflags "-X github.com/captf/captf/pkg/version.Version=v0.1.0".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version of this build.
var Version = "v0.0.0-dev"

// String is the version with the Go version and VCS revision when known.
func String() string {
	rev := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return fmt.Sprintf("captf %s (revision %s, %s)", Version, rev, runtime.Version())
}
