package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/test/bench/apimetrics"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/scenario"
)

// result is one mode's measurements.
type result struct {
	mode             string
	steady, failover rates
	// steadyReasons and failoverReasons count the agents' report writes
	// in each window by reason (pulselb_prober_report_write_reasons_total).
	steadyReasons, failoverReasons map[string]float64
	// steadyRefreshes and failoverRefreshes count the agents' target
	// recomputations in each window (pulselb_prober_target_refreshes_total).
	steadyRefreshes, failoverRefreshes float64
	failoverTime                       time.Duration
	controllerCPU                      float64 // cores, over the steady window
	heapPerAgent, rssBase              uint64
	rssAgents                          uint64
}

// measure runs the agents in mode and measures the steady state and a
// failover.
func measure(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, nodes []*loopnodes.Node, ctlPid int, mode string, base rates) (result, error) {
	r := result{mode: mode}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	r.rssBase = rss()

	agentMetrics := agent.NewMetrics()
	agentRegistry := prometheus.NewRegistry()
	if err := agentMetrics.RegisterMetrics(agentRegistry); err != nil {
		return r, err
	}
	counts := func() (map[string]float64, float64) { return agentCounts(agentRegistry) }
	actx, stop := context.WithCancel(ctx)
	cluster := informers.NewSharedInformerFactory(cs, 0)
	system := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(systemNS))
	reports := v1alpha1.NewClient(dyn)
	probeMetrics := prober.NewMetrics()
	var wg sync.WaitGroup
	// Stop the agents, then the informers, whose Shutdown waits for the
	// stop channel.
	defer func() {
		stop()
		wg.Wait()
		cluster.Shutdown()
		system.Shutdown()
	}()
	// One vantage memo for all agents: each agent assigns the same targets
	// from the same candidates, and computing that once per agent would
	// cost this process agents × targets × candidates hashes per change.
	memo := &contract.VantageMemo{}
	var as []*agent.Agent
	for i := range nodes {
		// Each agent probes from its own node's address, as a prober pod
		// does: from one address, 1,000 agents' probes would share one
		// range of ephemeral ports and fill it with TIME-WAIT sockets.
		cfg := agent.Config{Node: nodeName(i), Namespace: systemNS, Vantages: contract.DefaultVantages, VantageMemo: memo, BeaconPort: beaconPort, Metrics: agentMetrics,
			Scheduler:   prober.Config{Interval: *beaconInterval, Metrics: probeMetrics},
			SourceAddrs: []netip.Addr{netip.MustParseAddr(loopnodes.IP(i))}}
		if mode == "lease" {
			cfg.Leases = cs.CoordinationV1().Leases(systemNS)
		}
		a, err := agent.New(actx, cluster, system, reports, cfg)
		if err != nil {
			return r, err
		}
		as = append(as, a)
	}
	cluster.Start(actx.Done())
	system.Start(actx.Done())
	for _, a := range as {
		wg.Go(func() {
			if err := a.Run(actx); err != nil {
				log.Printf("agent stopped: %v", err)
			}
		})
	}
	started := time.Now()
	log.Printf("%s: %d agents started; waiting for every report", mode, len(as))
	if err := waitFor(ctx, 10*time.Minute, func() (bool, error) {
		list, err := reports.List(ctx, systemNS, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		fresh := 0
		for _, rep := range list.Items {
			if rep.Status.HeartbeatTime.After(started) {
				fresh++
			}
		}
		return fresh == len(as), nil
	}); err != nil {
		return r, fmt.Errorf("waiting for every agent's report: %w", err)
	}
	log.Printf("%s: every agent wrote its report after %s; warming up %s", mode, time.Since(started).Round(time.Second), *warmup)
	time.Sleep(*warmup) // lets every target conclude; a measurement setting, not synchronisation

	runtime.ReadMemStats(&ms)
	if ms.HeapInuse > heapBefore {
		r.heapPerAgent = (ms.HeapInuse - heapBefore) / uint64(len(as))
	}
	r.rssAgents = rss()

	log.Printf("%s: measuring %s of steady state", mode, *window)
	cpu0, err := procstat.CPUSeconds(ctlPid)
	if err != nil {
		return r, fmt.Errorf("reading the controller's CPU time: %w", err)
	}
	before, err := scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons0, refreshes0 := counts()
	time.Sleep(*window) // the measurement window
	after, err := scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons1, refreshes1 := counts()
	r.steadyReasons, r.steadyRefreshes = subReasons(reasons1, reasons0), refreshes1-refreshes0
	cpu1, err := procstat.CPUSeconds(ctlPid)
	if err != nil {
		return r, fmt.Errorf("reading the controller's CPU time: %w", err)
	}
	r.controllerCPU = (cpu1 - cpu0) / window.Seconds()
	// Logged at once: a later step may fail and lose the rest.
	log.Printf("%s: steady %+v; controller %.3f cores; report writes by reason %v; target recomputations %.0f", mode, after.sub(before).minus(base).pick(),
		r.controllerCPU, r.steadyReasons, r.steadyRefreshes)
	r.steady = after.sub(before).minus(base)

	// Failover: node 0 stops answering; its 3 beacon vantages see it.
	victim := nodes[0]
	before, err = scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	reasons0, refreshes0 = counts()
	t0 := time.Now()
	victim.Blackhole()
	log.Printf("%s: blackholed %s (%s)", mode, nodeName(0), victim.IP)
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := beaconDownVotes(ctx, reports, nodeName(0))
		return n >= 2, err
	}); err != nil {
		return r, fmt.Errorf("waiting for 2 Down votes on %s: %w", nodeName(0), err)
	}
	r.failoverTime = time.Since(t0)
	if rest := *failoverWindow - time.Since(t0); rest > 0 {
		time.Sleep(rest) // the rest of the measurement window
	}
	after, err = scrape(ctx, cs)
	if err != nil {
		return r, err
	}
	r.failover = after.sub(before).minus(base)
	reasons1, refreshes1 = counts()
	r.failoverReasons, r.failoverRefreshes = subReasons(reasons1, reasons0), refreshes1-refreshes0
	log.Printf("%s: failover %+v; report writes by reason %v; target recomputations %.0f", mode, r.failover.pick(), r.failoverReasons, r.failoverRefreshes)
	log.Printf("%s: 2 of 3 vantages reported %s Down after %s", mode, nodeName(0), r.failoverTime.Round(time.Millisecond))
	if err := victim.Listen(ctx, beaconPort); err != nil {
		return r, err
	}
	if err := waitFor(ctx, 2*time.Minute, func() (bool, error) {
		n, err := beaconDownVotes(ctx, reports, nodeName(0))
		return n == 0, err
	}); err != nil {
		return r, fmt.Errorf("waiting for %s to recover: %w", nodeName(0), err)
	}
	return r, nil
}

// beaconDownVotes counts the reports that say node's beacon is Down.
func beaconDownVotes(ctx context.Context, reports *v1alpha1.Client, node string) (int, error) {
	list, err := reports.List(ctx, systemNS, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range list.Items {
		for _, b := range r.Status.Beacons {
			if b.Node == node && b.State == v1alpha1.StateDown {
				n++
			}
		}
	}
	return n, nil
}

// waitFor polls cond every 250 ms until it holds, fails, or timeout
// passes; the API server's 429s are no failure.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return scenario.PollUntil(ctx, 250*time.Millisecond, timeout, "the condition", func() (bool, error) {
		ok, err := cond()
		if apierrors.IsTooManyRequests(err) {
			return false, nil
		}
		return ok, err
	})
}

// counters are the API server's counters of one resource.
type counters struct {
	writes, bodyBytes, watchEvents, watchBytes float64
}

// snapshot is the API server's counters by resource, and when they were
// asked for.
type snapshot struct {
	at  time.Time
	res map[string]counters
}

// rates are counters per second by resource.
type rates map[string]counters

// scrape reads the API server's counters by resource.
func scrape(ctx context.Context, cs kubernetes.Interface) (snapshot, error) {
	at := time.Now()
	metrics, err := apimetrics.Read(ctx, cs)
	if err != nil {
		return snapshot{}, err
	}
	out := snapshot{at: at, res: map[string]counters{}}
	add := func(name string, keep func(l map[string]string) bool, field func(*counters) *float64) {
		for _, m := range metrics[name] {
			res := m.Labels["resource"]
			if res == "" || (keep != nil && !keep(m.Labels)) {
				continue
			}
			c := out.res[res]
			*field(&c) += m.Value
			out.res[res] = c
		}
	}
	add("apiserver_request_total", func(l map[string]string) bool {
		return (l["verb"] == "POST" || l["verb"] == "PUT" || l["verb"] == "PATCH") && l["subresource"] == ""
	}, func(c *counters) *float64 { return &c.writes })
	add("apiserver_request_body_size_bytes", nil, func(c *counters) *float64 { return &c.bodyBytes })
	add("apiserver_watch_events_total", nil, func(c *counters) *float64 { return &c.watchEvents })
	add("apiserver_watch_events_sizes", nil, func(c *counters) *float64 { return &c.watchBytes })
	return out, nil
}

// sub returns the rates from before to s, over the time between the two
// requests (a scrape of a busy API server takes seconds).
func (s snapshot) sub(before snapshot) rates {
	out := rates{}
	sec := s.at.Sub(before.at).Seconds()
	for res, a := range s.res {
		b := before.res[res]
		out[res] = counters{(a.writes - b.writes) / sec, (a.bodyBytes - b.bodyBytes) / sec,
			(a.watchEvents - b.watchEvents) / sec, (a.watchBytes - b.watchBytes) / sec}
	}
	return out
}

// pick returns the rates of the resources the heartbeats write.
func (r rates) pick() map[string]counters {
	return map[string]counters{"leases": r["leases"], "probereports": r["probereports"]}
}

// minus returns r less the baseline rates, never below 0.
func (r rates) minus(base rates) rates {
	out := rates{}
	for res, a := range r {
		b := base[res]
		out[res] = counters{max(0, a.writes-b.writes), max(0, a.bodyBytes-b.bodyBytes), max(0, a.watchEvents-b.watchEvents), max(0, a.watchBytes-b.watchBytes)}
	}
	return out
}

// rss returns this process' resident set size in bytes.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// agentCounts reads from reg the agents' report writes by reason and
// their target recomputations, summed over the agents.
func agentCounts(reg *prometheus.Registry) (reasons map[string]float64, refreshes float64) {
	reasons = map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		log.Printf("reading agent metrics: %v", err)
		return reasons, 0
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "pulselb_prober_report_write_reasons_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						reasons[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		case "pulselb_prober_target_refreshes_total":
			for _, m := range mf.GetMetric() {
				refreshes += m.GetCounter().GetValue()
			}
		}
	}
	return reasons, refreshes
}

// subReasons returns a - b by reason, leaving out zeros.
func subReasons(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
