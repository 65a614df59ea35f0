package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/captf/captf/pkg/logflags"
	"github.com/captf/captf/pkg/retry"
	"github.com/captf/captf/pkg/run"
)

// Main is `captf runner`. The Job passes the object and operation as flags
// and the pod's identity through the downward API.
func Main(args []string) error {
	started := clock.RealClock{}.Now()
	writeKey, err := takeWriteKey()
	if err != nil {
		return err
	}
	// Checked again with the rest of the environment later, but that is
	// after requests: GODEBUG may have the first one log its headers.
	if v, ok := os.LookupEnv("GODEBUG"); ok {
		return fmt.Errorf("the runner's environment sets GODEBUG=%q (spec.jobs.envFrom, or the image): %s", v, run.ForbiddenEnv("GODEBUG", v, ""))
	}
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	logs := logflags.Bind(fs)
	var c Config
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := logs.Apply(); err != nil {
		return err
	}
	if err := c.Complete(); err != nil {
		return err
	}
	c.Pod, c.PodUID = os.Getenv("POD_NAME"), types.UID(os.Getenv("POD_UID"))
	if c.Pod == "" {
		return errors.New("env POD_NAME is required")
	}
	if c.WorkDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		c.WorkDir = wd
	}
	cfg, err := clientConfig(writeKey)
	if err != nil {
		return fmt.Errorf("API client config: %w", err)
	}
	cfg.UserAgent = "captf-runner"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	logger := klog.Background().WithValues("object", klog.KRef(c.Namespace, c.ObjectName), "operation", c.Operation)
	ctx := klog.NewContext(context.Background(), logger)
	r := &Runner{Config: c, Client: client, Log: os.Stderr, Clock: clock.RealClock{}}
	res, err := r.Run(ctx)
	// The runner's own time is what it costs beyond terraform's: its start,
	// the lock, the state's claim, the result (docs/scaling.md).
	took := r.Clock.Since(started)
	tfTime, tfRuns := r.TerraformTime()
	logger.Info("Run ended", "outcome", res.Outcome, "took", took.Round(time.Millisecond), "terraformCommands", tfRuns,
		"terraformTime", tfTime.Round(time.Millisecond), "ownTime", (took - tfTime).Round(time.Millisecond),
		"terraformCPU", r.TerraformCPU().Round(time.Millisecond), "ownCPU", ownCPU(logger).Round(time.Millisecond))
	summary := fmt.Sprintf("%s %s", c.Operation, res.Outcome)
	if res.Error != "" {
		summary += ": " + res.Error
	}
	// The pod's termination message: what `kubectl describe` shows.
	// Only inside a container: never create the file on a host.
	if f, ferr := os.OpenFile("/dev/termination-log", os.O_WRONLY|os.O_TRUNC, 0); ferr == nil {
		_, _ = f.WriteString(excerptTerm(summary))
		_ = f.Close()
	}
	klog.Flush()
	return err
}

func excerptTerm(s string) string {
	if len(s) > 4000 {
		return s[:4000]
	}
	return s
}

// clientConfig talks to the runner API in a Job's pod. Run by hand (to
// recover a state, say), the runner uses the usual in-cluster config or
// kubeconfig, with the rights of whoever runs it.
func clientConfig(writeKey string) (*rest.Config, error) {
	if host := os.Getenv(run.EnvRunnerAPI); host != "" {
		// JSON: the runner API reads the bodies it forwards.
		cfg := &rest.Config{Host: host, BearerTokenFile: run.TokenFile, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
		cfg.CAData = []byte(os.Getenv(run.EnvRunnerAPICA))
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return &redial{next: &withWriteKey{key: writeKey, next: rt}}
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	}
	return cfg, err
}

// withWriteKey sends the Job's write key with every request.
type withWriteKey struct {
	key  string
	next http.RoundTripper
}

func (w *withWriteKey) RoundTrip(req *http.Request) (*http.Response, error) {
	if w.key == "" {
		return w.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set(run.HeaderWriteKey, w.key)
	return w.next.RoundTrip(req)
}

// takeWriteKey takes the Job's write key before anything runs that is not
// the runner's own: the key leaves the environment every child inherits,
// and the process becomes undumpable, so that no process of the same user
// (the module's code) reads the key from its memory or its /proc files.
func takeWriteKey() (string, error) {
	key := os.Getenv(run.EnvWriteKey)
	if err := os.Unsetenv(run.EnvWriteKey); err != nil {
		return "", err
	}
	if err := undumpable(); err != nil {
		return "", fmt.Errorf("making the runner undumpable: %w", err)
	}
	return key, nil
}

// undumpable makes the process undumpable (prctl PR_SET_DUMPABLE 0): its
// memory, environment and file descriptors are then the root user's to
// read, not the processes it starts.
func undumpable() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// redial retries a request whose connection could not even be made (the
// request never reached the manager, so sending it again is safe; a state
// write is fenced by its resourceVersion in any case), and a read whose
// connection was lost before its answer.
type redial struct {
	next http.RoundTripper
}

func (r *redial) RoundTrip(req *http.Request) (*http.Response, error) {
	var wait retry.Backoff
	for {
		resp, err := r.next.RoundTrip(req)
		var op *net.OpError
		dial := errors.As(err, &op) && op.Op == "dial"
		if err == nil || !(dial || req.Method == http.MethodGet && retry.ConnectionCut(err)) {
			return resp, err
		}
		klog.FromContext(req.Context()).V(2).Info("The runner API is not reachable; retrying", "err", err, "in", wait.Next())
		if !wait.Sleep(req.Context()) {
			return nil, req.Context().Err()
		}
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, berr
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// ownCPU is the CPU time (user and system) the runner's process has used:
// with terraformCPU in its last line, where a pod's CPU went.
func ownCPU(logger klog.Logger) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		logger.Error(err, "Reading the runner's CPU time")
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
