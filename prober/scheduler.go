package prober

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pulselb/pulselb/api/probespec"
)

// State is what the scheduler concluded about a target after hysteresis.
type State uint8

// States. A target is Unknown until Rise successes or Fall failures in a row.
const (
	StateUnknown State = iota
	StateUp
	StateDown

	stateCount
)

var stateNames = [...]string{StateUnknown: "Unknown", StateUp: "Up", StateDown: "Down"}

// String returns "Unknown", "Up" or "Down".
func (s State) String() string {
	if s < stateCount {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText encodes the state as its name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a state name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown state %q", b)
}

// Scheduler defaults, applied to zero Config fields.
const (
	DefaultFastInterval = 200 * time.Millisecond
	DefaultJitter       = 0.1
	DefaultConcurrency  = 256
	DefaultCoalesce     = 10 * time.Millisecond
)

// Bounds of the adaptive timeout.
const (
	MinAdaptiveTimeout = 200 * time.Millisecond
	MaxAdaptiveTimeout = 2 * time.Second
	// rtoFactor is the safety margin over the TCP-style retransmission
	// timeout: a healthy target whose latency merely wobbles must not time out.
	rtoFactor = 3
)

// Target is one thing to probe periodically.
type Target struct {
	// Key identifies the target across calls to Set, such as "ns/svc:80@node-a".
	Key  string
	Addr netip.AddrPort
	// Protocol labels the target's metrics.
	Protocol probespec.Protocol
	Prober   Prober
	// Interval is the time between probe starts; 0 means Config.Interval.
	Interval time.Duration
	// Timeout bounds each probe; 0 means adaptive from the observed RTT.
	Timeout time.Duration
	// Rise and Fall are how many successes or failures in a row change the
	// state; 0 means Config.Rise or Config.Fall.
	Rise, Fall int
}

// Transition is a change of a target's state.
type Transition struct {
	Key      string
	From, To State
	// Result is the probe result that caused the change.
	Result Result
	At     time.Time
}

// TargetStatus is what the scheduler knows about one target.
type TargetStatus struct {
	Key   string
	Addr  netip.AddrPort
	State State
	// Since is when the scheduler started probing the target (its first Set).
	Since time.Time
	// LastChange is when State last changed; zero while it never has.
	LastChange time.Time
	// Last is the latest probe result, finished at LastAt; zero before the
	// first probe.
	Last   Result
	LastAt time.Time
	// RTT is the smoothed duration of successful probes; zero before one.
	RTT time.Duration
	// Successes and Failures are the current streaks; at most one is non-zero.
	Successes, Failures int
	// Next is when the next probe is due; zero while a probe is in flight.
	Next time.Time
	// Timeout is what the next probe's timeout would be now.
	Timeout time.Duration
	// FailingSince is when the current run of failed probes began: the
	// start of the first of them. It is zero when the latest probe
	// succeeded or none has finished. It survives the change to Down,
	// so a report shows how long a target has really been failing.
	FailingSince time.Time
	// LocalFailures counts the latest probes in a row that could not run
	// because the prober could not open its socket (LocalFailure), and
	// LocalError is the last one's error; zero and nil once a probe ran.
	// Such probes change nothing else: State, the streaks, Last and
	// FailingSince are those of the last probe that ran.
	LocalFailures int
	LocalError    error
	// CertNotAfter is the NotAfter of the leaf certificate of the latest
	// probe that completed a TLS handshake, kept while later probes fail so
	// a target that is down still shows when its certificate expires. It
	// is zero before such a probe and after Set replaced the Prober,
	// which may probe another name, port or protocol.
	CertNotAfter time.Time
}

// Config tunes a Scheduler. Zero fields take the documented defaults.
type Config struct {
	// Interval is the time between probe starts of a target (default 1s).
	Interval time.Duration
	// FastInterval is used instead after a result that disagrees with the
	// state and while the state is Unknown, so a first failure is confirmed
	// quickly (default 200ms, never more than the target's interval).
	FastInterval time.Duration
	// Rise and Fall default to 2 and 2.
	Rise, Fall int
	// Jitter spreads each due time by up to ±Jitter×interval so targets
	// added together drift apart (default 0.1). A negative value disables
	// jitter.
	Jitter float64
	// Concurrency bounds the probes in flight (default 256).
	Concurrency int
	// Clock drives scheduling (default clock.RealClock{}). Probe timeouts
	// are real time whatever the clock, because probers set socket
	// deadlines from them.
	Clock clock.WithTicker
	// OnChange is called for every state change, in order, from a single
	// goroutine. It must not block for long: later callbacks queue behind it.
	// The target's status already holds the result that caused the change
	// (its state, FailingSince and CertNotAfter), so a Snapshot taken in
	// or after OnChange describes the new state.
	OnChange func(Transition)
	// Metrics, when set, are updated by the scheduler.
	Metrics *Metrics
	// Coalesce starts the probes due within this long of the earliest one
	// together, trading that much timing precision (far less than the
	// jitter) for fewer wake-ups of the scheduler and the Go runtime, which
	// dominate the CPU cost of a probe at moderate rates (default 10ms; a
	// negative value starts each probe at its own due time).
	Coalesce time.Duration
}

// ErrRunning is returned by Run when the scheduler is already running.
var ErrRunning = errors.New("scheduler is already running")

// Scheduler probes a changing set of targets, each at its interval with
// jitter, at most one probe in flight per target and at most
// Config.Concurrency in all, and turns results into Up/Down states with
// hysteresis.
//
// One goroutine waits for the earliest due time in a heap and starts a
// short-lived goroutine per probe, so an idle target costs memory only.
type Scheduler struct {
	cfg   Config
	clock clock.WithTicker
	sem   *semaphore.Weighted

	// wake tells the run loop that the heap's head may have changed.
	wake chan struct{}
	// notify tells the dispatcher that events were queued.
	notify chan struct{}

	running sync.Mutex
	probes  sync.WaitGroup
	// logger is Run's; localLog limits the log of probes that could not
	// open a socket to one line a localLogEvery.
	logger   klog.Logger
	localLog localLog

	mu      sync.Mutex
	targets map[string]*entry
	due     dueHeap
	// changes are the OnChange calls to make, in the order the state changed.
	changes []Transition
}

// entry is the scheduler's record of one target.
type entry struct {
	t Target
	// gen changes whenever the key is removed or re-added, so the result of
	// a probe started before that is recognised and dropped.
	gen      uint64
	removed  bool
	inFlight bool
	// index is the position in the due heap, -1 when not in it.
	index int
	due   time.Time

	state       State
	since       time.Time
	lastChange  time.Time
	last        Result
	lastAt      time.Time
	successes   int
	failures    int
	srtt        time.Duration
	rttvar      time.Duration
	rttObserved bool
	// failingSince, certNotAfter, localFailures and localErr are
	// TargetStatus's.
	failingSince  time.Time
	certNotAfter  time.Time
	localFailures int
	localErr      error
	// proberGen changes whenever Set replaces the Prober, so a probe of
	// the old one, which may have reached another name or port, does not
	// set the certificate of the new one.
	proberGen uint64
}

// job is what a probe goroutine needs, copied under the lock so a
// concurrent Set does not change it mid-probe.
type job struct {
	e         *entry
	gen       uint64
	proberGen uint64
	key       string
	prober    Prober
	addr      netip.AddrPort
	protocol  probespec.Protocol
	timeout   time.Duration
	start     time.Time
}

// NewScheduler returns a Scheduler with no targets; call Set and Run.
func NewScheduler(cfg Config) *Scheduler {
	if cfg.Interval <= 0 {
		cfg.Interval = probespec.DefaultInterval
	}
	if cfg.FastInterval <= 0 {
		cfg.FastInterval = DefaultFastInterval
	}
	if cfg.Rise <= 0 {
		cfg.Rise = probespec.DefaultRise
	}
	if cfg.Fall <= 0 {
		cfg.Fall = probespec.DefaultFall
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = DefaultJitter
	}
	// Beyond ±50% consecutive due times could swap order or reach zero.
	cfg.Jitter = min(cfg.Jitter, 0.5)
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	switch {
	case cfg.Coalesce == 0:
		cfg.Coalesce = DefaultCoalesce
	case cfg.Coalesce < 0:
		cfg.Coalesce = 0
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Scheduler{
		cfg:     cfg,
		clock:   cfg.Clock,
		sem:     semaphore.NewWeighted(int64(cfg.Concurrency)),
		wake:    make(chan struct{}, 1),
		notify:  make(chan struct{}, 1),
		targets: make(map[string]*entry),
	}
}

// Set replaces the target set. New keys start Unknown and get their first
// probe at a random point within their interval, so a large set does not
// probe all at once. Removed keys stop being probed and the result of a
// probe in flight for them is dropped. Keys already present keep their
// state, streaks and RTT; a changed Prober or Timeout applies from the
// next probe, and a shorter interval brings the next probe forward. A
// changed Addr starts the target afresh, Unknown, and probes it at once:
// the old address's results say nothing about the new one.
// A replaced Prober (one not == the old, which a Func never is) forgets
// the target's CertNotAfter. Targets with an empty Key or a nil Prober are
// ignored, as are repeats of a key after its first occurrence.
func (s *Scheduler) Set(targets []Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	want := make(map[string]struct{}, len(targets))
	for _, t := range targets {
		if t.Key == "" || t.Prober == nil {
			continue
		}
		if _, dup := want[t.Key]; dup {
			continue
		}
		want[t.Key] = struct{}{}
		e, ok := s.targets[t.Key]
		switch {
		case !ok:
			e = &entry{index: -1}
			s.targets[t.Key] = e
			s.reset(e, t, now)
			heap.Push(&s.due, e)
		case e.removed:
			// The key came back while its old probe is in flight: start
			// afresh and let that probe's completion queue the entry.
			e.gen++
			e.removed = false
			s.reset(e, t, now)
		case e.t.Addr != t.Addr:
			// What was learnt at one address says nothing about another:
			// start afresh, drop a probe in flight to the old address,
			// and probe the new one now rather than an interval later.
			s.cfg.Metrics.addTarget(e.state, -1)
			e.gen++
			s.reset(e, t, now)
			e.due = now
			if e.index >= 0 {
				heap.Fix(&s.due, e.index)
			}
		default:
			old := s.interval(e.t)
			if !sameProber(e.t.Prober, t.Prober) {
				e.proberGen++
				e.certNotAfter = time.Time{}
			}
			e.t = t
			if iv := s.interval(t); iv < old && e.index >= 0 {
				if due := e.due.Add(iv - old); due.Before(e.due) {
					e.due = maxTime(due, now)
					heap.Fix(&s.due, e.index)
				}
			}
		}
	}
	for key, e := range s.targets {
		if _, ok := want[key]; ok || e.removed {
			continue
		}
		s.cfg.Metrics.addTarget(e.state, -1)
		if e.inFlight {
			e.removed = true
			e.gen++
			continue
		}
		heap.Remove(&s.due, e.index)
		delete(s.targets, key)
	}
	s.poke(s.wake)
}

// sameProber reports whether a and b are the same Prober. Probers that
// cannot be compared, such as a Func, are never the same: == would panic.
func sameProber(a, b Prober) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Comparable() && vb.Comparable() && a == b
}

// reset makes e a fresh Unknown target. s.mu is held.
func (s *Scheduler) reset(e *entry, t Target, now time.Time) {
	gen := e.gen
	*e = entry{t: t, gen: gen, index: e.index, inFlight: e.inFlight, since: now}
	if iv := s.interval(t); iv > 0 {
		e.due = now.Add(rand.N(iv))
	} else {
		e.due = now
	}
	s.cfg.Metrics.addTarget(StateUnknown, 1)
}

// Run probes the targets until ctx is done, then waits for the probes in
// flight (whose results are dropped) and the callbacks queued, and returns
// nil. Run may be called again after it returns, but not concurrently.
func (s *Scheduler) Run(ctx context.Context) error {
	if !s.running.TryLock() {
		return ErrRunning
	}
	defer s.running.Unlock()
	s.mu.Lock()
	s.logger = klog.FromContext(ctx)
	s.mu.Unlock()

	dispatched := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(dispatched)
		s.dispatch(stop)
	}()

	s.loop(ctx)
	s.probes.Wait()
	close(stop)
	<-dispatched
	return nil
}

// loop starts each target's probe when it is due, until ctx is done.
func (s *Scheduler) loop(ctx context.Context) {
	timer := s.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := s.clock.Now()
		var next *entry
		var due time.Time
		if len(s.due) > 0 {
			if head := s.due[0]; !head.due.After(now.Add(s.cfg.Coalesce)) {
				next = heap.Pop(&s.due).(*entry)
				next.inFlight = true
			} else {
				due = head.due
			}
		}
		s.mu.Unlock()

		if next != nil {
			if !s.start(ctx, next) {
				return
			}
			continue
		}

		var fire <-chan time.Time
		if !due.IsZero() {
			timer.Reset(due.Sub(now))
			// A clock stepped between reading now and arming the timer
			// armed it late; look again rather than miss the due time.
			if !s.clock.Now().Before(due) {
				continue
			}
			fire = timer.C()
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-fire:
		}
	}
}

// start waits for a concurrency slot and starts the probe of e, which the
// loop took off the heap. It returns false when ctx ended first.
func (s *Scheduler) start(ctx context.Context, e *entry) bool {
	if err := s.sem.Acquire(ctx, 1); err != nil {
		s.mu.Lock()
		s.release(e, s.clock.Now())
		s.mu.Unlock()
		return false
	}
	s.mu.Lock()
	if e.removed {
		s.release(e, time.Time{})
		s.mu.Unlock()
		s.sem.Release(1)
		return true
	}
	j := job{
		e:         e,
		gen:       e.gen,
		proberGen: e.proberGen,
		key:       e.t.Key,
		prober:    e.t.Prober,
		addr:      e.t.Addr,
		protocol:  e.t.Protocol,
		timeout:   s.timeout(e),
		start:     s.clock.Now(),
	}
	s.mu.Unlock()
	s.probes.Add(1)
	go s.probe(ctx, j)
	return true
}

// release ends e's time in flight without a result: a removed entry is
// forgotten and any other is queued again at due (or its own due time when
// due is zero). s.mu is held.
func (s *Scheduler) release(e *entry, due time.Time) {
	e.inFlight = false
	if e.removed {
		if s.targets[e.t.Key] == e {
			delete(s.targets, e.t.Key)
		}
		return
	}
	if !due.IsZero() {
		e.due = due
	}
	heap.Push(&s.due, e)
	s.poke(s.wake)
}

// probe runs one probe and records its result.
func (s *Scheduler) probe(ctx context.Context, j job) {
	defer s.probes.Done()
	defer s.sem.Release(1)

	pctx, cancel := context.WithTimeout(ctx, j.timeout)
	r := j.prober.Probe(pctx, j.addr)
	cancel()
	if r.Outcome == OutcomeUnknown && r.Err == nil {
		r.Err = errors.New("prober returned no outcome")
	}
	if !r.Up() && LocalFailure(r.Err) {
		r.Outcome = SOCKERR
	}
	rtt := r.Timings.Total
	if rtt <= 0 {
		rtt = s.clock.Since(j.start)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		// Shutting down: a probe cut short by that says nothing about the
		// target, so it must not count as a failure.
		s.release(j.e, j.start)
		return
	}
	s.cfg.Metrics.observeProbe(j.protocol, r, rtt.Seconds())
	if j.e.gen != j.gen || j.e.removed {
		s.release(j.e, time.Time{})
		return
	}
	s.record(j, r, rtt)
}

// record applies one result to its target and queues the target's next
// probe and the OnChange call. The status changes before the call is
// queued, so the callback and whatever it triggers see the new status.
// s.mu is held.
func (s *Scheduler) record(j job, r Result, rtt time.Duration) {
	e := j.e
	now := s.clock.Now()
	if r.Outcome == SOCKERR {
		// The probe did not run: nothing is learnt about the target.
		// Try again soon, as descriptors free up quickly.
		e.localFailures++
		e.localErr = r.Err
		s.localLog.note(s.logger, now, j.key, j.addr, r.Err)
		s.release(e, j.start.Add(s.jitter(min(s.cfg.FastInterval, s.interval(e.t)))))
		return
	}
	e.localFailures, e.localErr = 0, nil
	e.last, e.lastAt = r, now
	up := r.Up()
	if up {
		e.successes++
		e.failures = 0
		e.failingSince = time.Time{}
		s.observeRTT(e, rtt)
	} else {
		if e.failures == 0 {
			e.failingSince = now.Add(-r.Timings.Total)
		}
		e.failures++
		e.successes = 0
	}
	if r.TLS != nil && !r.TLS.NotAfter.IsZero() && j.proberGen == e.proberGen {
		e.certNotAfter = r.TLS.NotAfter
	}

	from := e.state
	switch {
	case up && e.state != StateUp && e.successes >= s.rise(e.t):
		e.state = StateUp
	case !up && e.state != StateDown && e.failures >= s.fall(e.t):
		e.state = StateDown
	}
	if e.state != from {
		e.lastChange = now
		s.cfg.Metrics.observeChange(from, e.state)
		if s.cfg.OnChange != nil {
			s.changes = append(s.changes, Transition{Key: j.key, From: from, To: e.state, Result: r, At: now})
			s.poke(s.notify)
		}
	}

	iv := s.interval(e.t)
	if e.state == StateUnknown || up != (e.state == StateUp) {
		iv = min(s.cfg.FastInterval, iv)
	}
	s.release(e, j.start.Add(s.jitter(iv)))
}

// observeRTT folds one successful probe's duration into the smoothed RTT
// and its variance, as TCP does for its retransmission timeout (RFC 6298).
func (s *Scheduler) observeRTT(e *entry, rtt time.Duration) {
	if !e.rttObserved {
		e.srtt, e.rttvar, e.rttObserved = rtt, rtt/2, true
		return
	}
	e.rttvar = (3*e.rttvar + (e.srtt - rtt).Abs()) / 4
	e.srtt = (7*e.srtt + rtt) / 8
}

// timeout is the timeout of e's next probe: the target's own when set,
// otherwise a multiple of the TCP-style RTO within the adaptive bounds and
// no longer than the interval, so a probe finishes before the next is due.
func (s *Scheduler) timeout(e *entry) time.Duration {
	if e.t.Timeout > 0 {
		return e.t.Timeout
	}
	d := MaxAdaptiveTimeout
	if e.rttObserved {
		d = min(max(rtoFactor*(e.srtt+4*e.rttvar), MinAdaptiveTimeout), MaxAdaptiveTimeout)
	}
	return min(d, max(s.interval(e.t), MinAdaptiveTimeout))
}

func (s *Scheduler) interval(t Target) time.Duration {
	if t.Interval > 0 {
		return t.Interval
	}
	return s.cfg.Interval
}

func (s *Scheduler) rise(t Target) int {
	if t.Rise > 0 {
		return t.Rise
	}
	return s.cfg.Rise
}

func (s *Scheduler) fall(t Target) int {
	if t.Fall > 0 {
		return t.Fall
	}
	return s.cfg.Fall
}

// jitter returns d moved by a random fraction of itself within ±Config.Jitter.
func (s *Scheduler) jitter(d time.Duration) time.Duration {
	if s.cfg.Jitter <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration((2*rand.Float64()-1)*s.cfg.Jitter*float64(d))
}

// poke sends on a wake-up channel without blocking; one pending wake-up is
// enough because the receiver looks at everything when it wakes.
func (s *Scheduler) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// dispatch delivers queued OnChange calls in order until stop is closed
// and the queue is empty.
func (s *Scheduler) dispatch(stop <-chan struct{}) {
	for {
		s.mu.Lock()
		changes := s.changes
		s.changes = nil
		s.mu.Unlock()
		for _, tr := range changes {
			s.cfg.OnChange(tr)
		}
		if len(changes) > 0 {
			continue
		}
		select {
		case <-s.notify:
		case <-stop:
			s.mu.Lock()
			empty := len(s.changes) == 0
			s.mu.Unlock()
			if empty {
				return
			}
		}
	}
}

// Snapshot returns the status of every target, sorted by Key.
func (s *Scheduler) Snapshot() []TargetStatus {
	s.mu.Lock()
	out := make([]TargetStatus, 0, len(s.targets))
	for _, e := range s.targets {
		if !e.removed {
			out = append(out, s.status(e))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b TargetStatus) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Status returns the status of the target with key, and whether there is one.
func (s *Scheduler) Status(key string) (TargetStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.targets[key]
	if !ok || e.removed {
		return TargetStatus{}, false
	}
	return s.status(e), true
}

// status summarises e. s.mu is held.
func (s *Scheduler) status(e *entry) TargetStatus {
	st := TargetStatus{
		Key:           e.t.Key,
		Addr:          e.t.Addr,
		State:         e.state,
		Since:         e.since,
		LastChange:    e.lastChange,
		Last:          e.last,
		LastAt:        e.lastAt,
		RTT:           e.srtt,
		Successes:     e.successes,
		Failures:      e.failures,
		Timeout:       s.timeout(e),
		FailingSince:  e.failingSince,
		CertNotAfter:  e.certNotAfter,
		LocalFailures: e.localFailures,
		LocalError:    e.localErr,
	}
	if !e.inFlight {
		st.Next = e.due
	}
	return st
}

// dueHeap orders entries by due time, earliest first.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.index = -1
	*h = old[:n-1]
	return e
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
