// Package version is CAPTF's version, set at build time with
// -ldflags "-X github.com/captf/captf/pkg/version.Version=v0.1.0".
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version of this build.
var Version = devVersion

const devVersion = "v0.0.0-dev"

// Get is the version and VCS revision of this build. A build without
// -ldflags (a plain go build or go install) takes both from what the Go
// toolchain stamped into the binary: the module's version (a tag, or a
// pseudo-version made from the commit) and the commit, "-dirty" when the
// tree had changes.
func Get() (version, revision string) {
	version, revision = Version, "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version, revision
	}
	if version == devVersion && info.Main.Version != "" && info.Main.Version != "(devel)" {
		version = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && revision != "unknown" {
		revision += "-dirty"
	}
	return version, revision
}

// String is the version with the Go version and VCS revision when known.
func String() string {
	v, rev := Get()
	return fmt.Sprintf("captf %s (revision %s, %s)", v, rev, runtime.Version())
}
