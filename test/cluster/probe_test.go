package cluster

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"

	"github.com/pulselb/pulselb/test/traffic"
)

func TestProbeStateMachine(t *testing.T) {
	tests := []struct {
		name       string
		kind       probeKind
		success    int32
		failure    int32
		outcomes   string // s = success, f = failure
		wantOK     string // ok() after each outcome: 1 or 0
		wantChange string // observe's answer after each outcome: 1 or 0
	}{
		{"readiness starts not ready, one success makes it ready", readinessProbe, 1, 3, "s", "1", "1"},
		{"readiness needs failureThreshold failures in a row", readinessProbe, 1, 3, "sffsfff", "1111110", "1000001"},
		{"readiness successThreshold", readinessProbe, 2, 1, "ssfsfss", "0100001", "0110001"},
		{"readiness unknown stays not ready while failing", readinessProbe, 1, 3, "ffff", "0000", "0010"},
		{"liveness starts alive", livenessProbe, 1, 2, "f", "1", "0"},
		{"liveness dies after failureThreshold in a row", livenessProbe, 1, 2, "fsff", "1110", "0101"},
		{"liveness success threshold is always 1", livenessProbe, 5, 1, "fs", "01", "11"},
		{"startup starts not started", startupProbe, 1, 3, "ffs", "001", "001"},
		{"startup fails after failureThreshold", startupProbe, 1, 3, "fff", "000", "001"},
		{"defaults: failureThreshold 3", readinessProbe, 0, 0, "sfff", "1110", "1001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newProbeState(tt.kind, &corev1.Probe{SuccessThreshold: tt.success, FailureThreshold: tt.failure})
			var gotOK, gotChange strings.Builder
			for _, o := range tt.outcomes {
				changed := s.observe(o == 's')
				gotChange.WriteString(map[bool]string{true: "1", false: "0"}[changed])
				gotOK.WriteString(map[bool]string{true: "1", false: "0"}[s.ok()])
			}
			if gotOK.String() != tt.wantOK || gotChange.String() != tt.wantChange {
				t.Errorf("outcomes %s: ok %s changed %s, want ok %s changed %s", tt.outcomes, gotOK.String(), gotChange.String(), tt.wantOK, tt.wantChange)
			}
		})
	}
}

func TestProbeTimingDefaults(t *testing.T) {
	d, p, to := probeTiming(&corev1.Probe{})
	if d != 0 || p != 10*time.Second || to != time.Second {
		t.Errorf("defaults: delay %s period %s timeout %s, want 0s 10s 1s", d, p, to)
	}
	d, p, to = probeTiming(&corev1.Probe{InitialDelaySeconds: 2, PeriodSeconds: 3, TimeoutSeconds: 4})
	if d != 2*time.Second || p != 3*time.Second || to != 4*time.Second {
		t.Errorf("set: delay %s period %s timeout %s, want 2s 3s 4s", d, p, to)
	}
}

func TestProbePort(t *testing.T) {
	c := corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	tests := []struct {
		port    intstr.IntOrString
		want    int
		wantErr string
	}{
		{intstr.FromInt32(9090), 9090, ""},
		{intstr.FromString("http"), 8080, ""},
		{intstr.FromString("8443"), 8443, ""},
		{intstr.FromString("metrics"), 0, `"metrics" names no port of container app`},
		{intstr.FromInt32(0), 0, "out of range"},
		{intstr.FromInt32(70000), 0, "out of range"},
	}
	for _, tt := range tests {
		got, err := probePort(tt.port, c)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("probePort(%s) error %v, want one containing %q", tt.port.String(), err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("probePort(%s) = %d, %v; want %d", tt.port.String(), got, err, tt.want)
		}
	}
}

// TestProbeOnce runs each kind of probe handler against real listeners on
// loopback (the harness' own namespace).
func TestProbeOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "yes" {
			http.Error(w, "missing header", http.StatusBadRequest)
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/elsewhere", http.StatusFound) })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	port := func(url string) int32 {
		_, p, _ := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://"))
		n, _ := strconv.Atoi(p)
		return int32(n)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := int32(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()

	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()
	grpcPort := int32(gl.Addr().(*net.TCPAddr).Port)

	httpGet := func(url, path string, headers ...corev1.HTTPHeader) *corev1.Probe {
		scheme := corev1.URISchemeHTTP
		if strings.HasPrefix(url, "https") {
			scheme = corev1.URISchemeHTTPS
		}
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(port(url)), Scheme: scheme, HTTPHeaders: headers}}}
	}
	hdr := corev1.HTTPHeader{Name: "X-Probe", Value: "yes"}
	tests := []struct {
		name  string
		probe *corev1.Probe
		ok    bool
	}{
		{"http 200 with headers", httpGet(srv.URL, "/ok", hdr), true},
		{"http 400 without the header", httpGet(srv.URL, "/ok"), false},
		{"http redirect counts as success", httpGet(srv.URL, "/redirect"), true},
		{"http 503", httpGet(srv.URL, "/fail"), false},
		{"https skips verification", httpGet(tlsSrv.URL, "ok", hdr), true},
		{"http nothing listening", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(closedPort)}}}, false},
		{"tcp open", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port(srv.URL))}}}, true},
		{"tcp closed", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(closedPort)}}}, false},
		{"grpc serving", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: grpcPort, Service: ptrString("up")}}}, true},
		{"grpc not serving", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: grpcPort, Service: ptrString("down")}}}, false},
		{"no handler", &corev1.Probe{}, false},
	}
	rt := &podRuntime{k: ipv4Kubelet, ip: "127.0.0.1", node: &simNode{}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := rt.probeOnce(pctx, &corev1.Pod{}, corev1.Container{Name: "app"}, tt.probe, nil, os.Getpid())
			if (err == nil) != tt.ok {
				t.Errorf("probe succeeded %v (err %v), want %v", err == nil, err, tt.ok)
			}
		})
	}
}

func ptrString(s string) *string { return &s }

// TestExecProbe runs commands in a process' namespaces with its environment
// (needs root for nsenter).
func TestExecProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("nsenter needs root")
	}
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		argv []string
		ok   bool
	}{
		{[]string{"sh", "-c", `test "$PROBE_VAR" = here`}, true},
		{[]string{"sh", "-c", "exit 3"}, false},
		{[]string{"sleep", "5"}, false}, // times out
		{[]string{"/nonexistent/binary"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := execProbe(pctx, os.Getpid(), []string{"PATH=" + os.Getenv("PATH"), "PROBE_VAR=here"}, tt.argv)
		cancel()
		if (err == nil) != tt.ok {
			t.Errorf("exec probe %v: err %v, want success %v", tt.argv, err, tt.ok)
		}
	}
}

// TestLivenessProbeRestartsAndReadinessFollows runs a real process with a
// readiness and a liveness probe against a listener the test controls:
// readiness follows the listener, and a dead listener gets the process
// killed with the reason recorded.
func TestLivenessProbeRestartsAndReadinessFollows(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := startSleeper(ctx, t)

	healthy := make(chan bool, 1)
	healthy <- true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ok := <-healthy
		healthy <- ok
		if !ok {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	_, ps, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	port, _ := strconv.Atoi(ps)
	set := func(ok bool) { <-healthy; healthy <- ok }

	probe := func(failures int32) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: failures,
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(port))}}}
	}
	c := corev1.Container{Name: "app", ReadinessProbe: probe(1), LivenessProbe: probe(3)}
	pr := startProbes(ctx, t, c, p)
	rt, st, ready, waitFor, done := pr.rt, pr.st, pr.ready, pr.waitFor, pr.done
	waitFor("ready", ready)
	set(false)
	waitFor("not ready", func() bool { return !ready() })
	if p.exited() {
		t.Fatal("killed after one failure; the liveness probe's failureThreshold is 3")
	}
	waitFor("the process killed by the liveness probe", p.exited)
	<-done
	rt.mu.Lock()
	killedBy := st.killedBy
	rt.mu.Unlock()
	if !strings.HasPrefix(killedBy, "Liveness probe failed: HTTP probe failed with statuscode: 500") {
		t.Errorf("killedBy = %q, want the liveness probe's failure", killedBy)
	}
	if code := exitCode(p); code != 128+15 {
		t.Errorf("exit code %d, want 143 (SIGTERM)", code)
	}
}

// TestStartupProbeGates runs a real process with a startup probe: a
// failing one kills the process, a passing one marks it started, and only
// then do the readiness probes begin.
func TestStartupProbeGates(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	open := acceptingListener(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	tcp := func(port, failures int) *corev1.Probe {
		return &corev1.Probe{PeriodSeconds: 1, FailureThreshold: int32(failures),
			ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
	}
	tests := []struct {
		name        string
		startup     *corev1.Probe
		wantStarted bool
		wantKilled  string
	}{
		{"passing startup probe", tcp(open.Addr().(*net.TCPAddr).Port, 2), true, ""},
		{"failing startup probe", tcp(closedPort, 2), false, "Startup probe failed: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startSleeper(ctx, t)
			// Readiness passes at once, but must wait for startup.
			c := corev1.Container{Name: "app", StartupProbe: tt.startup, ReadinessProbe: tcp(open.Addr().(*net.TCPAddr).Port, 1)}
			st := &containerState{running: true}
			rt := &podRuntime{k: ipv4Kubelet, key: "default/p", ip: "127.0.0.1", node: &simNode{}, containers: map[string]*containerState{"app": st}}
			pctx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				rt.runProbes(pctx, &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptrInt64(1)}}, c, st, p, nil, func() {})
			}()
			deadline := time.Now().Add(6 * time.Second)
			for {
				rt.mu.Lock()
				started, ready, killedBy := st.started, st.ready, st.killedBy
				rt.mu.Unlock()
				if ready && !started {
					t.Fatal("ready before the startup probe passed")
				}
				if tt.wantStarted && started && ready || !tt.wantStarted && p.exited() {
					if !strings.HasPrefix(killedBy, tt.wantKilled) || (tt.wantKilled == "") != (killedBy == "") {
						t.Errorf("killedBy %q, want prefix %q", killedBy, tt.wantKilled)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("timed out: started %v ready %v exited %v killedBy %q", started, ready, p.exited(), killedBy)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if tt.wantStarted && p.exited() {
				t.Error("a passing startup probe killed the process")
			}
			cancel()
			<-done
		})
	}
}

// TestStatusReadyFollowsProbes checks the pod conditions the runtime
// reports from its containers' probe results.
func TestStatusReadyFollowsProbes(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}
	tests := []struct {
		name                string
		a, b                containerState
		wantReady           corev1.ConditionStatus
		wantStartedA, wantA bool
	}{
		{"all running, started and ready", containerState{running: true, started: true, ready: true}, containerState{running: true, started: true, ready: true}, corev1.ConditionTrue, true, true},
		{"one not ready", containerState{running: true, started: true, ready: false}, containerState{running: true, started: true, ready: true}, corev1.ConditionFalse, true, false},
		{"one not started", containerState{running: true, started: false, ready: true}, containerState{running: true, started: true, ready: true}, corev1.ConditionFalse, false, false},
		{"one not running", containerState{finished: true, started: true, ready: true}, containerState{running: true, started: true, ready: true}, corev1.ConditionFalse, false, false},
	}
	t.Run("readiness gate", func(t *testing.T) {
		gated := pod.DeepCopy()
		gated.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
		up := containerState{running: true, started: true, ready: true}
		a, b := up, up
		rt := &podRuntime{k: ipv4Kubelet, ip: "198.18.129.2", node: &simNode{internalIP: "198.18.1.1"}, initDone: true,
			containers: map[string]*containerState{"a": &a, "b": &b}}
		for _, gate := range []corev1.ConditionStatus{"", corev1.ConditionFalse, corev1.ConditionTrue} {
			gated.Status.Conditions = nil
			if gate != "" {
				gated.Status.Conditions = []corev1.PodCondition{{Type: "example.com/lb", Status: gate}}
			}
			want := corev1.ConditionFalse
			if gate == corev1.ConditionTrue {
				want = corev1.ConditionTrue
			}
			for _, c := range rt.status(gated).Conditions {
				if c.Type == corev1.PodReady && c.Status != want {
					t.Errorf("gate %q: PodReady %s, want %s", gate, c.Status, want)
				}
			}
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tt.a, tt.b
			rt := &podRuntime{k: ipv4Kubelet, ip: "198.18.129.2", node: &simNode{internalIP: "198.18.1.1"}, initDone: true,
				containers: map[string]*containerState{"a": &a, "b": &b}}
			st := rt.status(pod)
			var ready corev1.ConditionStatus
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status
				}
			}
			if ready != tt.wantReady {
				t.Errorf("PodReady %s, want %s", ready, tt.wantReady)
			}
			cs := st.ContainerStatuses[0]
			if *cs.Started != tt.wantStartedA || cs.Ready != tt.wantA {
				t.Errorf("container a started %v ready %v, want %v %v", *cs.Started, cs.Ready, tt.wantStartedA, tt.wantA)
			}
		})
	}
}

// probeRun is a container's probes running in the background, as runOnce
// runs them, for the probe tests.
type probeRun struct {
	rt    *podRuntime
	st    *containerState
	done  chan struct{} // closed when runProbes returned
	ready func() bool
	// waitFor waits up to 10 s for cond, looking again on every status
	// change the probes report.
	waitFor func(what string, cond func() bool)
}

// startProbes runs container c's probes against process p until ctx ends
// or p exits.
func startProbes(ctx context.Context, t *testing.T, c corev1.Container, p *process) *probeRun {
	t.Helper()
	st := &containerState{running: true, started: true}
	r := &probeRun{rt: newTestRuntime(map[string]*containerState{c.Name: st}), st: st, done: make(chan struct{})}
	notified := make(chan struct{}, 100)
	go func() {
		defer close(r.done)
		r.rt.runProbes(ctx, &corev1.Pod{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptrInt64(1)}}, c, st, p, nil, func() { notified <- struct{}{} })
	}()
	r.ready = func() bool {
		r.rt.mu.Lock()
		defer r.rt.mu.Unlock()
		return st.ready
	}
	r.waitFor = func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			select {
			case <-notified:
			case <-p.done:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return r
}

// newTestRuntime is a runtime of a pod on a node with the given
// containers, for tests that call its methods directly.
func newTestRuntime(containers map[string]*containerState) *podRuntime {
	return &podRuntime{k: ipv4Kubelet, key: "default/p", ip: "127.0.0.1", node: &simNode{internalIP: "198.18.1.1"}, initDone: true,
		terminating: make(chan struct{}), kill: make(chan struct{}), containers: containers}
}

// startSleeper starts a process that sleeps for a minute, stopped when
// the test ends.
func startSleeper(ctx context.Context, t *testing.T) *process {
	t.Helper()
	dir := t.TempDir()
	p, err := startCommand(ctx, newRecord(dir), dir, "sleeper", nil, "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop(time.Second) })
	return p
}

// acceptingListener listens on loopback and closes every connection it
// accepts (a TCP probe's success), until it is closed or the test ends.
func acceptingListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go traffic.Serve(l, nil)
	return l
}

// ipv4Kubelet is the simulator of an IPv4-only cluster (the default
// Options) that the podRuntimes under test belong to.
var ipv4Kubelet = &kubelet{c: &Cluster{}}
