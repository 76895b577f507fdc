// Package soak runs pulselb, installed from deploy/base on a harness
// cluster, under a seeded random schedule of overlapping faults (nodes
// blackholed, taken down and partitioned, proxies, probers and
// controllers killed, the API server restarted, etcd paused, a Service's
// ports, replicas and probe edited, the Service deleted and re-created)
// and planned changes (a node's maintenance and drain, an upgrade of
// pulselb) while clients outside the cluster resolve its Services through
// pulselb's DNS and an external vantage beside them probes the published
// addresses (one Service requires it), and checks
// invariants all along: each broken one is a named Failure with its time
// and the faults before it. The same seed replays the same schedule. e2e's TestSoak runs a short fixed-seed soak inside `make
// test`; cmd/pulselb-soak (`make soak`) runs the long one.
package soak

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
	"github.com/pulselb/pulselb/test/traffic"
)

// The short form's seed and duration (e2e's TestSoak): two minutes that
// draw every kind of fault but node-down, the planned changes first.
const (
	ShortSeed     = 53533
	ShortDuration = 2 * time.Minute
)

// Config configures a run.
type Config struct {
	// Seed draws the schedule; Duration is how long faults are injected.
	Seed     uint64
	Duration time.Duration
	// Base is the path of deploy/base.
	Base string
	// MinGap, MaxGap, MinHold and MaxHold shape the schedule (see
	// ScheduleConfig); defaults 3 s, 12 s, 5 s, 20 s.
	MinGap, MaxGap, MinHold, MaxHold time.Duration
	// FailoverBound is how long the address of a node cut off may stay in
	// a status; default 6 s, what e2e allows a blackholed node on a loaded
	// 2-core machine. It runs from the later of the cut, the API server's
	// return and the end of the leader gap: LeaderBound after the leader
	// was killed; default 20 s (deploy/base's 15 s Lease, the standby's
	// 2 s retry period and its start).
	FailoverBound, LeaderBound time.Duration
	// HealBound is how long a healed node may take to be back in the
	// daemonset Service's status, from the later of its heal, the API
	// server's return and the end of the leader gap; default 60 s.
	HealBound time.Duration
	// Logf reports progress; default none.
	Logf func(format string, args ...any)
}

func (cfg *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.MinGap, 3*time.Second)
	def(&cfg.MaxGap, 12*time.Second)
	def(&cfg.MinHold, 5*time.Second)
	def(&cfg.MaxHold, 20*time.Second)
	def(&cfg.FailoverBound, 6*time.Second)
	def(&cfg.LeaderBound, 20*time.Second)
	def(&cfg.HealBound, 60*time.Second)
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
}

// schedule draws cfg's schedule of faults on the proxy nodes nodes.
func (cfg Config) schedule(nodes []string) []Fault {
	cfg.defaults()
	return Schedule(ScheduleConfig{Seed: cfg.Seed, Duration: cfg.Duration, Nodes: nodes,
		MinGap: cfg.MinGap, MaxGap: cfg.MaxGap, MinHold: cfg.MinHold, MaxHold: cfg.MaxHold})
}

// dnsTTL is deploy/base's --dns-ttl: a client may keep an address that
// long after the status dropped it.
const dnsTTL = 5 * time.Second

// Failure is one broken invariant.
type Failure struct {
	Invariant string
	// At is when it was seen, from the start of the run.
	At     time.Duration
	Detail string
	// History is the faults injected before, with their offsets.
	History []string
}

func (f Failure) String() string {
	return fmt.Sprintf("%s at +%s: %s\n    faults before:\n      %s", f.Invariant, f.At.Round(time.Millisecond), f.Detail,
		strings.Join(f.History, "\n      "))
}

// ClientResult is what one client sent during the run.
type ClientResult struct {
	Service string
	Sent    int
	// Failed counts the failed requests, InWindow those in the window
	// after an unplanned fault (allowed), InPlanned those during a planned
	// change outside such a window (not allowed).
	Failed, InWindow, InPlanned int
}

// Result is the summary of a run.
type Result struct {
	Seed     uint64
	Duration time.Duration
	// Faults counts the faults injected by kind; Skipped those that found
	// no target or whose call failed (the API server down, say).
	Faults  map[Kind]int
	Skipped int
	// Checks counts the invariant evaluations.
	Checks int
	// Failovers are how long each cut node's address took to leave each
	// Service's status that had it; Returns how long a healed node took
	// to be back in the daemonset Service's status.
	Failovers, Returns []time.Duration
	Clients            []ClientResult
	// Growth compares the controllers' and probers' goroutines and heap
	// between the first and the last quarter of the run.
	Growth   []Growth
	Failures []Failure
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s of faults: ", r.Seed, r.Duration)
	total := 0
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		fmt.Fprintf(&b, "%s %d, ", k, r.Faults[k])
		total += r.Faults[k]
	}
	fmt.Fprintf(&b, "%d in all (%d skipped); %d invariant checks; failovers %s; returns after a heal %s", total, r.Skipped, r.Checks,
		spread(r.Failovers), spread(r.Returns))
	for _, c := range r.Clients {
		fmt.Fprintf(&b, "; client of %s: %d sent, %d failed (%d in a fault's window, %d during a planned change)", c.Service, c.Sent, c.Failed, c.InWindow, c.InPlanned)
	}
	for _, g := range r.Growth {
		fmt.Fprintf(&b, "; %s", g)
	}
	fmt.Fprintf(&b, "; %d invariant failures", len(r.Failures))
	return b.String()
}

// Run installs pulselb on c, runs the schedule drawn from cfg.Seed while
// checking the invariants, then deletes every Service and checks nothing
// is left. It returns an error when it could not run (setup failed); the
// broken invariants are in the Result.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config) (*Result, error) {
	cfg.defaults()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	addrs, err := watchPodAddresses(watchCtx, c)
	if err != nil {
		return nil, err
	}
	e, err := setup(ctx, c, cfg.Base, cfg.Logf)
	if err != nil {
		return nil, err
	}
	// The vantage runs until the leak check is done: its report must
	// drop the deleted Services too.
	defer e.stop()
	sched := cfg.schedule(e.proxyNodes)
	cfg.Logf("soak seed %d: %d faults over %s (replay with the same seed and duration)", cfg.Seed, len(sched), cfg.Duration)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	s := newState(e, cfg)
	s.addrs = addrs
	for _, svc := range services {
		s.recorders[svc.Name] = scenario.RecordStatus(runCtx, c.Client, Namespace, svc.Name)
	}
	clients, err := s.startClients(runCtx)
	if err != nil {
		return nil, err
	}
	s.start = time.Now()
	checked, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(checked)
		s.check(runCtx)
	}()
	go func() {
		defer close(sampled)
		s.sampleMetrics(runCtx)
	}()
	var wg sync.WaitGroup
	for _, f := range sched {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(s.start.Add(f.At))):
		}
		wg.Go(func() { s.inject(runCtx, f) })
	}
	wg.Wait()
	s.settle(runCtx)
	stopRun()
	<-checked
	<-sampled
	res := &Result{Seed: cfg.Seed, Duration: cfg.Duration, Faults: s.injected, Skipped: s.skipped, Checks: s.checks,
		Failovers: s.failovers, Returns: s.returns}
	res.Clients = s.judgeClients(clients)
	res.Growth = s.checkGrowth()
	s.checkLeaks(ctx)
	res.Failures = s.failures
	return res, nil
}

// startClients starts a client per Service with Client set, in the
// client namespace, resolving through pulselb-dns, and waits for their
// first successes.
func (s *state) startClients(ctx context.Context) (map[string]*traffic.Client, error) {
	out := map[string]*traffic.Client{}
	for _, svc := range services {
		if !svc.Client {
			continue
		}
		cl := traffic.Start(ctx, traffic.Options{
			Name: svc.Name + "." + Namespace + "." + Zone, Port: int(svc.Port), UDP: svc.Protocol == corev1.ProtocolUDP,
			Resolver:    &traffic.Resolver{Servers: s.e.dnsServers, Timeout: 500 * time.Millisecond},
			Timeout:     time.Second,
			MaxRequests: 10_000_000,
			MaxDuration: s.cfg.Duration + 10*time.Minute,
			// 50 requests a second each: enough to see every gap, little
			// of the shared machine's CPU.
			Interval: 20 * time.Millisecond,
			Run:      func(fn func() error) error { return cluster.RunInNamespace(cluster.ClientNamespace, fn) },
		})
		out[svc.Name] = cl
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := cl.WaitSucceeding(wctx, 20)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("client of %s before the faults: %w", svc.Name, err)
		}
	}
	return out, nil
}

// spread summarises ds: how many, median and largest.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("%d (median %s, max %s)", len(ds), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
}
