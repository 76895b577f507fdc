package soak

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pulselb/pulselb/test/scenario"
)

// state is what the injector tells the checker: which nodes are cut off
// and since when, when the API server came back, when a controller was
// killed, which Service is being re-created; and the record of the run.
type state struct {
	e         *env
	cfg       Config
	start     time.Time
	recorders map[string]*scenario.StatusRecorder

	mu      sync.Mutex
	history []string
	// cut: node → when it was cut off; healed: node → when it was healed
	// (until it is cut again).
	cut, healed map[string]time.Time
	// apiUp is when the API server last came back; apiDown whether it is
	// being restarted.
	apiUp   time.Time
	apiDown bool
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
	// lose requests.
	windows [][2]time.Time
	// reported keeps one failure per invariant, Service and episode.
	reported map[string]bool
	injected map[Kind]int
	skipped  int
	checks   int
	failures []Failure
}

func newState(e *env, cfg Config) *state {
	return &state{e: e, cfg: cfg, recorders: map[string]*scenario.StatusRecorder{},
		cut: map[string]time.Time{}, healed: map[string]time.Time{}, absent: map[string]bool{},
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
