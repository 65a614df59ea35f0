// Command walk instruments a copy of CAPTF's pkg tree so that every
// function records the file it is in when it starts and when it returns,
// for hack/walk.sh to count how a sync moves between files: its stays (a
// run of steps in one file), rooms (files) and returns (stays in a file
// the walk had left before). It rewrites the tree in place: run it on a
// scratch copy only.
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

const (
	module = "github.com/captf/captf"
	alias  = "captfwalk"
)

// skipped are the trees whose functions are not steps of a sync's walk:
// generated code, the API types' deep copies, and the tracer itself.
var skipped = []string{"pkg/generated", "pkg/apis", "pkg/walktrace"}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: walk ROOT (a scratch copy of the repository)")
		os.Exit(2)
	}
	root := os.Args[1]
	if err := writeTracer(root); err != nil {
		fail(err)
	}
	n := 0
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, s := range skipped {
			if rel == s {
				return filepath.SkipDir
			}
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		ok, err := instrument(path, rel)
		if ok {
			n++
		}
		return err
	})
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "walk: instrumented %d files\n", n)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "walk:", err)
	os.Exit(1)
}

// instrument adds, as the first statement of every function with a body,
// a deferred call that records entering and leaving rel.
func instrument(path, rel string) (bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return false, err
	}
	var at []int
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
			at = append(at, fset.Position(fd.Body.Lbrace).Offset+1)
		}
	}
	if len(at) == 0 {
		return false, nil
	}
	sort.Ints(at)
	var out bytes.Buffer
	nameEnd := fset.Position(f.Name.End()).Offset
	out.Write(src[:nameEnd])
	fmt.Fprintf(&out, "\n\nimport %s %q\n", alias, module+"/pkg/walktrace")
	last := nameEnd
	for _, off := range at {
		out.Write(src[last:off])
		fmt.Fprintf(&out, " defer %s.Enter(%q)();", alias, filepath.ToSlash(rel))
		last = off
	}
	out.Write(src[last:])
	return true, os.WriteFile(path, out.Bytes(), 0o644)
}

func writeTracer(root string) error {
	dir := filepath.Join(root, "pkg", "walktrace")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "walktrace.go"), []byte(tracer), 0o644)
}

// tracer is the package the instrumented functions call: it records, on
// the goroutine that called Start only, the file the walk is in after
// each step (a function's start, its return).
const tracer = `// Package walktrace records a walk through CAPTF's files (hack/walk.sh).
package walktrace

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

var (
	mu      sync.Mutex
	on      bool
	gid     uint64
	stack   []string
	rooms   []string
)

func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// Start records the walk of the calling goroutine from now on.
func Start() {
	mu.Lock()
	defer mu.Unlock()
	on, gid, stack, rooms = true, goid(), nil, nil
}

// Stop ends the walk and returns the file it was in after each step.
func Stop() []string {
	mu.Lock()
	defer mu.Unlock()
	on = false
	return rooms
}

// Enter records a step into file, and returns the step back out.
func Enter(file string) func() {
	mu.Lock()
	defer mu.Unlock()
	if !on || goid() != gid {
		return func() {}
	}
	stack = append(stack, file)
	rooms = append(rooms, file)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if !on || len(stack) == 0 {
			return
		}
		stack = stack[:len(stack)-1]
		if len(stack) > 0 {
			rooms = append(rooms, stack[len(stack)-1])
		}
	}
}
`
