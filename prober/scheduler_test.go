package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pulselb/pulselb/api/probespec"
)

// waitLimit bounds every wait in these tests; reaching it is a failure.
const waitLimit = 10 * time.Second

var (
	resUp   = Result{Outcome: L4OK, Detail: "connected", Timings: Timings{Connect: time.Millisecond, Total: time.Millisecond}}
	resDown = Result{Outcome: L4CON, Err: errors.New("connecting: connection refused")}
)

// probeCall is one call of a harness prober, answered by sending on reply.
type probeCall struct {
	addr netip.AddrPort
	// at is the fake time the probe started.
	at time.Time
	// budget is the time left until the probe context's deadline.
	budget time.Duration
	reply  chan Result
}

// harness runs a Scheduler on a fake clock with a prober whose every call
// the test receives and answers.
type harness struct {
	clk   *clocktesting.FakeClock
	s     *Scheduler
	m     *Metrics
	calls chan *probeCall
	stop  chan struct{}

	mu      sync.Mutex
	changes []Transition
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{
		clk:   clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		calls: make(chan *probeCall, 64),
		stop:  make(chan struct{}),
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	h.m = cfg.Metrics
	cfg.Clock = h.clk
	cfg.OnChange = func(tr Transition) {
		h.mu.Lock()
		h.changes = append(h.changes, tr)
		h.mu.Unlock()
	}
	h.s = NewScheduler(cfg)
	runScheduler(t, h.s)
	// Cleanups run last first: the probes waiting for a reply end before
	// Run is stopped.
	t.Cleanup(func() { close(h.stop) })
	return h
}

// runScheduler runs s until the test ends, then waits for Run to return.
func runScheduler(t *testing.T, s *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := recv(t, done, "Run to return"); err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
}

// harnessProber answers each call with what the test sends on the call's
// reply. It ignores its context on purpose: the tests decide the result,
// and a slow test machine must not turn a reply into a timeout. It is a
// pointer so that Set tells it apart from another harnessProber.
type harnessProber struct{ h *harness }

func (p *harnessProber) Probe(ctx context.Context, addr netip.AddrPort) Result {
	h := p.h
	var budget time.Duration
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
	c := &probeCall{addr: addr, at: h.clk.Now(), budget: budget, reply: make(chan Result, 1)}
	select {
	case h.calls <- c:
	case <-h.stop:
		return resDown
	}
	select {
	case r := <-c.reply:
		return r
	case <-h.stop:
		return resDown
	}
}

// prober returns a new prober the test answers.
func (h *harness) prober() Prober { return &harnessProber{h} }

// target returns a target probed by the harness prober at 127.0.0.1:port,
// with a long explicit timeout so real time never interferes.
func (h *harness) target(key string, port uint16) Target {
	return Target{
		Key:      key,
		Addr:     netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		Protocol: probespec.TCP,
		Prober:   h.prober(),
		Timeout:  time.Minute,
	}
}

func (h *harness) next(t *testing.T) *probeCall {
	t.Helper()
	return recv(t, h.calls, "a probe call")
}

// waitProbes waits until the scheduler has finished n probes in all.
func (h *harness) waitProbes(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d probe results", n), func() bool { return probesRun(t, h.m) >= n })
}

// probe steps the clock by d, answers the probe that starts with r and
// waits until the scheduler has recorded it.
func (h *harness) probe(t *testing.T, d time.Duration, r Result) *probeCall {
	t.Helper()
	h.clk.Step(d)
	c := h.next(t)
	n := probesRun(t, h.m)
	c.reply <- r
	h.waitProbes(t, n+1)
	return c
}

func (h *harness) transitions() []Transition {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Transition(nil), h.changes...)
}

// waitTransitions waits until OnChange has been called n times and returns
// its calls. OnChange runs after the status changed, on a goroutine of its
// own, so a recorded result does not mean its transition was delivered.
func (h *harness) waitTransitions(t *testing.T, n int) []Transition {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d transitions", n), func() bool { return len(h.transitions()) >= n })
	return h.transitions()
}

// probesRun is how many probes the scheduler using m has finished. It
// counts a probe under the lock under which it records the result, so a
// Status read after the count grew sees that result.
func probesRun(t *testing.T, m *Metrics) int {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(m.Probes); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		for _, c := range f.GetMetric() {
			n += c.GetCounter().GetValue()
		}
	}
	return int(n)
}

func (h *harness) status(t *testing.T, key string) TargetStatus {
	t.Helper()
	st, ok := h.s.Status(key)
	if !ok {
		t.Fatalf("Status(%q): no such target", key)
	}
	return st
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		panic("unreachable")
	}
}

// waitFor polls cond until it holds or the wait limit passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		<-tick.C
	}
}

func TestSchedulerState(t *testing.T) {
	for _, st := range []State{StateUnknown, StateUp, StateDown} {
		b, err := st.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var got State
		if err := got.UnmarshalText(b); err != nil || got != st {
			t.Errorf("round trip of %v through %q gave %v, %v", st, b, got, err)
		}
	}
	if got := StateDown.String(); got != "Down" {
		t.Errorf("StateDown.String() = %q", got)
	}
	if got := State(9).String(); got != "State(9)" {
		t.Errorf("State(9).String() = %q", got)
	}
}

func TestSchedulerHysteresis(t *testing.T) {
	const U, D = true, false
	type change struct{ from, to State }
	tests := []struct {
		name       string
		rise, fall int // target overrides; 0 uses the config's 2/2
		results    []bool
		states     []State // after each result
		changes    []change
	}{
		{
			name:    "unknown to up after rise successes",
			results: []bool{U, U, U},
			states:  []State{StateUnknown, StateUp, StateUp},
			changes: []change{{StateUnknown, StateUp}},
		},
		{
			name:    "unknown to down after fall failures",
			results: []bool{D, D},
			states:  []State{StateUnknown, StateDown},
			changes: []change{{StateUnknown, StateDown}},
		},
		{
			name:    "one failure while up stays up",
			results: []bool{U, U, D, U, D, U},
			states:  []State{StateUnknown, StateUp, StateUp, StateUp, StateUp, StateUp},
			changes: []change{{StateUnknown, StateUp}},
		},
		{
			name:    "fall failures while up go down once",
			results: []bool{U, U, D, D, D, D},
			states:  []State{StateUnknown, StateUp, StateUp, StateDown, StateDown, StateDown},
			changes: []change{{StateUnknown, StateUp}, {StateUp, StateDown}},
		},
		{
			name:    "recovery needs rise successes in a row",
			results: []bool{D, D, U, D, U, U},
			states:  []State{StateUnknown, StateDown, StateDown, StateDown, StateDown, StateUp},
			changes: []change{{StateUnknown, StateDown}, {StateDown, StateUp}},
		},
		{
			name:    "flapping never leaves unknown",
			results: []bool{U, D, U, D, U, D},
			states:  []State{StateUnknown, StateUnknown, StateUnknown, StateUnknown, StateUnknown, StateUnknown},
		},
		{
			name:    "target rise and fall override the config",
			rise:    3,
			fall:    1,
			results: []bool{U, U, U, D, U, U},
			states:  []State{StateUnknown, StateUnknown, StateUp, StateDown, StateDown, StateDown},
			changes: []change{{StateUnknown, StateUp}, {StateUp, StateDown}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Interval: time.Second, Rise: 2, Fall: 2, Jitter: -1})
			tg := h.target("ns/svc:80@node-a", 80)
			tg.Rise, tg.Fall = tt.rise, tt.fall
			h.s.Set([]Target{tg})

			for i, up := range tt.results {
				r := resDown
				if up {
					r = resUp
				}
				h.probe(t, time.Second, r)
				st := h.status(t, tg.Key)
				if st.State != tt.states[i] {
					t.Fatalf("after result %d (up=%v): state %v, want %v", i, up, st.State, tt.states[i])
				}
				if st.Last.Outcome != r.Outcome {
					t.Errorf("after result %d: Last.Outcome %v, want %v", i, st.Last.Outcome, r.Outcome)
				}
			}

			got := h.waitTransitions(t, len(tt.changes))
			if len(got) != len(tt.changes) {
				t.Fatalf("OnChange called %d times (%+v), want %d", len(got), got, len(tt.changes))
			}
			for i, tr := range got {
				if tr.From != tt.changes[i].from || tr.To != tt.changes[i].to {
					t.Errorf("change %d: %v→%v, want %v→%v", i, tr.From, tr.To, tt.changes[i].from, tt.changes[i].to)
				}
				if tr.Key != tg.Key {
					t.Errorf("change %d: key %q", i, tr.Key)
				}
				if tr.Result.Up() != (tr.To == StateUp) {
					t.Errorf("change %d to %v carries result %v", i, tr.To, tr.Result.Outcome)
				}
			}
			if len(got) > 0 {
				last := got[len(got)-1]
				if st := h.status(t, tg.Key); !st.LastChange.Equal(last.At) {
					t.Errorf("LastChange %v, want the last transition's time %v", st.LastChange, last.At)
				}
			}
		})
	}
}

func TestSchedulerFastReprobe(t *testing.T) {
	const interval, fast = time.Second, 200 * time.Millisecond
	h := newHarness(t, Config{Interval: interval, FastInterval: fast, Rise: 2, Fall: 2, Jitter: -1})
	tg := h.target("svc", 80)
	h.s.Set([]Target{tg})

	gap := func(what string, want time.Duration) {
		t.Helper()
		st := h.status(t, tg.Key)
		if got := st.Next.Sub(st.LastAt); got != want {
			t.Fatalf("%s: next probe due %v after the last, want %v", what, got, want)
		}
	}

	h.probe(t, interval, resUp)
	gap("first success while Unknown", fast)
	h.probe(t, fast, resUp)
	gap("success while Up", interval)

	upAt := h.probe(t, interval, resDown).at
	gap("first failure while Up", fast)
	if st := h.status(t, tg.Key); st.State != StateUp {
		t.Fatalf("one failure changed state to %v", st.State)
	}

	// Stepping exactly the fast interval must start the confirming probe.
	c := h.probe(t, fast, resDown)
	if got := c.at.Sub(upAt); got != fast {
		t.Errorf("confirming probe started %v after the first failure, want %v", got, fast)
	}
	if st := h.status(t, tg.Key); st.State != StateDown {
		t.Fatalf("two failures left state %v", st.State)
	}
	gap("failure while Down", interval)

	h.probe(t, interval, resUp)
	gap("first success while Down", fast)
}

func TestSchedulerJitter(t *testing.T) {
	const interval, n = time.Second, 200
	tests := []struct {
		name        string
		jitter      float64
		wantSpread  time.Duration // the largest allowed distance from interval
		wantVarying bool
	}{
		{name: "default ten percent", jitter: 0, wantSpread: interval / 10, wantVarying: true},
		{name: "twenty percent", jitter: 0.2, wantSpread: interval / 5, wantVarying: true},
		{name: "disabled", jitter: -1, wantSpread: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			m := NewMetrics()
			s := NewScheduler(Config{
				Interval: interval, Rise: 1, Fall: 1, Jitter: tt.jitter, Clock: clk, Coalesce: -1, Metrics: m,
			})
			up := Func(func(context.Context, netip.AddrPort) Result { return resUp })
			targets := make([]Target, n)
			for i := range targets {
				targets[i] = Target{Key: fmt.Sprintf("t%03d", i), Prober: up, Timeout: time.Minute}
			}
			start := clk.Now()
			s.Set(targets)

			// First probes spread over one interval whatever the jitter,
			// so a large new set does not probe all at once.
			firsts := map[time.Time]bool{}
			for _, st := range s.Snapshot() {
				if st.Next.Before(start) || !st.Next.Before(start.Add(interval)) {
					t.Fatalf("%s: first probe due at +%v, outside [0, %v)", st.Key, st.Next.Sub(start), interval)
				}
				firsts[st.Next] = true
			}
			if len(firsts) < n/2 {
				t.Errorf("only %d distinct first due times for %d targets", len(firsts), n)
			}

			runScheduler(t, s)
			clk.Step(interval)
			waitFor(t, "every target's first result", func() bool { return probesRun(t, m) == n })

			gaps := map[time.Duration]bool{}
			for _, st := range s.Snapshot() {
				if st.State != StateUp {
					t.Fatalf("%s: state %v after one success with rise=1", st.Key, st.State)
				}
				gap := st.Next.Sub(st.LastAt)
				if d := (gap - interval).Abs(); d > tt.wantSpread {
					t.Errorf("%s: next probe %v after the last, more than %v from %v", st.Key, gap, tt.wantSpread, interval)
				}
				gaps[gap] = true
			}
			if tt.wantVarying && len(gaps) < 2 {
				t.Errorf("all %d targets have the same interval %v", n, gaps)
			}
			if !tt.wantVarying && len(gaps) != 1 {
				t.Errorf("jitter disabled but intervals vary: %v", gaps)
			}
		})
	}
}

func TestSchedulerOneInFlight(t *testing.T) {
	const interval = 100 * time.Millisecond
	h := newHarness(t, Config{Interval: interval, Jitter: -1})
	keys := []string{"a", "b", "c"}
	var targets []Target
	for i, k := range keys {
		targets = append(targets, h.target(k, uint16(80+i)))
	}
	h.s.Set(targets)

	h.clk.Step(interval)
	var pending []*probeCall
	for range keys {
		pending = append(pending, h.next(t))
	}
	// Many intervals pass while every probe hangs: none may start again.
	for range 20 {
		h.clk.Step(interval)
	}
	for _, k := range keys {
		if st := h.status(t, k); !st.Next.IsZero() {
			t.Errorf("%s: next probe scheduled at %v while one is in flight", k, st.Next)
		}
	}
	select {
	case c := <-h.calls:
		t.Fatalf("second probe of %v started while the first is in flight", c.addr)
	default:
	}

	n := probesRun(t, h.m)
	for _, c := range pending {
		c.reply <- resUp
	}
	h.waitProbes(t, n+len(keys))
	// Each target's next probe was due long ago, so it starts at once and
	// exactly once per target.
	seen := map[netip.AddrPort]int{}
	for range keys {
		c := h.next(t)
		seen[c.addr]++
		c.reply <- resUp
	}
	for addr, n := range seen {
		if n != 1 {
			t.Errorf("%v probed %d times after its probe finished, want 1", addr, n)
		}
	}
}

func TestSchedulerConcurrencyBound(t *testing.T) {
	const limit, n = 3, 20
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var running, peak, calls atomic.Int64
	started := make(chan chan struct{}, n)
	block := Func(func(ctx context.Context, _ netip.AddrPort) Result {
		now := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		calls.Add(1)
		release := make(chan struct{})
		started <- release
		select {
		case <-release:
		case <-ctx.Done():
		}
		return resUp
	})
	s := NewScheduler(Config{Interval: time.Second, Concurrency: limit, Clock: clk})
	targets := make([]Target, n)
	for i := range targets {
		targets[i] = Target{Key: fmt.Sprintf("t%02d", i), Prober: block, Timeout: time.Minute}
	}
	s.Set(targets)
	runScheduler(t, s)

	clk.Step(time.Second) // every target is due
	var held []chan struct{}
	for range limit {
		held = append(held, recv(t, started, "a probe to start"))
	}
	select {
	case <-started:
		t.Fatalf("probe %d started while %d are in flight", limit+1, limit)
	default:
	}
	// Each release lets exactly one more start, until all have run.
	for received := limit; len(held) > 0; {
		close(held[0])
		held = held[1:]
		if received < n {
			held = append(held, recv(t, started, "the next probe to start"))
			received++
		}
	}
	if got := calls.Load(); got != n {
		t.Errorf("%d probes ran, want %d", got, n)
	}
	if got := peak.Load(); got > limit {
		t.Errorf("%d probes ran at once, want at most %d", got, limit)
	}
}

func TestSchedulerAdaptiveTimeout(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name     string
		interval time.Duration
		timeout  time.Duration // Target.Timeout
		rtts     []time.Duration
		fail     bool // answer the earlier probes with failures
		want     time.Duration
	}{
		{name: "no observation yet", interval: 5 * time.Second, want: 2 * time.Second},
		{name: "no observation, capped at interval", interval: 500 * ms, want: 500 * ms},
		{name: "interval below floor caps at floor", interval: 50 * ms, want: 200 * ms},
		{name: "one 100ms sample is 3×(srtt+4·rttvar)", interval: 5 * time.Second, rtts: []time.Duration{100 * ms}, want: 900 * ms},
		{name: "fast probes shrink to the floor", interval: 5 * time.Second, rtts: []time.Duration{ms, ms, ms, ms}, want: 200 * ms},
		{
			name: "variance decays with steady samples", interval: 5 * time.Second,
			// rttvar 50→37.5, srtt 100: 3×(100+150) = 750ms.
			rtts: []time.Duration{100 * ms, 100 * ms}, want: 750 * ms,
		},
		{name: "slow probes clamp to the ceiling", interval: 10 * time.Second, rtts: []time.Duration{1500 * ms}, want: 2 * time.Second},
		{name: "failures are not RTT samples", interval: 5 * time.Second, rtts: []time.Duration{ms, ms}, fail: true, want: 2 * time.Second},
		{name: "explicit timeout used as is", interval: time.Second, timeout: 7 * time.Second, rtts: []time.Duration{ms, ms, ms}, want: 7 * time.Second},
		{name: "explicit timeout below floor used as is", interval: time.Second, timeout: 50 * ms, want: 50 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Interval: tt.interval, FastInterval: tt.interval, Jitter: -1})
			tg := h.target("svc", 80)
			tg.Timeout = tt.timeout
			h.s.Set([]Target{tg})

			for _, rtt := range tt.rtts {
				r := resUp
				if tt.fail {
					r = resDown
				}
				r.Timings.Total = rtt
				h.probe(t, tt.interval, r)
			}
			if got := h.status(t, tg.Key).Timeout; got != tt.want {
				t.Errorf("Status.Timeout = %v, want %v", got, tt.want)
			}
			h.clk.Step(tt.interval)
			c := h.next(t)
			c.reply <- resUp
			// The deadline is real time, so allow for a slow machine
			// between setting it and the prober reading it.
			if c.budget > tt.want || c.budget < tt.want-250*ms {
				t.Errorf("probe context deadline %v away, want %v", c.budget, tt.want)
			}
		})
	}
}

func TestSchedulerSet(t *testing.T) {
	t.Run("removal stops probing", func(t *testing.T) {
		h := newHarness(t, Config{Interval: time.Second, Jitter: -1})
		a, b := h.target("a", 1), h.target("b", 2)
		h.s.Set([]Target{a, b})
		h.clk.Step(time.Second)
		for range 2 {
			h.next(t).reply <- resUp
		}
		h.waitProbes(t, 2)
		h.s.Set([]Target{b})
		if _, ok := h.s.Status("a"); ok {
			t.Error("removed target still has a status")
		}
		for range 3 {
			if c := h.probe(t, time.Second, resUp); c.addr != b.Addr {
				t.Fatalf("removed target %v probed", c.addr)
			}
		}
		if snap := h.s.Snapshot(); len(snap) != 1 || snap[0].Key != "b" {
			t.Errorf("Snapshot() = %+v, want only b", snap)
		}
	})

	t.Run("removal drops the in-flight result", func(t *testing.T) {
		m := NewMetrics()
		h := newHarness(t, Config{Interval: time.Second, Rise: 1, Fall: 1, Metrics: m})
		h.s.Set([]Target{h.target("a", 1)})
		h.clk.Step(time.Second)
		c := h.next(t)
		h.s.Set(nil)
		c.reply <- resDown
		probes := m.Probes.WithLabelValues("tcp", "L4CON")
		waitFor(t, "the dropped probe to finish", func() bool { return testutil.ToFloat64(probes) == 1 })
		if _, ok := h.s.Status("a"); ok {
			t.Error("removed target has a status after its probe finished")
		}
		if got := h.transitions(); len(got) != 0 {
			t.Errorf("dropped result caused transitions %+v", got)
		}
	})

	t.Run("re-added during its probe starts afresh", func(t *testing.T) {
		m := NewMetrics()
		h := newHarness(t, Config{Interval: time.Second, Rise: 1, Fall: 1, Jitter: -1, Metrics: m})
		a := h.target("a", 1)
		h.s.Set([]Target{a})
		h.probe(t, time.Second, resUp)
		h.clk.Step(time.Second)
		c := h.next(t)
		h.s.Set(nil)
		h.s.Set([]Target{a})
		st := h.status(t, "a")
		if st.State != StateUnknown || st.Successes != 0 {
			t.Errorf("re-added target: state %v, successes %d; want Unknown, 0", st.State, st.Successes)
		}
		if !st.Next.IsZero() {
			t.Errorf("re-added target scheduled at %v while its old probe is in flight", st.Next)
		}
		c.reply <- resDown
		probes := m.Probes.WithLabelValues("tcp", "L4CON")
		waitFor(t, "the stale probe to finish", func() bool { return testutil.ToFloat64(probes) == 1 })
		if st := h.status(t, "a"); st.State != StateUnknown || st.Last.Outcome != OutcomeUnknown {
			t.Errorf("stale result applied: state %v, last %v", st.State, st.Last.Outcome)
		}
		h.probe(t, time.Second, resUp)
		if st := h.status(t, "a"); st.State != StateUp {
			t.Errorf("after a fresh success: state %v, want Up", st.State)
		}
	})

	t.Run("re-Set keeps state and uses the new prober", func(t *testing.T) {
		h := newHarness(t, Config{Interval: time.Second, Jitter: -1})
		a := h.target("a", 1)
		h.s.Set([]Target{a})
		h.probe(t, time.Second, resUp)
		h.probe(t, time.Second, resUp)
		h.probe(t, time.Second, resUp)
		before := h.status(t, "a")
		if before.State != StateUp {
			t.Fatalf("state %v after three successes", before.State)
		}

		reprobed := a
		reprobed.Prober = h.prober()
		h.s.Set([]Target{reprobed, h.target("b", 2)})
		after := h.status(t, "a")
		if after.State != StateUp || after.Successes != before.Successes || !after.Since.Equal(before.Since) {
			t.Errorf("re-Set changed the status: before %+v, after %+v", before, after)
		}
		if got := h.waitTransitions(t, 1); len(got) != 1 {
			t.Errorf("re-Set caused transitions: %+v", got)
		}
		h.clk.Step(time.Second)
		for range 2 {
			h.next(t).reply <- resUp
		}
	})

	// The results at one address say nothing about another: a target
	// whose address changes starts Unknown and is probed at once, not a
	// whole interval (up to an hour in standalone mode) later.
	t.Run("changed address starts afresh and is probed at once", func(t *testing.T) {
		for _, inFlight := range []bool{false, true} {
			t.Run(fmt.Sprintf("in flight %v", inFlight), func(t *testing.T) {
				m := NewMetrics()
				h := newHarness(t, Config{Interval: time.Hour, Rise: 1, Fall: 1, Jitter: -1, Metrics: m})
				a := h.target("a", 1)
				h.s.Set([]Target{a})
				h.probe(t, time.Hour, resUp)
				if st := h.status(t, "a"); st.State != StateUp {
					t.Fatalf("state %v after a success", st.State)
				}
				var old *probeCall
				if inFlight {
					h.clk.Step(time.Hour)
					old = h.next(t)
				}
				moved := a
				moved.Addr = netip.MustParseAddrPort("[::1]:8080")
				h.s.Set([]Target{moved})
				st := h.status(t, "a")
				if st.State != StateUnknown || st.Successes != 0 || st.Addr != moved.Addr {
					t.Errorf("after the move: state %v, successes %d, address %v; want Unknown, 0, %v", st.State, st.Successes, st.Addr, moved.Addr)
				}
				if old != nil {
					// The old address's answer is dropped.
					old.reply <- resUp
					probes := m.Probes.WithLabelValues("tcp", "L4OK")
					waitFor(t, "the old probe to finish", func() bool { return testutil.ToFloat64(probes) == 2 })
					if st := h.status(t, "a"); st.State != StateUnknown {
						t.Errorf("the old address's result applied: state %v", st.State)
					}
				}
				// No clock step: the probe is due now.
				c := h.next(t)
				if c.addr != moved.Addr {
					t.Fatalf("probe went to %v, want %v", c.addr, moved.Addr)
				}
				c.reply <- resDown
				waitFor(t, "the new address probed down", func() bool { return h.status(t, "a").State == StateDown })
				if got := testutil.ToFloat64(m.Targets.WithLabelValues(StateDown.String())); got != 1 {
					t.Errorf("targets{state=down} = %v, want 1", got)
				}
				if got := testutil.ToFloat64(m.Targets.WithLabelValues(StateUp.String())); got != 0 {
					t.Errorf("targets{state=up} = %v, want 0", got)
				}
			})
		}
	})

	t.Run("shorter interval brings the next probe forward", func(t *testing.T) {
		h := newHarness(t, Config{Interval: 10 * time.Second, Rise: 1, Jitter: -1})
		a := h.target("a", 1)
		h.s.Set([]Target{a})
		h.probe(t, 10*time.Second, resUp)
		a.Interval = time.Second
		h.s.Set([]Target{a})
		st := h.status(t, "a")
		if got := st.Next.Sub(st.LastAt); got != time.Second {
			t.Errorf("next probe %v after the last, want 1s", got)
		}
		h.probe(t, time.Second, resUp)
	})
}

func TestSchedulerRun(t *testing.T) {
	t.Run("stops, waits for probes and drops their results", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Now())
		var changes atomic.Int64
		entered, returned := make(chan struct{}), make(chan struct{})
		s := NewScheduler(Config{Clock: clk, Rise: 1, Fall: 1, OnChange: func(Transition) { changes.Add(1) }})
		s.Set([]Target{{Key: "a", Timeout: time.Minute, Prober: Func(func(ctx context.Context, _ netip.AddrPort) Result {
			close(entered)
			<-ctx.Done()
			close(returned)
			return Result{Outcome: L4TOUT, Err: ctx.Err()}
		})}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		clk.Step(time.Second)
		recv(t, entered, "the probe to start")

		if err := s.Run(context.Background()); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run returned %v, want ErrRunning", err)
		}
		cancel()
		if err := recv(t, done, "Run to return"); err != nil {
			t.Errorf("Run returned %v", err)
		}
		select {
		case <-returned:
		default:
			t.Error("Run returned before its probe did")
		}
		if st, _ := s.Status("a"); st.State != StateUnknown || st.Failures != 0 || changes.Load() != 0 {
			t.Errorf("a probe cut short by shutdown counted: %+v", st)
		}
		if st, _ := s.Status("a"); st.Next.IsZero() {
			t.Error("target not scheduled again after shutdown")
		}
	})
}

// TestSchedulerTCP runs the real tcp prober against a real listener on a
// real clock: Up while it accepts, Down soon after it closes.
func TestSchedulerTCP(t *testing.T) {
	for _, tt := range []struct{ name, addr string }{
		{"ipv4", "127.0.0.1:0"},
		{"ipv6", "[::1]:0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(probespec.Spec{Protocol: probespec.TCP}, Options{})
			if err != nil {
				t.Skipf("tcp prober unavailable: %v", err)
			}
			ln, err := net.Listen("tcp", tt.addr)
			if err != nil {
				t.Skipf("cannot listen on %s: %v", tt.addr, err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()

			changes := make(chan Transition, 16)
			s := NewScheduler(Config{
				Interval:     100 * time.Millisecond,
				FastInterval: 20 * time.Millisecond,
				OnChange:     func(tr Transition) { changes <- tr },
			})
			addr := netip.MustParseAddrPort(ln.Addr().String())
			s.Set([]Target{{Key: "svc", Addr: addr, Protocol: probespec.TCP, Prober: p}})
			runScheduler(t, s)

			if tr := recv(t, changes, "Up"); tr.To != StateUp {
				t.Fatalf("first transition %v→%v (%v), want Up", tr.From, tr.To, tr.Result.Message())
			}
			ln.Close()
			closed := time.Now()
			tr := recv(t, changes, "Down")
			if tr.To != StateDown || tr.Result.Up() {
				t.Fatalf("transition %v→%v on %v, want Down", tr.From, tr.To, tr.Result.Outcome)
			}
			// Fall=2 at a 100ms interval with a 20ms fast re-probe: about
			// 120ms; allow a loaded machine plenty more.
			if d := time.Since(closed); d > 2*time.Second {
				t.Errorf("Down %v after the listener closed", d)
			}
			if st, _ := s.Status("svc"); st.RTT <= 0 {
				t.Errorf("no RTT observed from successful probes: %+v", st)
			}
		})
	}
}

// BenchmarkScheduler measures the scheduler's own cost per probe with
// 10,000 targets and a prober that does nothing.
func BenchmarkScheduler(b *testing.B) {
	const n = 10000
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	var calls atomic.Int64
	rounds := make(chan struct{}, 1)
	up := Func(func(context.Context, netip.AddrPort) Result {
		if calls.Add(1)%n == 0 {
			rounds <- struct{}{}
		}
		return resUp
	})
	s := NewScheduler(Config{Interval: time.Second, Rise: 1, Fall: 1, Clock: clk, Metrics: NewMetrics()})
	targets := make([]Target, n)
	for i := range targets {
		targets[i] = Target{
			Key:      fmt.Sprintf("ns/svc-%d:80@node", i),
			Addr:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 80),
			Protocol: probespec.TCP,
			Prober:   up,
		}
	}
	s.Set(targets)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	probes := 0
	// Each round every target is due exactly once: a target starts each
	// probe at a step, so its next is due within 1.1s of that step.
	for probes < b.N {
		clk.Step(1200 * time.Millisecond)
		<-rounds
		probes += n
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(probes)/elapsed.Seconds(), "probes/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(probes), "ns/probe")
}

func TestSchedulerCoalesce(t *testing.T) {
	for _, tt := range []struct {
		name     string
		coalesce time.Duration
		window   time.Duration
	}{
		{"default 10ms", 0, DefaultCoalesce},
		{"30ms", 30 * time.Millisecond, 30 * time.Millisecond},
		{"off", -1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Interval: time.Second, Jitter: -1, Coalesce: tt.coalesce})
			var targets []Target
			for i := range 100 {
				targets = append(targets, h.target(fmt.Sprintf("t%03d", i), uint16(1000+i)))
			}
			h.s.Set(targets)
			// First probes are spread over the interval at random; the
			// earliest due time and the window after it decide which start.
			var first time.Time
			for _, st := range h.s.Snapshot() {
				if first.IsZero() || st.Next.Before(first) {
					first = st.Next
				}
			}
			want := 0
			for _, st := range h.s.Snapshot() {
				if !st.Next.After(first.Add(tt.window)) {
					want++
				}
			}
			h.clk.SetTime(first)
			for range want {
				h.next(t).reply <- resUp
			}
			select {
			case c := <-h.calls:
				t.Fatalf("probe of %v due after the %v window started early", c.addr, tt.window)
			case <-time.After(100 * time.Millisecond):
			}
		})
	}
}

func TestSchedulerFailingSince(t *testing.T) {
	slow := resDown
	slow.Timings.Total = 300 * time.Millisecond
	h := newHarness(t, Config{Interval: time.Second, FastInterval: time.Second, Rise: 2, Fall: 2, Jitter: -1})
	a := h.target("a", 1)
	h.s.Set([]Target{a})
	start := h.clk.Now()
	at := func(d time.Duration) time.Time { return start.Add(d) }
	steps := []struct {
		name string
		r    Result
		want time.Time // FailingSince after the result
	}{
		{"success", resUp, time.Time{}},
		{"first failure, started 300ms before it ended", slow, at(2*time.Second - 300*time.Millisecond)},
		{"second failure keeps the start", resDown, at(2*time.Second - 300*time.Millisecond)},
		{"third failure, while Down", slow, at(2*time.Second - 300*time.Millisecond)},
		{"success ends the run", resUp, time.Time{}},
		{"a new run starts afresh", resDown, at(6 * time.Second)},
	}
	for i, step := range steps {
		h.probe(t, time.Second, step.r)
		st := h.status(t, "a")
		if !st.FailingSince.Equal(step.want) {
			t.Errorf("step %d (%s): FailingSince %v, want %v", i, step.name, st.FailingSince, step.want)
		}
	}
	if st := h.status(t, "a"); st.State != StateDown {
		t.Errorf("state %v after the steps, want Down", st.State)
	}

	// A target removed and added again is a new target.
	h.s.Set(nil)
	h.s.Set([]Target{a})
	if st := h.status(t, "a"); !st.FailingSince.IsZero() {
		t.Errorf("re-added target: FailingSince %v, want zero", st.FailingSince)
	}
}

func TestSchedulerCertNotAfter(t *testing.T) {
	first := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	second := first.AddDate(0, 3, 0)
	handshake := func(notAfter time.Time, up bool) Result {
		r := Result{Outcome: L6OK, TLS: &CertInfo{NotAfter: notAfter}}
		if !up {
			r.Outcome, r.Err = L7STS, errors.New("HTTP 503")
		}
		return r
	}
	h := newHarness(t, Config{Interval: time.Second, FastInterval: time.Second, Jitter: -1})
	a := h.target("a", 1)
	h.s.Set([]Target{a})
	want := func(what string, notAfter time.Time) {
		t.Helper()
		if got := h.status(t, "a").CertNotAfter; !got.Equal(notAfter) {
			t.Errorf("%s: CertNotAfter %v, want %v", what, got, notAfter)
		}
	}

	h.probe(t, time.Second, resUp)
	want("no handshake yet", time.Time{})
	h.probe(t, time.Second, handshake(first, true))
	want("handshake", first)
	h.probe(t, time.Second, resDown)
	h.probe(t, time.Second, resDown)
	want("down without a handshake", first)
	h.probe(t, time.Second, handshake(second, false))
	want("failed check after a handshake with a new certificate", second)
	h.probe(t, time.Second, Result{Outcome: L6OK, TLS: &CertInfo{}})
	want("handshake without an expiry", second)

	h.s.Set([]Target{a, h.target("b", 2)})
	want("Set with the same prober", second)
	moved := h.target("a", 1)
	h.s.Set([]Target{moved})
	want("Set with a new prober", time.Time{})

	// The old prober's probe, in flight while Set replaces it, reached the
	// old name or port: its certificate is not the new prober's.
	h.probe(t, time.Second, handshake(first, true))
	want("new prober's handshake", first)
	h.clk.Step(time.Second)
	c := h.next(t)
	h.s.Set([]Target{h.target("a", 1)})
	n := probesRun(t, h.m)
	c.reply <- handshake(second, true)
	h.waitProbes(t, n+1)
	want("late handshake of a replaced prober", time.Time{})
}

// TestSchedulerStatusInOnChange probes a real TLS server: the status read
// inside OnChange already holds the result that caused the change, with
// the certificate's expiry once Up, and when it goes Down the start of
// its failures and the expiry still.
func TestSchedulerStatusInOnChange(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	notAfter := srv.Certificate().NotAfter
	spec, err := probespec.Parse("tls verify=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(spec, Options{})
	if err != nil {
		t.Fatal(err)
	}

	type seen struct {
		tr Transition
		st TargetStatus
	}
	changes := make(chan seen, 16)
	var s *Scheduler
	s = NewScheduler(Config{
		Interval:     100 * time.Millisecond,
		FastInterval: 20 * time.Millisecond,
		OnChange: func(tr Transition) {
			st, _ := s.Status(tr.Key)
			changes <- seen{tr, st}
		},
	})
	s.Set([]Target{{Key: "svc", Addr: netip.MustParseAddrPort(srv.Listener.Addr().String()), Protocol: probespec.TLS, Prober: p}})
	runScheduler(t, s)

	up := recv(t, changes, "Up")
	if up.tr.To != StateUp || up.st.State != StateUp {
		t.Fatalf("first change to %v (%v), status %v; want Up", up.tr.To, up.tr.Result.Message(), up.st.State)
	}
	if !up.st.CertNotAfter.Equal(notAfter) || !up.st.FailingSince.IsZero() {
		t.Errorf("status when Up: CertNotAfter %v, FailingSince %v; want %v and zero", up.st.CertNotAfter, up.st.FailingSince, notAfter)
	}

	srv.Close()
	down := recv(t, changes, "Down")
	if down.tr.To != StateDown || down.st.State != StateDown {
		t.Fatalf("change to %v, status %v; want Down", down.tr.To, down.st.State)
	}
	if fs := down.st.FailingSince; !fs.After(up.tr.At) || fs.After(down.tr.At) {
		t.Errorf("status when Down: FailingSince %v, want after Up at %v and by the change at %v", fs, up.tr.At, down.tr.At)
	}
	if !down.st.CertNotAfter.Equal(notAfter) {
		t.Errorf("status when Down: CertNotAfter %v, want %v kept", down.st.CertNotAfter, notAfter)
	}
}
