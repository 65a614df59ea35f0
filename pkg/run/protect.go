package run

import (
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
)

// maxProtectedNamed bounds the protected addresses a Plan names.
const maxProtectedNamed = 20

// Protects reports whether pattern (an entry of spec.protect) covers
// address: the address itself, or anything inside it (an instance of a
// resource, a resource of a module), where * stands for any run of
// characters.
func Protects(pattern, address string) bool {
	if globMatch(pattern, address) {
		return true
	}
	// Inside it: the address goes on with an index or a nested address.
	for i := 1; i < len(address); i++ {
		if (address[i] == '.' || address[i] == '[') && globMatch(pattern, address[:i]) {
			return true
		}
	}
	return false
}

// globMatch matches s against a pattern where * is any run of characters
// and every other character stands for itself (unlike path.Match, [ and ]
// are an address's index brackets, not a class).
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}

// ProtectedBy reports whether any of patterns covers address.
func ProtectedBy(patterns []string, address string) bool {
	for _, p := range patterns {
		if Protects(p, address) {
			return true
		}
	}
	return false
}

// protectedChanges are the addresses of p that a destroy, replace or forget
// touches and patterns cover: at most maxProtectedNamed, in plan order.
func protectedChanges(p *tfjson.Plan, patterns []string) []string {
	if len(patterns) == 0 {
		return nil
	}
	var out []string
	for _, rc := range p.ResourceChanges {
		if rc.Change == nil || len(out) == maxProtectedNamed {
			continue
		}
		// A moved resource is judged by where it was too: a moved block
		// must not take it out of its pattern, in this plan or the next.
		moved := rc.PreviousAddress != "" && rc.PreviousAddress != rc.Address
		switch {
		case destroys(rc.Change.Actions) && ProtectedBy(patterns, rc.Address):
			out = append(out, rc.Address)
		case moved && ProtectedBy(patterns, rc.PreviousAddress) && (destroys(rc.Change.Actions) || !ProtectedBy(patterns, rc.Address)):
			out = append(out, rc.PreviousAddress)
		}
	}
	return out
}

// destroys tells whether actions delete or forget the resource, alone or
// in a replace (delete and create, create and delete, create and forget).
func destroys(actions tfjson.Actions) bool {
	for _, a := range actions {
		if a == tfjson.ActionDelete || a == tfjson.ActionForget {
			return true
		}
	}
	return false
}
