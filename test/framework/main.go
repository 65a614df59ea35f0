package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Main runs a test package against one shared control plane: it starts the
// plane, runs the tests, stops every process it started (also on SIGINT or
// SIGTERM) and fails the run when a process outlives it.
func Main(m *testing.M, opts Options, plane **ControlPlane) {
	if Listing() {
		os.Exit(m.Run())
	}
	os.Exit(run(m, opts, plane))
}

// Listing says the test binary only lists its tests (go test -list, as
// hack/test-suites.sh does to shard a package): nothing is built or started.
func Listing() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.list")
	return f != nil && f.Value.String() != ""
}

func run(m *testing.M, opts Options, plane **ControlPlane) int {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	cp, err := startOnFreePorts(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "control plane up in %s at %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), cp.URL(), cp.KubeconfigFile)
	*plane = cp

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "%s: stopping the control plane\n", sig)
		cp.Stop()
		os.Exit(1)
	}()

	code := m.Run()
	dir := cp.Dir
	if code != 0 {
		cp.reportFailure()
	}
	cp.Stop()
	signal.Stop(signals)
	if left := waitNoProcesses(dir, 10*time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "processes outlived the test run: %v\n", left)
		return 1
	}
	return code
}

func waitNoProcesses(dir string, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		left := ProcessesUsing(dir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startOnFreePorts starts a plane, again on other ports when one found free
// was taken before the server bound it (by the plane of a test package
// running beside this one).
func startOnFreePorts(ctx context.Context, opts Options) (*ControlPlane, error) {
	for attempt := 1; ; attempt++ {
		attemptCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cp, err := Start(attemptCtx, opts)
		cancel()
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			return cp, err
		}
		fmt.Fprintf(os.Stderr, "starting a control plane: %v; again on other ports\n", err)
	}
}
