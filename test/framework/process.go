package framework

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// process is a child process of the test binary. It dies with its parent
// (Pdeathsig), even when the test binary is killed.
type process struct {
	name    string
	cmd     *exec.Cmd
	logFile string
	done    chan struct{}
	err     error
}

func startProcess(name, logDir, binary string, args []string, env []string) (*process, error) {
	logFile := filepath.Join(logDir, name+".log")
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// tail returns the last lines of the process's log, for error messages.
func (p *process) tail(lines int) string {
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// FreePorts returns n distinct free TCP ports on loopback for servers the
// framework starts. They come from below the kernel's ephemeral range
// (ip_local_port_range, 32768 and up here), where a port found free cannot
// be taken by an outgoing connection before the server binds it, and never
// twice in one test binary.
func FreePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for attempts := 0; len(ports) < n; attempts++ {
		if attempts > 10000 {
			return nil, fmt.Errorf("no free port in %d-%d", firstPort, lastPort)
		}
		p := firstPort + rand.IntN(lastPort-firstPort)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		l.Close()
		portsGiven[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

const firstPort, lastPort = 20000, 32000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// ProcessesUsing lists the PIDs of processes whose command line or working
// directory mentions dir: what a test run leaves behind when it leaks.
func ProcessesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

var errNotReady = errors.New("not ready")

// Consistently checks check every 100ms for d and returns its first error:
// a "nothing happens" check that also catches what happens late, where a
// sleep and one look would catch only what is there at the end.
func Consistently(d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		if err := check(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CannotCheck reports a check this machine cannot make, and why: on CI
// (CI set, as .ci/run sets it) that fails the test, for a check that
// should run must not pass by being skipped; elsewhere it is logged.
func CannotCheck(t testing.TB, what string, why error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Errorf("%s cannot be checked on this CI machine: %v", what, why)
		return
	}
	t.Logf("NOT CHECKED: %s, on this machine: %v (with CI set this fails)", what, why)
}
