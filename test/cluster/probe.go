package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// probeKind is which of a container's probes a probeState tracks.
type probeKind int

const (
	readinessProbe probeKind = iota
	livenessProbe
	startupProbe
)

func (k probeKind) String() string {
	return [...]string{"Readiness", "Liveness", "Startup"}[k]
}

// probeResult is a probe's current conclusion.
type probeResult int

const (
	probeUnknown probeResult = iota
	probeSuccess
	probeFailure
)

// probeState is the result of one probe of one container instance, as the
// kubelet keeps it: it becomes Success after successThreshold consecutive
// successes and Failure after failureThreshold consecutive failures, and is
// Unknown until then. Unknown counts as not ready and not started, but as
// alive.
type probeState struct {
	kind                               probeKind
	successThreshold, failureThreshold int32
	result                             probeResult
	last                               bool  // the latest outcome
	run                                int32 // how many outcomes in a row equal last
}

func newProbeState(kind probeKind, p *corev1.Probe) *probeState {
	s := &probeState{kind: kind, successThreshold: p.SuccessThreshold, failureThreshold: p.FailureThreshold}
	if s.successThreshold <= 0 || kind != readinessProbe {
		s.successThreshold = 1 // the API allows only 1 for liveness and startup
	}
	if s.failureThreshold <= 0 {
		s.failureThreshold = 3
	}
	return s
}

// ok is what the result means for the container: ready, alive or started.
func (s *probeState) ok() bool {
	return s.result == probeSuccess || (s.result == probeUnknown && s.kind == livenessProbe)
}

// observe records one probe outcome and reports whether the result changed.
func (s *probeState) observe(success bool) bool {
	if s.run > 0 && success == s.last {
		s.run++
	} else {
		s.last, s.run = success, 1
	}
	threshold, result := s.failureThreshold, probeFailure
	if success {
		threshold, result = s.successThreshold, probeSuccess
	}
	if s.run < threshold || s.result == result {
		return false
	}
	s.result = result
	return true
}

// probeTiming is a probe's schedule with the API's defaults applied.
func probeTiming(p *corev1.Probe) (initialDelay, period, timeout time.Duration) {
	secs := func(v, def int32) time.Duration {
		if v <= 0 {
			v = def
		}
		return time.Duration(v) * time.Second
	}
	return time.Duration(max(p.InitialDelaySeconds, 0)) * time.Second, secs(p.PeriodSeconds, 10), secs(p.TimeoutSeconds, 1)
}

// runProbes runs a container instance's probes until ctx ends (the process
// exited or the pod is going away): startup first, then readiness and
// liveness. A failed startup or liveness probe stops the process, which
// runOnce then restarts per the restart policy, like the kubelet.
func (rt *podRuntime) runProbes(ctx context.Context, pod *corev1.Pod, c corev1.Container, st *containerState, p *process, env []string, notify func()) {
	logger := klog.FromContext(ctx).WithValues("pod", rt.key, "container", c.Name)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done: // probes end with the process
			cancel()
		case <-ctx.Done():
		}
	}()
	kill := func(kind probeKind, msg string) {
		logger.Info("Probe failed, killing the container", "probe", kind.String(), "reason", msg)
		rt.mu.Lock()
		st.killedBy = kind.String() + " probe failed: " + msg
		rt.mu.Unlock()
		grace := ptrOr(pod.Spec.TerminationGracePeriodSeconds, 30)
		probe := c.LivenessProbe
		if kind == startupProbe {
			probe = c.StartupProbe
		}
		if probe.TerminationGracePeriodSeconds != nil {
			grace = *probe.TerminationGracePeriodSeconds
		}
		_ = p.stop(time.Duration(grace) * time.Second / 10)
	}
	if c.StartupProbe != nil {
		ok, msg := rt.probeLoop(ctx, pod, c, startupProbe, c.StartupProbe, env, p.cmd.Process.Pid, nil)
		if ctx.Err() != nil {
			return
		}
		if !ok {
			kill(startupProbe, msg)
			return
		}
		rt.mu.Lock()
		st.started = true
		rt.mu.Unlock()
		notify()
	}
	var wg sync.WaitGroup
	if c.ReadinessProbe != nil {
		wg.Go(func() {
			rt.probeLoop(ctx, pod, c, readinessProbe, c.ReadinessProbe, env, p.cmd.Process.Pid, func(ok bool) {
				rt.mu.Lock()
				st.ready = ok
				rt.mu.Unlock()
				notify()
			})
		})
	}
	if c.LivenessProbe != nil {
		wg.Go(func() {
			ok, msg := rt.probeLoop(ctx, pod, c, livenessProbe, c.LivenessProbe, env, p.cmd.Process.Pid, nil)
			if !ok && ctx.Err() == nil {
				kill(livenessProbe, msg)
			}
		})
	}
	wg.Wait()
}

// probeLoop probes after the initial delay and then every period. Startup
// probes return at their first result, liveness probes at a failure, and
// readiness probes run until ctx ends, calling changed on every flip. It
// returns the last result and the last failure's message. Once the pod is
// terminating, liveness and startup probes stop with success, as the
// kubelet's do; readiness probes go on.
func (rt *podRuntime) probeLoop(ctx context.Context, pod *corev1.Pod, c corev1.Container, kind probeKind, probe *corev1.Probe, env []string, pid int, changed func(bool)) (bool, string) {
	logger := klog.FromContext(ctx).WithValues("pod", rt.key, "container", c.Name, "probe", kind.String())
	s := newProbeState(kind, probe)
	initialDelay, period, timeout := probeTiming(probe)
	wait := initialDelay
	var msg string
	var terminating <-chan struct{} // nil (never) for readiness
	if kind != readinessProbe {
		terminating = rt.terminating
	}
	for {
		select {
		case <-ctx.Done():
			return s.ok(), msg
		case <-terminating:
			return true, msg
		case <-time.After(wait):
		}
		wait = period
		rt.node.mu.Lock()
		down := rt.node.down
		rt.node.mu.Unlock()
		if down {
			continue // a dead node's kubelet probes nothing
		}
		// A select with both cases ready picks either, and a probe under
		// way when the termination began ends after it: check again on
		// both sides, so that no liveness probe fails a terminating pod.
		if isClosed(terminating) {
			return true, msg
		}
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := rt.probeOnce(pctx, pod, c, probe, env, pid)
		cancel()
		if ctx.Err() != nil {
			return s.ok(), msg
		}
		if isClosed(terminating) {
			return true, msg
		}
		if err != nil {
			msg = err.Error()
			logger.V(3).Info("Probe failed", "err", err)
		}
		if !s.observe(err == nil) {
			continue
		}
		logger.V(2).Info("Probe result changed", "success", s.ok())
		switch {
		case changed != nil:
			changed(s.ok())
		case kind == startupProbe:
			return s.ok(), msg
		case kind == livenessProbe && !s.ok():
			return false, msg
		}
	}
}

// probeOnce runs one probe: a nil error is a success.
func (rt *podRuntime) probeOnce(ctx context.Context, pod *corev1.Pod, c corev1.Container, p *corev1.Probe, env []string, pid int) error {
	host := func(h string) string {
		if h == "" {
			return rt.ip
		}
		return h
	}
	switch {
	case p.Exec != nil:
		return execProbe(ctx, pid, env, p.Exec.Command)
	case p.HTTPGet != nil:
		port, err := probePort(p.HTTPGet.Port, c)
		if err != nil {
			return err
		}
		return httpProbe(ctx, rt.netns, p.HTTPGet, host(p.HTTPGet.Host), port)
	case p.TCPSocket != nil:
		port, err := probePort(p.TCPSocket.Port, c)
		if err != nil {
			return err
		}
		conn, err := dialInNetns(ctx, rt.netns, "tcp", net.JoinHostPort(host(p.TCPSocket.Host), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case p.GRPC != nil:
		return grpcProbe(ctx, rt.netns, net.JoinHostPort(rt.ip, strconv.Itoa(int(p.GRPC.Port))), ptrOrString(p.GRPC.Service))
	}
	return errors.New("probe has no handler (exec, httpGet, tcpSocket or grpc)")
}

func ptrOrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// probePort resolves a probe's port, a number or the name of a container port.
func probePort(port intstr.IntOrString, c corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		if port.IntVal <= 0 || port.IntVal > 65535 {
			return 0, fmt.Errorf("probe port %d out of range", port.IntVal)
		}
		return int(port.IntVal), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("probe port %q names no port of container %s", port.StrVal, c.Name)
}

// dialInNetns connects from inside network namespace ns (empty: the
// harness' own), as a kubelet's prober reaches a pod from its node.
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if ns == "" {
		return d.DialContext(ctx, network, addr)
	}
	var conn net.Conn
	err := RunInNamespace(ns, func() error {
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

func httpProbe(ctx context.Context, ns string, g *corev1.HTTPGetAction, host string, port int) error {
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building probe request: %w", err)
	}
	req.Header.Set("User-Agent", "kube-probe/1.37")
	req.Header.Set("Accept", "*/*")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
		} else {
			req.Header.Set(h.Name, h.Value)
		}
	}
	client := &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialInNetns(ctx, ns, network, addr)
			},
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet does not verify probe targets either
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	return nil
}

func grpcProbe(ctx context.Context, ns, addr, service string) error {
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialInNetns(ctx, ns, "tcp", addr) }))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", addr, err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return fmt.Errorf("gRPC health check of %s: %w", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("service unhealthy (responded with %q)", resp.GetStatus())
	}
	return nil
}

// execProbe runs argv inside the container's network and mount namespaces
// with its environment; exit code 0 is a success.
func execProbe(ctx context.Context, pid int, env, argv []string) error {
	if len(argv) == 0 {
		return errors.New("exec probe has no command")
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "-m", "--"}, argv...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("command %v timed out", argv)
	}
	if err != nil {
		return fmt.Errorf("command %v: %w: %s", argv, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// isClosed reports whether ch is closed; a nil ch never is.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
