package prober

import (
	"errors"
	"net/netip"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// LocalFailure reports whether err says the prober itself could not run
// the probe: the process or the system is out of file descriptors
// (EMFILE, ENFILE) or socket memory (ENOBUFS, ENOMEM), so the socket
// could not even be opened or used. Such a probe says nothing about the
// target. The scheduler gives it the outcome SOCKERR and counts it
// neither for nor against the target: otherwise a process at its file
// descriptor limit (an HTTP client flooding it, say) would judge every
// target Down at once.
func LocalFailure(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// localLogEvery is how often, at most, the scheduler logs probes that
// could not open a socket: at the descriptor limit every probe fails so,
// and a line per probe would flood the log.
const localLogEvery = time.Minute

// localLog logs probes that could not run, the first at once and then at
// most one line a localLogEvery with how many there were since the last.
// The scheduler's lock guards it.
type localLog struct {
	last    time.Time
	skipped int
}

func (l *localLog) note(logger klog.Logger, now time.Time, key string, addr netip.AddrPort, err error) {
	if !l.last.IsZero() && now.Sub(l.last) < localLogEvery {
		l.skipped++
		return
	}
	logger.Error(err, "Probe could not open a socket; not counted against the target, which keeps its state",
		"target", key, "address", addr, "sinceLastLog", l.skipped)
	l.last, l.skipped = now, 0
}
