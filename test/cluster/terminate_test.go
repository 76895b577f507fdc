package cluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
)

func TestTerminationGrace(t *testing.T) {
	tests := []struct {
		name          string
		deletion, pod *int64
		want          time.Duration
	}{
		{"the deletion's grace period wins", ptrInt64(3), ptrInt64(40), 3 * time.Second},
		{"a force deletion kills at once", ptrInt64(0), ptrInt64(40), 0},
		{"else the pod's", nil, ptrInt64(40), 40 * time.Second},
		{"else the API server's default", nil, nil, 30 * time.Second},
		{"never scaled, never negative", ptrInt64(-1), nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: tt.deletion},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: tt.pod}}
			if got := terminationGrace(pod); got != tt.want {
				t.Errorf("terminationGrace = %s, want %s", got, tt.want)
			}
		})
	}
}

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestBeginTermination checks the grace period's clock: SIGKILL is due
// when it ends, a later deletion with a longer grace period does not push
// it back, and one with a shorter grace period brings it forward.
func TestBeginTermination(t *testing.T) {
	rt := newTestRuntime(nil)
	if rt.isTerminating() {
		t.Fatal("terminating before termination began")
	}
	if !rt.beginTermination(time.Hour) {
		t.Fatal("the first beginTermination did not report starting the termination")
	}
	if !rt.isTerminating() {
		t.Fatal("not terminating after beginTermination")
	}
	if rt.beginTermination(2 * time.Hour) {
		t.Error("a second beginTermination reported starting it again")
	}
	if closedWithin(rt.kill, 100*time.Millisecond) {
		t.Fatal("kill closed long before the grace period ended")
	}
	rt.beginTermination(50 * time.Millisecond)
	if !closedWithin(rt.kill, 5*time.Second) {
		t.Fatal("a shorter grace period did not bring SIGKILL forward")
	}
	// Once killed, any further deletion is harmless.
	rt.beginTermination(0)
}

// TestStopWhenWaitsForKill runs real processes: one that exits on SIGTERM
// is gone before SIGKILL is due; one that ignores SIGTERM (as a draining
// proxy does) runs until kill is closed.
func TestStopWhenWaitsForKill(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	tests := []struct {
		name       string
		script     string
		wantSignal int32
		wantEarly  bool
	}{
		{"exits on SIGTERM", "echo started; exec sleep 60", 128 + 15, true},
		{"ignores SIGTERM until SIGKILL", "trap '' TERM; echo started; while :; do sleep 0.05; done", 128 + 9, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := startCommand(ctx, newRecord(dir), dir, "proc", nil, "sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			// Signal the shell only once its trap is installed.
			deadline := time.Now().Add(10 * time.Second)
			for {
				if b, _ := os.ReadFile(filepath.Join(dir, "proc.log")); strings.Contains(string(b), "started") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the shell never started")
				}
				time.Sleep(10 * time.Millisecond)
			}
			kill := make(chan struct{})
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				_ = p.stopWhen(kill)
			}()
			early := closedWithin(p.done, time.Second)
			close(kill)
			<-stopped
			if early != tt.wantEarly {
				t.Errorf("exited before kill: %v, want %v", early, tt.wantEarly)
			}
			if code := exitCode(p); code != tt.wantSignal {
				t.Errorf("exit code %d, want %d", code, tt.wantSignal)
			}
		})
	}
}

// TestStatusWhileTerminating checks what a terminating pod reports: a
// running container keeps the readiness its probe gives it, a stopped one
// is Terminated (not waiting for a restart), and once every container has
// stopped the phase is terminal.
func TestStatusWhileTerminating(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}
	exited := func(code int32) containerState {
		return containerState{finished: true, started: true, exitCode: code,
			lastExit: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason(code)}}
	}
	running := containerState{running: true, started: true, ready: true}
	tests := []struct {
		name      string
		a, b      containerState
		terminal  bool
		wantReady corev1.ConditionStatus
		wantPhase corev1.PodPhase
	}{
		{"both still running and ready", running, running, false, corev1.ConditionTrue, corev1.PodRunning},
		{"one stopped", exited(0), running, false, corev1.ConditionFalse, corev1.PodRunning},
		{"all stopped cleanly", exited(0), exited(0), true, corev1.ConditionFalse, corev1.PodSucceeded},
		{"one killed", exited(0), exited(137), true, corev1.ConditionFalse, corev1.PodFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := tt.a, tt.b
			rt := newTestRuntime(map[string]*containerState{"a": &a, "b": &b})
			rt.beginTermination(time.Hour)
			rt.terminal = tt.terminal
			st := rt.status(pod)
			if st.Phase != tt.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tt.wantPhase)
			}
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady && c.Status != tt.wantReady {
					t.Errorf("PodReady %s, want %s", c.Status, tt.wantReady)
				}
			}
			for i, s := range []containerState{a, b} {
				cs := st.ContainerStatuses[i]
				if s.finished && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != s.exitCode || cs.State.Waiting != nil) {
					t.Errorf("container %s state %+v, want terminated with exit code %d", cs.Name, cs.State, s.exitCode)
				}
			}
		})
	}
}

// TestProbesWhileTerminating runs a real process with liveness and
// readiness probes against a port that stops answering once the pod
// terminates: the liveness probe no longer runs (the process is not
// killed) while the readiness probe goes on and turns the container not
// ready, as with kubelet v1.37.
func TestProbesWhileTerminating(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := startSleeper(ctx, t)
	l := acceptingListener(t)
	port := l.Addr().(*net.TCPAddr).Port
	probe := &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1,
		ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
	c := corev1.Container{Name: "app", ReadinessProbe: probe, LivenessProbe: probe}
	pctx, cancel := context.WithCancel(ctx)
	pr := startProbes(pctx, t, c, p)
	rt, ready, waitFor := pr.rt, pr.ready, pr.waitFor
	waitFor("ready", ready)
	rt.beginTermination(time.Hour)
	l.Close()
	waitFor("not ready once the port stopped answering", func() bool { return !ready() })
	// A liveness probe with failureThreshold 1 would have killed it by now.
	if p.exited() {
		t.Error("the liveness probe killed a terminating container")
	}
	cancel()
	<-pr.done
}
