package soak

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pulselb/pulselb/test/scenario"
)

// state is what the injector tells the checker: which nodes are cut off
// or in maintenance and since when, when the control plane came back,
// when a controller was killed, which Service is being re-created; and
// the record of the run.
type state struct {
	e         *env
	cfg       Config
	start     time.Time
	recorders map[string]*scenario.StatusRecorder
	// addrs follows which pod addresses were proxy pods'.
	addrs *podAddresses

	// slot is held by the fault that cuts a node off, partitions two or
	// puts one in maintenance: one at a time (see Schedule).
	slot sync.Mutex

	mu      sync.Mutex
	history []string
	// cut: node → when it was cut off; healed: node → when it was healed
	// or out of maintenance (until it is cut again).
	cut, healed map[string]time.Time
	// maintained are the nodes in maintenance.
	maintained map[string]bool
	// controlUp is when the control plane last came back: the API server
	// restarted, etcd continued, the controllers rolled; stalled counts
	// those under way, during which no status can follow.
	controlUp time.Time
	stalled   int
	// voting follows whether a quorum of probers can vote on each node
	// cut off.
	voting voters
	// leaderKilled is when the leading controller was last killed: no
	// controller writes a status until the standby takes the Lease.
	leaderKilled time.Time
	// pending: the Services that published a cut node's address when it
	// was cut, by "node/service", with the cut's time, until the address
	// leaves; back: the same for a healed node until it is back in the
	// daemonset Service's status.
	pending, back map[string]time.Time
	// Failovers and Returns are how long addresses took to leave after a
	// cut and to come back after a heal.
	failovers, returns []time.Duration
	// absent: Services deleted and not yet re-created; published:
	// Services whose status had addresses since their creation.
	absent, published map[string]bool
	// windows are the spans after unplanned faults where a client may
	// lose requests; planned the spans of planned changes, where it may
	// not.
	windows, planned [][2]time.Time
	// image is the image pulselb runs, changed by each Upgrade.
	image string
	// reported keeps one failure per invariant, Service and episode.
	reported map[string]bool
	// samples are the components' metrics over the run.
	samples  []sample
	injected map[Kind]int
	skipped  int
	checks   int
	failures []Failure
}

func newState(e *env, cfg Config) *state {
	return &state{e: e, cfg: cfg, recorders: map[string]*scenario.StatusRecorder{},
		cut: map[string]time.Time{}, voting: voters{}, healed: map[string]time.Time{}, maintained: map[string]bool{}, absent: map[string]bool{}, image: Image,
		published: map[string]bool{}, pending: map[string]time.Time{}, back: map[string]time.Time{}, reported: map[string]bool{}, injected: map[Kind]int{}}
}

// since is the offset of t in the run.
func (s *state) since(t time.Time) time.Duration { return t.Sub(s.start).Round(time.Millisecond) }

// event records what happened in the history and the log.
func (s *state) event(format string, args ...any) {
	msg := fmt.Sprintf("+%s %s", s.since(time.Now()), fmt.Sprintf(format, args...))
	s.mu.Lock()
	s.history = append(s.history, msg)
	s.mu.Unlock()
	s.cfg.Logf("%s", msg)
}

// fail records a broken invariant once per key.
func (s *state) fail(key, invariant, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reported[key] {
		return
	}
	s.reported[key] = true
	h := s.history[max(0, len(s.history)-12):]
	f := Failure{Invariant: invariant, At: s.since(time.Now()), Detail: detail, History: slices.Clone(h)}
	s.failures = append(s.failures, f)
	s.cfg.Logf("INVARIANT BROKEN: %s", f)
}

// stall marks the control plane stalled (an API server restart, etcd
// paused, the controllers rolling) until the returned function is called.
func (s *state) stall() (resume func()) {
	s.mu.Lock()
	s.stalled++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.stalled--
		s.controlUp = time.Now()
		s.mu.Unlock()
	}
}

// takeSlot takes the node slot for f, waiting (and saying so) while
// another fault holds it; the returned function gives it back.
func (s *state) takeSlot(f Fault) (release func()) {
	if !s.slot.TryLock() {
		s.event("%s waits for the node fault before it to end", f)
		s.slot.Lock()
	}
	return s.slot.Unlock
}

// window opens a span in which clients may lose requests: from start to
// the fault's end plus detection and the DNS TTL.
func (s *state) window(start, end time.Time, leader bool) {
	w := end.Add(s.cfg.FailoverBound + dnsTTL + 2*time.Second)
	if leader {
		w = w.Add(s.cfg.LeaderBound)
	}
	s.mu.Lock()
	s.windows = append(s.windows, [2]time.Time{start, w})
	s.mu.Unlock()
}
