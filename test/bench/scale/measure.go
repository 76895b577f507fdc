package main

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
	"github.com/pulselb/pulselb/test/bench/procstat"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/deploy"
	"github.com/pulselb/pulselb/test/scenario"
)

const (
	systemNS   = "pulselb-system"
	benchNS    = "bench"
	firstPort  = 10000
	beaconPort = 9472
)

// measure runs one size on a cluster of its own.
func measure(ctx context.Context, s size) (result, error) {
	r := result{size: s}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	klog.SetOutput(os.Stderr)
	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{NoKubeProxy: true, NodeGracePeriod: time.Hour, ControlPlaneQPS: 400,
		WithoutControllers: []string{"deployment-controller", "replicaset-controller"}})
	if err != nil {
		return r, fmt.Errorf("starting the harness: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the harness: %v", err)
		}
	}()
	log.Printf("%s: control plane up in %s (dir %s)", s.name, time.Since(began).Round(time.Millisecond), c.Dir)

	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, fmt.Errorf("creating client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return r, fmt.Errorf("creating dynamic client: %w", err)
	}
	if err := c.CreateNamespaces(ctx, systemNS, benchNS); err != nil {
		return r, err
	}
	if err := deploy.InstallProbeReportCRD(ctx, dyn, systemNS); err != nil {
		return r, err
	}
	reports := v1alpha1.NewClient(dyn)

	cl := newLayout(s.nodes, s.services, *trials)
	if err := cl.create(ctx, cs); err != nil {
		return r, err
	}
	for _, n := range cl.nodes {
		if err := n.Listen(ctx, beaconPort); err != nil {
			return r, err
		}
	}
	real := cl.realAgents()
	r.realAgents = len(real)
	log.Printf("%s: %d nodes, %d Services, %d proxy pods and listeners; victims %v; %d real agents; set up in %s",
		s.name, s.nodes, s.services, 2*s.services, cl.victimNames(), len(real), time.Since(began).Round(time.Second))

	// Cheap nodes: reports written once, Leases renewed every 10 s.
	cheap := newCheapNodes(cs, reports, cl, real)
	if err := cheap.writeReports(ctx); err != nil {
		return r, err
	}
	var wg sync.WaitGroup
	// Registered after cancel: runs first, so the goroutines see ctx done.
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { cheap.renew(ctx) })
	remake := newRemaker(cs)
	wg.Go(func() { remake.run(ctx) })

	// Real agents, sharing informers and a vantage memo as in bench/probers.
	agentReg := prometheus.NewRegistry()
	if err := startAgents(ctx, &wg, cs, reports, cl, real, agentReg); err != nil {
		return r, err
	}
	r.setup = time.Since(began)

	ctl, err := startController(ctx, c)
	if err != nil {
		return r, err
	}
	metricsURL := ctl.MetricsURL()
	defer func() { _ = ctl.Stop(10 * time.Second) }()
	ctlStarted := time.Now()

	statuses := newStatusWatch()
	wg.Go(func() { statuses.run(ctx, cs) })
	votes := newVoteWatch()
	wg.Go(func() { votes.run(ctx, reports) })

	log.Printf("%s: waiting for every Service to be published on both its proxy nodes", s.name)
	if err := waitFor(ctx, *publishWait, func() (bool, error) {
		return statuses.published(cl) == s.services, nil
	}); err != nil {
		return r, fmt.Errorf("waiting for every Service to be published (%d of %d): %w", statuses.published(cl), s.services, err)
	}
	r.publishedAfter = time.Since(ctlStarted)
	// The controller goes on writing for a while (disruption budgets,
	// conditions); the trials start once it has written nothing for 10 s.
	last, quietSince := -1.0, time.Now()
	_ = waitFor(ctx, 5*time.Minute, func() (bool, error) {
		q, err := readQueues(ctx, metricsURL)
		if err != nil {
			return false, nil
		}
		if n := q.writes(); n != last {
			last, quietSince = n, time.Now()
		}
		return time.Since(quietSince) >= 10*time.Second, nil
	})
	log.Printf("%s: every Service published after %s, the controller quiet after %s; warming up %s", s.name,
		r.publishedAfter.Round(time.Second), time.Since(ctlStarted).Round(time.Second), *warmup)
	time.Sleep(*warmup) // a measurement setting, not synchronisation

	cpu0 := processCPU()
	ctl0, err := procstat.CPUSeconds(ctl.Pid())
	if err != nil {
		return r, err
	}
	m0, err := procstat.ReadMachine()
	if err != nil {
		return r, err
	}
	w0, err := apiWrites(ctx, cs)
	if err != nil {
		return r, err
	}
	q0, err := readQueues(ctx, metricsURL)
	if err != nil {
		return r, err
	}
	a0 := agentCounters(agentReg)
	t0 := time.Now()
	services := 0
	ctlLog := &verdictLog{path: ctl.LogPath}
	for i, v := range cl.victims {
		tr, err := trial(ctx, cl, reports, remake, statuses, votes, ctlLog, v)
		if err != nil {
			return r, fmt.Errorf("trial %d (node %s): %w", i+1, nodeName(v), err)
		}
		log.Printf("%s: trial %d, %s: %d Services, first %s, last %s; first Down verdict %s; beacon: 2nd Down vote %s, verdict %s; healed in %s",
			s.name, i+1, nodeName(v), len(tr.perService), ms(tr.first()), ms(tr.last()), ms(tr.verdict), ms(tr.vote), ms(tr.beaconVerdict), ms(tr.healed))
		r.failovers = append(r.failovers, tr.perService...)
		for _, st := range tr.steps {
			if st.vote >= 0 {
				r.svcVotes = append(r.svcVotes, st.vote)
			}
			if st.verdict >= 0 {
				r.svcVerdicts = append(r.svcVerdicts, st.verdict)
				r.svcWrites = append(r.svcWrites, st.write-st.verdict)
			}
		}
		r.trialMin = append(r.trialMin, tr.first())
		r.trialMax = append(r.trialMax, tr.last())
		if tr.vote >= 0 {
			r.votes = append(r.votes, tr.vote)
		}
		if tr.beaconVerdict >= 0 {
			r.beaconVerdicts = append(r.beaconVerdicts, tr.beaconVerdict)
		}
		if tr.verdict >= 0 {
			r.verdicts = append(r.verdicts, tr.verdict)
		}
		r.healed = append(r.healed, tr.healed)
		services += len(tr.perService)
		if tr.timedOut {
			r.timedOut++
		}
	}
	r.window = time.Since(t0)
	r.servicesPerTrl = float64(services) / float64(len(cl.victims))
	ctl1, err := procstat.CPUSeconds(ctl.Pid())
	if err != nil {
		return r, err
	}
	r.controllerCPU = ctl1 - ctl0
	m1, err := procstat.ReadMachine()
	if err != nil {
		return r, err
	}
	r.busy = m1.BusyPercent(m0)
	w1, err := apiWrites(ctx, cs)
	if err != nil {
		return r, err
	}
	r.writes = map[string]float64{}
	for res, n := range w1 {
		if d := n - w0[res]; d > 0 {
			r.writes[res] = d / r.window.Seconds()
		}
	}
	cpu1 := processCPU()
	r.processCPU = map[string]float64{}
	for name, v := range cpu1 {
		r.processCPU[name] = v - cpu0[name]
	}
	q1, err := readQueues(ctx, metricsURL)
	if err != nil {
		return r, err
	}
	r.queues = q1.sub(q0)
	r.load = loadAverage()
	a1 := agentCounters(agentReg)
	r.agentProbes = (a1.probes - a0.probes) / r.window.Seconds()
	r.agentRefreshes = (a1.refreshes - a0.refreshes) / r.window.Seconds() / float64(max(1, len(real)))
	r.remade = remake.count()
	return r, nil
}

// trialResult is one trial's times from the fault; -1 when not seen.
type trialResult struct {
	perService    []time.Duration
	vote, verdict time.Duration
	// beaconVerdict is the controller's Down verdict on the beacon; verdict
	// its first Down verdict on anything of the node (beacon or port).
	beaconVerdict  time.Duration
	healed, cutFor time.Duration
	timedOut       bool
	// steps are each Service's, in the order of perService.
	steps []serviceSteps
}

// serviceSteps are the times from the fault to the steps of one Service's
// failover: the second Down vote of its port on the victim or of the
// victim's beacon, seen on a watch of the reports (the probers' part,
// their report writes and the watch included); the controller's first Down
// verdict on either (its log); the status write without the victim's
// address (a watch). -1 when not seen.
type serviceSteps struct {
	vote, verdict, write time.Duration
}

func (t trialResult) first() time.Duration { return slices.Min(t.perService) }
func (t trialResult) last() time.Duration  { return slices.Max(t.perService) }

// trial blackholes node v, times its Services' status writes, and heals it.
func trial(ctx context.Context, cl *layout, reports *v1alpha1.Client, remake *remaker, statuses *statusWatch, votes *voteWatch, ctlLog *verdictLog, v int) (trialResult, error) {
	tr := trialResult{vote: -1, verdict: -1, beaconVerdict: -1}
	victim := cl.nodes[v]
	svcs := cl.servicesOn(v)
	ip := victim.IP
	remake.hold(nodeName(v))
	t0 := time.Now()
	victim.Blackhole()
	err := waitFor(ctx, *trialTimeout, func() (bool, error) {
		return statuses.allWithout(svcs, ip, t0), nil
	})
	if err != nil {
		// Counted as the timeout, and said why as far as the reports
		// tell: what the victim's beacon vantages report of it.
		tr.timedOut = true
		log.Printf("trial on %s: not every Service dropped %s after %s; the beacon's vantages report: %s",
			nodeName(v), ip, *trialTimeout, diagnose(ctx, reports, cl, v))
	}
	for _, s := range svcs {
		at, ok := statuses.firstWithout(s, ip, t0)
		if !ok {
			at = t0.Add(*trialTimeout)
		}
		tr.perService = append(tr.perService, at.Sub(t0))
	}
	// The node stays cut off until its beacon is Down by quorum too (a
	// dead node stays dead), or 10 s at most: healed at the first status
	// write, it would come back before its beacon was judged.
	_ = waitFor(ctx, 10*time.Second, func() (bool, error) {
		_, ok := ctlLog.first(contract.BeaconKey(nodeName(v)), t0)
		return ok, nil
	})
	beacon := contract.BeaconKey(nodeName(v))
	if at, ok := votes.second(beacon, t0); ok {
		tr.vote = at.Sub(t0)
	}
	// Each Service's path: the first quorum of Down votes (its port on
	// the victim, or the victim's beacon), the controller's first verdict
	// on either, its status write.
	for k, sv := range cl.servicesOnIndex(v) {
		port := targetKey(sv, v)
		vote, verdict := time.Duration(-1), time.Duration(-1)
		if at, ok := earliest(func() (time.Time, bool) { return votes.second(port, t0) },
			func() (time.Time, bool) { return votes.second(beacon, t0) }); ok {
			vote = at.Sub(t0)
		}
		if at, ok := earliest(func() (time.Time, bool) { return ctlLog.first(port, t0) },
			func() (time.Time, bool) { return ctlLog.first(beacon, t0) }); ok {
			verdict = at.Sub(t0)
		}
		tr.steps = append(tr.steps, serviceSteps{vote: vote, verdict: verdict, write: tr.perService[k]})
	}
	if at, ok := ctlLog.first(beacon, t0); ok {
		tr.beaconVerdict = at.Sub(t0)
	}
	if at, ok := ctlLog.first("@"+nodeName(v), t0); ok {
		tr.verdict = at.Sub(t0)
	}
	h0 := time.Now()
	tr.cutFor = h0.Sub(t0)
	if err := victim.Listen(ctx, beaconPort); err != nil {
		return tr, err
	}
	// The proxy pods the controller deleted while the node was cut off
	// are made again now, as a ReplicaSet would.
	if err := remake.release(ctx, nodeName(v)); err != nil {
		return tr, fmt.Errorf("making the victim's deleted proxy pods again: %w", err)
	}
	if err := waitFor(ctx, *healTimeout, func() (bool, error) {
		return statuses.allWith(svcs, ip), nil
	}); err != nil {
		log.Printf("trial on %s: %s not back in every Service after %s; going on", nodeName(v), ip, *healTimeout)
	}
	tr.healed = time.Since(h0)
	// The next victim is another node; the quiet seconds let this one's
	// recovery (its label, its report) settle first.
	time.Sleep(5 * time.Second)
	return tr, nil
}

// startAgents runs a prober agent, probing every second, for each node in
// real.
func startAgents(ctx context.Context, wg *sync.WaitGroup, cs kubernetes.Interface, reports *v1alpha1.Client, cl *layout, real []int, reg *prometheus.Registry) error {
	clusterInf := informers.NewSharedInformerFactory(cs, 0)
	system := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(systemNS))
	memo := &contract.VantageMemo{}
	probeMetrics := prober.NewMetrics()
	agentMetrics := agent.NewMetrics()
	if err := agentMetrics.RegisterMetrics(reg); err != nil {
		return err
	}
	if err := probeMetrics.RegisterMetrics(reg); err != nil {
		return err
	}
	var as []*agent.Agent
	for _, i := range real {
		cfg := agent.Config{Node: nodeName(i), Namespace: systemNS, Vantages: contract.DefaultVantages, VantageMemo: memo,
			BeaconPort: beaconPort, Metrics: agentMetrics, Leases: cs.CoordinationV1().Leases(systemNS),
			Scheduler:   prober.Config{Interval: time.Second, Metrics: probeMetrics},
			SourceAddrs: []netip.Addr{netip.MustParseAddr(loopnodes.IP(i))}}
		a, err := agent.New(ctx, clusterInf, system, reports, cfg)
		if err != nil {
			return err
		}
		as = append(as, a)
	}
	clusterInf.Start(ctx.Done())
	system.Start(ctx.Done())
	for _, a := range as {
		wg.Go(func() {
			if err := a.Run(ctx); err != nil {
				log.Printf("agent stopped: %v", err)
			}
		})
	}
	wg.Go(func() {
		<-ctx.Done()
		clusterInf.Shutdown()
		system.Shutdown()
	})
	return nil
}

// startController runs `pulselb controller --probe-reports`, serving every
// Service.
func startController(ctx context.Context, c *cluster.Cluster) (*scenario.Controller, error) {
	p, err := scenario.StartController(ctx, c, scenario.ControllerOptions{
		Namespace: systemNS, Ready: 60 * time.Second,
		Args: []string{"--probe-reports", "--dashboard=false"},
	})
	if err != nil {
		return nil, err
	}
	log.Printf("pulselb controller (pid %d), log %s", p.Pid(), p.LogPath)
	return p, nil
}

// waitFor polls cond every 50 ms until it holds, fails, or timeout
// passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return scenario.PollUntil(ctx, 50*time.Millisecond, timeout, "the condition", cond)
}

// ingressIPs returns the addresses of a Service's status.
func ingressIPs(svc *corev1.Service) []string {
	var out []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// diagnose says what the vantages of node v's beacon report of it now,
// and when each last wrote.
func diagnose(ctx context.Context, reports *v1alpha1.Client, cl *layout, v int) string {
	var parts []string
	for _, n := range cl.vantages(contract.BeaconKey(nodeName(v)), nodeName(v)) {
		r, err := reports.Get(ctx, systemNS, n)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		obs := "no observation"
		for _, b := range r.Status.Beacons {
			if b.Node == nodeName(v) {
				obs = fmt.Sprintf("%s %s %q", b.State, b.Outcome, b.Message)
			}
		}
		parts = append(parts, fmt.Sprintf("%s (written %s ago): %s", n, time.Since(r.Status.HeartbeatTime.Time).Round(time.Second), obs))
	}
	return strings.Join(parts, "; ")
}

type agentCount struct{ probes, refreshes float64 }

// agentCounters reads the real agents' probes and target recomputations.
func agentCounters(reg *prometheus.Registry) agentCount {
	var out agentCount
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "pulselb_prober_probes_total":
				out.probes += m.GetCounter().GetValue()
			case "pulselb_prober_target_refreshes_total":
				out.refreshes += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
