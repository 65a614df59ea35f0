package framework

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// probe runs the container's startup, readiness and liveness probes as a
// kubelet does, from the host to the pod's address, while cmd runs:
// readiness sets the pod's Ready condition, a failed startup or liveness
// probe stops the container (its restartPolicy then restarts it).
// HTTP GET and TCP probes only.
func (e *Executor) probe(ctx context.Context, proc *podProcess, cmd *exec.Cmd, exited <-chan struct{}) {
	c := proc.pod.Spec.Containers[0]
	host := proc.podIP()
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if s := proc.pod.Spec.TerminationGracePeriodSeconds; s != nil {
		grace = time.Duration(*s) * time.Second
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(proc.pod))
	kill := func(which string) {
		logger.Info("Probe failed: stopping the container", "probe", which)
		stopProcess(cmd, exited, grace)
	}
	started := make(chan struct{})
	if c.StartupProbe == nil {
		close(started)
	} else {
		go probeLoop(exited, nil, c.StartupProbe, c, host, nil, func(ok bool) bool {
			if ok {
				close(started)
			} else {
				kill("startup")
			}
			return true
		})
	}
	if c.ReadinessProbe != nil {
		go probeLoop(exited, started, c.ReadinessProbe, c, host, ptrTo(false), func(ok bool) bool {
			if err := e.setReady(context.WithoutCancel(ctx), proc.pod, ok); err != nil {
				logger.Error(err, "Setting pod readiness")
			}
			return false
		})
	}
	if c.LivenessProbe != nil {
		go probeLoop(exited, started, c.LivenessProbe, c, host, ptrTo(true), func(ok bool) bool {
			if !ok {
				kill("liveness")
			}
			return !ok
		})
	}
}

// probeLoop runs p every period from its initial delay (counted from when
// after closes) until exited, and calls changed each time the verdict
// (after the success and failure thresholds) differs from the last one
// (initially state; nil: none yet); it stops when changed returns true.
func probeLoop(exited, after <-chan struct{}, p *corev1.Probe, c corev1.Container, host string, state *bool, changed func(bool) bool) {
	if after != nil {
		select {
		case <-after:
		case <-exited:
			return
		}
	}
	period := time.Duration(p.PeriodSeconds) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	successes, failures := max(p.SuccessThreshold, 1), p.FailureThreshold
	if failures == 0 {
		failures = 3
	}
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	var okRun, failRun int32
	for {
		select {
		case <-exited:
			return
		case <-time.After(wait):
		}
		wait = period
		if runProbe(p, c, host) {
			okRun, failRun = okRun+1, 0
		} else {
			okRun, failRun = 0, failRun+1
		}
		var verdict bool
		switch {
		case okRun >= successes:
			verdict = true
		case failRun >= failures:
			verdict = false
		default:
			continue
		}
		if state != nil && *state == verdict {
			continue
		}
		state = &verdict
		if changed(verdict) {
			return
		}
	}
}

// runProbe is one probe: an HTTP GET answered 200–399 (certificates not
// checked, as a kubelet does not) or a TCP connection made.
func runProbe(p *corev1.Probe, c corev1.Container, host string) bool {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	switch {
	case p.HTTPGet != nil:
		port, err := probePort(p.HTTPGet.Port, c)
		if err != nil {
			return false
		}
		scheme := "http"
		if p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		client := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), p.HTTPGet.Path))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		port, err := probePort(p.TCPSocket.Port, c)
		if err != nil {
			return false
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), timeout)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	return false // exec and gRPC probes are not run here
}

// probePort is a probe's port, by number or by the container port's name.
func probePort(port intstr.IntOrString, c corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %q", port.StrVal)
}
