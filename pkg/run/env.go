package run

import (
	"path/filepath"
	"strings"
)

// JobWorkDir is the working directory of a runner Job: the module's files.
const JobWorkDir = "/workspace"

// commandEnv are environment variables that make git (which terraform init
// runs to fetch modules), the dynamic linker or a shell run a command of
// their choosing, or that re-point terraform's arguments and backend: set
// by a writer, they would run code before the code gate looks at any.
var commandEnv = map[string]bool{
	"SSH_ASKPASS": true, "BASH_ENV": true, "ENV": true, "XDG_CONFIG_HOME": true, "TF_WORKSPACE": true,
	// init runs before the gate; arguments of later commands run after it.
	"TF_CLI_ARGS": true, "TF_CLI_ARGS_init": true,
}

var commandEnvPrefixes = []string{"GIT_", "LD_", "TF_HTTP_"}

// ForbiddenEnv says why a runner may not have name=value in its
// environment ("" when it may). In the working directory (the module's
// files), PATH and HOME would make a module file a program or git's
// configuration; OpenTofu's external key providers run a command.
func ForbiddenEnv(name, value, workDir string) string {
	switch {
	case name == "GIT_TERMINAL_PROMPT" || name == "GIT_SSL_CAINFO":
		return ""
	case commandEnv[name] || hasAnyPrefix(name, commandEnvPrefixes):
		return "it can make git or terraform run a command, or move the state, before the module's code is approved"
	case name == "GODEBUG":
		// http2debug=2 logs every header the runner sends: its write key.
		return "it can make the runner log its requests' headers, its credentials among them"
	case name == "TF_ENCRYPTION" && strings.Contains(value, "external"):
		return "an external key provider or method runs a command before the module's code is approved"
	case (name == "PATH" || name == "HOME") && workDir != "":
		for _, dir := range filepath.SplitList(value) {
			if d := filepath.Clean(dir); d == workDir || strings.HasPrefix(d, workDir+"/") || !filepath.IsAbs(d) {
				return "it points into the working directory, where the module's files are"
			}
			// /proc/self/cwd is the working directory under another name.
			if d := filepath.Clean(dir); d == "/proc" || strings.HasPrefix(d, "/proc/") || d == "/dev/fd" || strings.HasPrefix(d, "/dev/fd/") {
				return "it points into /proc, where the working directory has other names"
			}
		}
	}
	return ""
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
