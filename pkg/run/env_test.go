package run

import "testing"

// TestForbiddenEnv: what would run a command before the code gate, or make
// a module file a program, is refused; the rest is the user's.
func TestForbiddenEnv(t *testing.T) {
	tests := []struct {
		name, value string
		forbidden   bool
	}{
		{"AWS_REGION", "eu-west-1", false},
		{"TF_VAR_region", "x", false},
		{"TF_TOKEN_app_terraform_io", "t", false},
		{"GIT_TERMINAL_PROMPT", "0", false},
		{"GIT_SSH_COMMAND", "sh -c evil", true},
		{"GIT_CONFIG_COUNT", "1", true},
		{"LD_PRELOAD", "/workspace/x.so", true},
		{"TF_CLI_ARGS_init", "-plugin-dir=/workspace", true},
		{"TF_CLI_ARGS", "-no-color", true},
		{"TF_CLI_ARGS_apply", "-parallelism=1", false},
		{"TF_HTTP_ADDRESS", "http://elsewhere", true},
		{"SSH_ASKPASS", "/bin/sh", true},
		{"GODEBUG", "http2debug=2", true},
		{"TF_ENCRYPTION", `key_provider "pbkdf2" "k" { passphrase = "p" }`, false},
		{"TF_ENCRYPTION", `key_provider "external" "k" { command = ["sh"] }`, true},
		{"PATH", "/usr/local/bin:/usr/bin", false},
		{"PATH", "/workspace/bin:/usr/bin", true},
		{"PATH", "bin:/usr/bin", true},
		{"HOME", "/workspace", true},
		{"HOME", "/home/runner", false},
		{"HOME", "/proc/self/cwd", true},
		{"HOME", "/proc/1/root/workspace", true},
		{"PATH", "/usr/bin:/dev/fd/3", true},
	}
	for _, tc := range tests {
		if got := ForbiddenEnv(tc.name, tc.value, "/workspace"); (got != "") != tc.forbidden {
			t.Errorf("%s=%s: %q, want forbidden %v", tc.name, tc.value, got, tc.forbidden)
		}
	}
}
