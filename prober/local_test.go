package prober

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// socketError is the error a dial returns when the process is out of file
// descriptors: socket(2) itself failed.
func socketError(errno syscall.Errno) error {
	return fmt.Errorf("connecting: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)})
}

func TestLocalFailure(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{socketError(syscall.EMFILE), true},
		{socketError(syscall.ENFILE), true},
		{socketError(syscall.ENOBUFS), true},
		{socketError(syscall.ENOMEM), true},
		{socketError(syscall.ECONNREFUSED), false},
		{errors.New("connecting: too many open files"), false},
		{nil, false},
	} {
		if got := LocalFailure(tt.err); got != tt.want {
			t.Errorf("LocalFailure(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestSchedulerLocalFailure: a probe that could not open its socket (the
// process is out of file descriptors) is the prober's failure, not the
// target's: it is counted as SOCKERR, leaves the state, the streaks and
// the last result alone, and the target is tried again at the fast
// interval. Before, five of them failed an Up target.
func TestSchedulerLocalFailure(t *testing.T) {
	const interval, fast = time.Second, 200 * time.Millisecond
	h := newHarness(t, Config{Interval: interval, FastInterval: fast, Rise: 2, Fall: 2, Jitter: -1})
	tg := h.target("svc", 80)
	h.s.Set([]Target{tg})
	h.probe(t, interval, resUp)
	h.probe(t, fast, resUp)
	if st := h.status(t, tg.Key); st.State != StateUp {
		t.Fatalf("state %v after two successes", st.State)
	}
	local := Result{Outcome: L4CON, Err: socketError(syscall.EMFILE)}
	h.probe(t, interval, local)
	for range 4 {
		st := h.status(t, tg.Key)
		if got := st.Next.Sub(st.LastAt); st.Next.Sub(h.clk.Now()) != fast {
			t.Fatalf("after a local failure the next probe is due in %v (%v after the last result), want the fast %v", st.Next.Sub(h.clk.Now()), got, fast)
		}
		h.probe(t, fast, local)
	}
	st := h.status(t, tg.Key)
	if st.State != StateUp || st.Failures != 0 || st.Last.Outcome != L4OK || !st.FailingSince.IsZero() {
		t.Errorf("after 5 probes that could not open a socket: state %v, %d failures, last %v, failing since %v; want Up, 0, L4OK, never",
			st.State, st.Failures, st.Last.Outcome, st.FailingSince)
	}
	if st.LocalFailures != 5 || !errors.Is(st.LocalError, syscall.EMFILE) {
		t.Errorf("local failures %d (%v), want 5 with EMFILE", st.LocalFailures, st.LocalError)
	}
	if n := testutil.ToFloat64(h.m.Probes.WithLabelValues("tcp", "SOCKERR")); n != 5 {
		t.Errorf("probes_total{outcome=SOCKERR} = %v, want 5", n)
	}
	if trs := h.transitions(); len(trs) != 1 || trs[0].To != StateUp {
		t.Errorf("transitions %+v, want only the first Up", trs)
	}
	// A real failure still counts, and a probe that ran clears the
	// local failures.
	h.probe(t, fast, resDown)
	h.probe(t, fast, resDown)
	st = h.status(t, tg.Key)
	if st.State != StateDown || st.LocalFailures != 0 || st.LocalError != nil {
		t.Errorf("after two refused connections: %v, %d local failures (%v); want Down, 0", st.State, st.LocalFailures, st.LocalError)
	}
}
