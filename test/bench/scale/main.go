// Command scale measures failover at the size of a real cluster (run as
// root): a node is blackholed, and the benchmark times from the fault to
// the first status write of each of the node's Services without its
// address, as seen on a watch on the API server, at -nodes nodes with
// -services LoadBalancer Services (default 1,000 and 2,000), and in the
// same run the same measurement at -small-nodes and -small-services (10
// and 20), the anchor: the ratio says what size costs.
//
// Each size gets a harness control plane of its own, without node
// processes (as bench/probers): Node objects made Ready once with an
// InternalIP 127.x.y.z (all of 127/8 is loopback), a node grace period of an
// hour, and kube-controller-manager without its Deployment and ReplicaSet
// controllers, because the benchmark makes the proxy pods itself: Service
// i gets two pod objects (Running, Ready) with the labels the controller
// selects a Service's proxies by, on nodes i and i+nodes/2, and each a
// loopback listener on its node's address and the Service's port (10000+i),
// standing in for the proxy; each node has a prober pod object and a
// beacon listener on port 9472.
//
// `pulselb controller --probe-reports` runs as a process and serves every
// Service (no --class-only): it creates their Deployments, judges the
// reports and writes their status, as it would in a cluster of that size.
//
// Probers. The victims of the -trials trials are chosen first (spread over
// the nodes); every node that is a vantage of a victim's beacon or of one
// of its Service ports (the assignment is contract.Vantages, the code the
// probers and the controller run) runs a real prober agent (prober/agent,
// the code of `pulselb prober`) in this process, probing beacons and
// targets every second, the defaults. Every other node is cheap: its
// ProbeReport, with every target assigned to it Up, is written once, and
// its Lease is renewed every 10 s (contract.DefaultHeartbeat) without probing,
// so the API server and the controller carry what 1,000 probers cost them
// in steady state.
//
// A trial closes the victim's beacon and proxy listeners (probes are
// refused), waits until each of its Services has a status without the
// victim's address, then opens them again and waits until every one has it
// back. Printed per size: the failover's p50 and max over every (Service,
// trial), the steps (2 Down votes in the reports; the controller's verdict,
// from its log; the status write), for the node's beacon and for each
// Service (its port or the beacon, whichever first), the controller's CPU over the trials,
// the API server's writes per second by resource, the CPU of the control
// plane's processes and the machine's load.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

var (
	nodesFlag     = flag.Int("nodes", 1000, "nodes of the large cluster")
	servicesFlag  = flag.Int("services", 2000, "LoadBalancer Services of the large cluster, two proxy pods each")
	smallNodes    = flag.Int("small-nodes", 10, "nodes of the small cluster, the anchor")
	smallServices = flag.Int("small-services", 20, "Services of the small cluster")
	trials        = flag.Int("trials", 10, "blackhole trials at each size, each on another node")
	sizes         = flag.String("sizes", "small,large", "sizes to run, in order")
	warmup        = flag.Duration("warmup", 30*time.Second, "time after every Service is published before the first trial")
	workers       = flag.Int("create-workers", 32, "parallel object creations during setup")
	publishWait   = flag.Duration("publish-timeout", 20*time.Minute, "how long to wait for every Service to be published")
	trialTimeout  = flag.Duration("trial-timeout", time.Minute, "how long a trial waits for the status writes")
	healTimeout   = flag.Duration("heal-timeout", time.Minute, "how long to wait for a healed node's addresses to return")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if os.Geteuid() != 0 {
		log.Fatal("bench/scale: needs root for the harness")
	}
	switch {
	case *nodesFlag < 4 || *nodesFlag > 60000 || *smallNodes < 4 || *smallNodes > 60000:
		log.Fatal("bench/scale: -nodes and -small-nodes: want 4..60000")
	case *servicesFlag < 1 || *smallServices < 1 || *servicesFlag > 50000 || *smallServices > 50000:
		log.Fatal("bench/scale: -services and -small-services: want 1..50000")
	case *trials < 1:
		log.Fatal("bench/scale: -trials: want at least 1")
	}
	var runs []size
	for s := range strings.SplitSeq(*sizes, ",") {
		switch s {
		case "small":
			runs = append(runs, size{name: "small", nodes: *smallNodes, services: *smallServices})
		case "large":
			runs = append(runs, size{name: "large", nodes: *nodesFlag, services: *servicesFlag})
		default:
			log.Fatalf("bench/scale: -sizes=%q: want small and/or large, comma-separated", *sizes)
		}
	}
	if err := raiseFileLimit(runs); err != nil {
		log.Fatalf("bench/scale: %v", err)
	}
	ctx := context.Background()
	var results []result
	for _, s := range runs {
		r, err := measure(ctx, s)
		if err != nil {
			log.Printf("bench/scale: %s (%d nodes, %d Services): %v", s.name, s.nodes, s.services, err)
			results = append(results, result{size: s, err: err})
			continue
		}
		results = append(results, r)
		// At once, in case a later size fails.
		printResult(r)
	}
	printSummary(results)
	for _, r := range results {
		if r.err != nil {
			os.Exit(1)
		}
	}
}

// size is one cluster size measured.
type size struct {
	name            string
	nodes, services int
}

// result is what one size measured.
type result struct {
	size
	err error
	// failovers are the times from the fault to each victim Service's
	// first status without the victim's address, over every trial.
	failovers []time.Duration
	// trialMax is each trial's last Service, trialMin its first.
	trialMax, trialMin []time.Duration
	// votes and verdicts are, per trial, the fault to the second Down vote
	// on the victim's beacon received on a watch, and to the controller's
	// Down verdict (its log).
	votes, verdicts, beaconVerdicts []time.Duration
	// svcVotes and svcVerdicts are, per Service and trial, the fault to the
	// second Down vote and to the controller's Down verdict on its port on
	// the victim or the victim's beacon, whichever came first; svcWrites
	// that verdict to the status write (serviceSteps).
	svcVotes, svcVerdicts, svcWrites []time.Duration
	realAgents                       int
	servicesPerTrl                   float64
	window                           time.Duration
	controllerCPU                    float64 // seconds over the trials
	processCPU                       map[string]float64
	writes                           map[string]float64 // API server writes per second by resource, over the trials
	busy                             float64            // machine busy % over the trials
	load                             string
	publishedAfter                   time.Duration
	healed                           []time.Duration
	queues                           queueStats
	setup                            time.Duration
	timedOut                         int
	// remade counts the proxy pods the controller deleted, which the
	// benchmark made again (remaker), over the whole run of the size.
	remade int
	// agentProbes is the real agents' probes per second, agentRefreshes
	// their target recomputations per agent per second.
	agentProbes, agentRefreshes float64
}

func printResult(r result) {
	fmt.Printf("\nbench/scale %s: %d nodes, %d Services, %d trials (%d real prober agents at 1 s, %d cheap nodes), %d CPUs, %s\n",
		r.name, r.nodes, r.services, len(r.trialMax), r.realAgents, r.nodes-r.realAgents, runtime.NumCPU(), runtime.Version())
	fmt.Printf("  set up in %s; every Service published %s after the controller started\n", r.setup.Round(time.Second), r.publishedAfter.Round(time.Second))
	fmt.Printf("  failover per Service (%d samples, %.1f Services per victim): p50 %s, p90 %s, max %s\n", len(r.failovers), r.servicesPerTrl,
		ms(quantile(r.failovers, 0.5)), ms(quantile(r.failovers, 0.9)), ms(quantile(r.failovers, 1)))
	fmt.Printf("  per trial, first Service: p50 %s, max %s; last Service: p50 %s, max %s\n",
		ms(quantile(r.trialMin, 0.5)), ms(quantile(r.trialMin, 1)), ms(quantile(r.trialMax, 0.5)), ms(quantile(r.trialMax, 1)))
	fmt.Printf("  steps from the fault, p50 (max): controller's first Down verdict on the node (beacon or port, its log) %s (%s); first status write %s (%s); "+
		"the beacon alone: 2nd Down vote on a report watch %s (%s), verdict %s (%s)\n",
		ms(quantile(r.verdicts, 0.5)), ms(quantile(r.verdicts, 1)), ms(quantile(r.trialMin, 0.5)), ms(quantile(r.trialMin, 1)),
		ms(quantile(r.votes, 0.5)), ms(quantile(r.votes, 1)), ms(quantile(r.beaconVerdicts, 0.5)), ms(quantile(r.beaconVerdicts, 1)))
	fmt.Printf("  per Service, p50 (max): fault → 2nd Down vote on its port or the node's beacon (report watch) %s (%s); fault → the controller's verdict on either (its log) %s (%s); that verdict → the status write (a watch) %s (%s)\n",
		ms(quantile(r.svcVotes, 0.5)), ms(quantile(r.svcVotes, 1)), ms(quantile(r.svcVerdicts, 0.5)), ms(quantile(r.svcVerdicts, 1)),
		ms(quantile(r.svcWrites, 0.5)), ms(quantile(r.svcWrites, 1)))
	fmt.Printf("  trials: %s\n", joinDurations(r.trialMax))
	fmt.Printf("  heal (victim's addresses back): p50 %s, max %s\n", ms(quantile(r.healed, 0.5)), ms(quantile(r.healed, 1)))
	fmt.Printf("  over the %s of the trials: controller CPU %.1f s (%.3f cores); machine %.0f %% busy of %d CPUs; load average after: %s\n",
		r.window.Round(time.Second), r.controllerCPU, r.controllerCPU/r.window.Seconds(), r.busy, runtime.NumCPU(), r.load)
	fmt.Printf("  CPU by process (cores): %s\n", formatCPU(r.processCPU, r.window))
	fmt.Printf("  API server writes/s: %s\n", formatWrites(r.writes))
	fmt.Printf("  controller: %s\n", r.queues)
	fmt.Printf("  real agents: %.0f probes/s; %.2f target recomputations per agent per second\n", r.agentProbes, r.agentRefreshes)
	fmt.Printf("  proxy pods the controller deleted (restarts of proxies it judged broken), made again by the benchmark: %d\n", r.remade)
	if r.timedOut > 0 {
		fmt.Printf("  %d of %d trials timed out after %s: their unfinished Services count as %s above\n", r.timedOut, len(r.trialMax), *trialTimeout, *trialTimeout)
	}
}

func printSummary(results []result) {
	fmt.Printf("\n| size | nodes | Services | trials | failover p50 | failover max | per trial, last Service p50 / max | first Down verdict p50 | controller CPU (cores) | API writes/s | machine busy |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.err != nil {
			fmt.Printf("| %s | %d | %d | failed: %v |\n", r.name, r.nodes, r.services, r.err)
			continue
		}
		fmt.Printf("| %s | %d | %d | %d | %s | %s | %s / %s | %s | %.3f | %.1f | %.0f %% |\n", r.name, r.nodes, r.services, len(r.trialMax),
			ms(quantile(r.failovers, 0.5)), ms(quantile(r.failovers, 1)), ms(quantile(r.trialMax, 0.5)), ms(quantile(r.trialMax, 1)),
			ms(quantile(r.verdicts, 0.5)), r.controllerCPU/r.window.Seconds(), total(r.writes), r.busy)
	}
	var small, large *result
	for i := range results {
		switch {
		case results[i].err != nil:
		case results[i].name == "small":
			small = &results[i]
		case results[i].name == "large":
			large = &results[i]
		}
	}
	if small == nil || large == nil {
		fmt.Println("\nno ratio: both sizes must complete")
		return
	}
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", a.Seconds()/b.Seconds())
	}
	fmt.Printf("\nratio large/small (%d/%d nodes): failover p50 %s, max %s; controller CPU %.1fx; API writes/s %.1fx\n",
		large.nodes, small.nodes, ratio(quantile(large.failovers, 0.5), quantile(small.failovers, 0.5)),
		ratio(quantile(large.failovers, 1), quantile(small.failovers, 1)),
		(large.controllerCPU/large.window.Seconds())/max(1e-9, small.controllerCPU/small.window.Seconds()),
		total(large.writes)/max(1e-9, total(small.writes)))
	p50, mx := quantile(large.failovers, 0.5), quantile(large.failovers, 1)
	verdict := "met"
	if p50 > time.Second || mx > 1500*time.Millisecond {
		verdict = "MISSED"
	}
	fmt.Printf("target at %d nodes: p50 <= 1 s, max <= 1.5 s: %s (p50 %s, max %s)\n", large.nodes, verdict, ms(p50), ms(mx))
}

func ms(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func joinDurations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2f", d.Seconds())
	}
	return strings.Join(parts, " ") + " s"
}

// quantile returns the q-quantile of ds (nearest rank), or -1 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}
