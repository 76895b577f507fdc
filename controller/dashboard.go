package controller

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/status"
)

// DashboardConfig configures a DashboardFeed.
type DashboardConfig struct {
	// Instance names this replica on the page (its pod name).
	Instance string
	// Zone is the DNS zone served with --dns-zone; when set, each Service
	// lists its names in it.
	Zone string
	// MinInterval is the least time between two rebuilds, however often
	// the caches change (default 250ms: at most 4 a second). A rebuild
	// that took longer than MinInterval/dashboardShare waits that many
	// times its own duration, so that the page never takes more than a
	// share of a core from the controller (at 2,000 Services it took a
	// quarter of the controller's CPU at 4 rebuilds a second).
	MinInterval time.Duration
	// Resync rebuilds without a cache change, so that reports going stale
	// show (default 2s).
	Resync time.Duration
}

// Dashboard feed defaults.
const (
	DefaultDashboardMinInterval = 250 * time.Millisecond
	DefaultDashboardResync      = 2 * time.Second
)

// dashboardShare is how many times its own duration a rebuild waits at
// least before the next: the feed uses at most 1/dashboardShare of a core.
const dashboardShare = 20

// DashboardFeed builds the dashboard's State from the controller's
// informer caches and hands it to a dashboard.Dashboard. It judges
// nothing itself: it shows the targets and verdicts of the controller's
// own round of verdicts (Controller.evaluate, which every replica runs,
// leading or not), so that the page shows what the leader decides, with
// the same flap damping, and the reports are judged once.
type DashboardFeed struct {
	c     *Controller
	dash  *dashboard.Dashboard
	cfg   DashboardConfig
	now   func() time.Time
	dirty chan struct{}

	// Owned by the goroutine calling build.
	shown       map[string]shown
	transitions []dashboard.Transition
	// parsed holds each Service's settings: a build reads every Service,
	// and parses only those whose annotations or ports changed.
	parsed contract.ParseCache
	// listed holds the settings of the Services whose targets a build
	// lists itself, without the health pipeline (listTargets).
	listed contract.ParseCache
}

// shown is what the page shows about a target or beacon.
type shown struct {
	// state is the verdict, or Down when the node's beacon is down or the
	// node is labelled unhealthy.
	state string
	since time.Time
	// failing is the first failed probe behind a Down state.
	failing time.Time
}

// NewDashboardFeed returns a feed of d from c's caches. cluster and system
// are the factories c was made from; their informers, c's ProbeReport
// informer and c's rounds of verdicts trigger rebuilds. Call Run.
func NewDashboardFeed(c *Controller, cluster, system informers.SharedInformerFactory, d *dashboard.Dashboard, cfg DashboardConfig) (*DashboardFeed, error) {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultDashboardMinInterval
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultDashboardResync
	}
	f := &DashboardFeed{c: c, dash: d, cfg: cfg, now: time.Now, dirty: make(chan struct{}, 1), shown: map[string]shown{}}
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { f.poke() },
		UpdateFunc: func(any, any) { f.poke() },
		DeleteFunc: func(any) { f.poke() },
	}
	c.onJudged(f.poke)
	infs := []cache.SharedIndexInformer{
		cluster.Core().V1().Services().Informer(),
		cluster.Core().V1().Nodes().Informer(),
		system.Core().V1().Pods().Informer(),
	}
	if c.cfg.Health.Reports != nil {
		infs = append(infs, c.cfg.Health.Reports)
	}
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, fmt.Errorf("adding dashboard event handler: %w", err)
		}
	}
	// Prober Leases renew every few seconds: only one that appears, goes
	// or comes back from lapsing changes what the page shows.
	if c.cfg.Health.Leases != nil {
		if _, err := c.cfg.Health.Leases.AddEventHandler(c.leaseRenewed(f.poke)); err != nil {
			return nil, fmt.Errorf("adding dashboard event handler: %w", err)
		}
	}
	return f, nil
}

func (f *DashboardFeed) poke() {
	select {
	case f.dirty <- struct{}{}:
	default:
	}
}

// Run waits for the caches and rebuilds the State after each cache change,
// at most once per MinInterval, and every Resync, until ctx is done.
func (f *DashboardFeed) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), f.c.synced...) {
		return fmt.Errorf("waiting for dashboard caches to sync: %w", ctx.Err())
	}
	resync := time.NewTicker(f.cfg.Resync)
	defer resync.Stop()
	limit := time.NewTimer(0)
	defer limit.Stop()
	failing := false
	for {
		began := time.Now()
		st, err := f.build()
		switch {
		case err != nil && !failing:
			// Logged once per run of failures; the page keeps the last State.
			logger.Error(err, "Building dashboard state failed")
			failing = true
		case err == nil:
			if failing {
				logger.Info("Building dashboard state works again")
			}
			failing = false
			f.dash.Update(st)
		}
		// Rate limit: no rebuild before MinInterval (or dashboardShare
		// times this one's duration) has passed, then one for all the
		// changes that came meanwhile.
		limit.Reset(max(f.cfg.MinInterval, dashboardShare*time.Since(began)))
		select {
		case <-ctx.Done():
			return nil
		case <-limit.C:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-f.dirty:
		case <-resync.C:
		}
	}
}

// build returns the State of every Service the controller serves: it
// reads the caches into feedInputs, plans what to show (planFeed), and
// stores the plan's shown states and transitions for the next build
// (apply).
func (f *DashboardFeed) build() (dashboard.State, error) {
	defer f.parsed.Prune()
	c := f.c
	now := f.now()
	st := dashboard.State{Role: "controller", Instance: f.cfg.Instance, GeneratedAt: now}
	in, err := f.inputs(now)
	if err != nil {
		return st, err
	}
	plan := planFeed(in, f.shown)
	st.ExternalVantages = in.external
	st.Vantages = plan.vantages
	st.Transitions = f.apply(plan)

	svcs, err := c.services.List(everything)
	if err != nil {
		return st, fmt.Errorf("listing services: %w", err)
	}
	for _, svc := range svcs {
		if !c.cfg.Services.Active(svc) {
			continue
		}
		st.Services = append(st.Services, f.service(svc, plan.targets[cache.MetaObjectToName(svc)]))
	}
	slices.SortFunc(st.Services, func(a, b dashboard.Service) int { return strings.Compare(a.Name, b.Name) })
	return st, nil
}

// feedInputs is what a build reads from the caches at now, for planFeed.
type feedInputs struct {
	now time.Time
	// targets are the targets to show, beacons and Services' ports, in
	// any order.
	targets []healthTarget
	// verdict returns a target's judgement by key; nil when the health
	// checks are off.
	verdict func(key string) status.Judgement
	reports status.Reports
	// external names the external vantages that report; outside holds
	// the Services they probe (external-vantages not off).
	external []string
	outside  map[cache.ObjectName]bool
	// nodeAddr holds each node's address; out says why a node's
	// addresses are out of every status whatever the verdicts.
	nodeAddr, out map[string]string
}

// inputs reads the caches into what planFeed needs at now.
func (f *DashboardFeed) inputs(now time.Time) (feedInputs, error) {
	c := f.c
	in := feedInputs{now: now, nodeAddr: map[string]string{}, out: map[string]string{}}
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return in, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes {
		in.nodeAddr[n.Name] = nodeAddress(n)
		if _, ok := n.Labels[contract.LabelUnhealthy]; ok {
			in.out[n.Name] = "node is labelled " + contract.LabelUnhealthy
		} else if r := leavingReason(n); r != "" {
			in.out[n.Name] = r
		}
	}
	in.reports = c.reportIndex(now)
	if c.reports != nil {
		in.verdict = c.verdicts.Verdict
	}
	// The targets the controller judged last, and their verdicts; before
	// the first round, or without the health pipeline, the targets alone.
	judged, ok := c.judgedTargets()
	in.targets = judged
	if !ok {
		in.targets, _, err = c.listTargets(&f.listed)
		f.listed.Prune()
		if err != nil {
			return in, err
		}
	}
	in.external = in.reports.ExternalVantages()
	if len(in.external) == 0 {
		return in, nil
	}
	in.outside = map[cache.ObjectName]bool{}
	for _, t := range in.targets {
		if _, done := in.outside[t.service]; done || t.Beacon {
			continue
		}
		v := false
		if svc, err := c.services.Services(t.service.Namespace).Get(t.service.Name); err == nil {
			settings, _ := f.parsed.Parse(svc) // sync reports the problems
			v = settings.ExternalVantages != contract.ExternalOff
		}
		in.outside[t.service] = v
	}
	return in, nil
}

// feedPlan is what a build shows of the targets (planFeed).
type feedPlan struct {
	// shown is what each target and beacon shows, for the next plan.
	shown map[string]shown
	// transitions are the state changes since the last plan, newest
	// first.
	transitions []dashboard.Transition
	// targets holds each Service's targets, unsorted.
	targets map[cache.ObjectName][]dashboard.Target
	// vantages names every vantage of the targets, sorted.
	vantages []string
}

// planFeed returns what to show of in's targets, given what the last plan
// showed (prev): each target's state, since when, and why, with a
// transition where its state changed. A target shows Down when its node
// is out of every status, or when it is a Service's port on a node whose
// beacon is down.
func planFeed(in feedInputs, prev map[string]shown) feedPlan {
	// Beacons first: a target's shown state depends on its node's.
	targets := slices.Clone(in.targets)
	slices.SortStableFunc(targets, func(a, b healthTarget) int {
		if a.Beacon != b.Beacon {
			if a.Beacon {
				return -1
			}
			return 1
		}
		return 0
	})
	plan := feedPlan{shown: make(map[string]shown, len(targets)), targets: map[cache.ObjectName][]dashboard.Target{}}
	vantages := map[string]bool{}
	for _, t := range targets {
		for _, v := range t.Vantages {
			vantages[v] = true
		}
		last, seen := prev[t.Key]
		var j status.Judgement
		reason := "health checks are off"
		if in.verdict != nil {
			j = in.verdict(t.Key)
			reason = j.Summary()
		}
		state, failing := j.Verdict.String(), j.FirstFailure
		beacon := plan.shown[contract.BeaconKey(t.Node)]
		switch {
		case in.out[t.Node] != "":
			state, reason = status.VerdictDown.String(), in.out[t.Node]
			failing = cmp.Or(failing, beacon.failing)
		case !t.Beacon && beacon.state == status.VerdictDown.String():
			state, reason, failing = status.VerdictDown.String(), "node beacon is down", beacon.failing
		}
		results := vantageResults(in.reports, t)
		cur := shown{state: state, since: last.since, failing: failing}
		switch {
		case !seen:
			cur.since = firstSince(results, state, in.now)
		case last.state != state:
			cur.since = in.now
			tr := dashboard.Transition{Time: in.now, Node: t.Node, Address: in.nodeAddr[t.Node], From: last.state, To: state, Reason: reason}
			if !t.Beacon {
				tr.Service, tr.Port = t.service.String(), int(t.port.Port)
			}
			plan.transitions = append(plan.transitions, tr)
		}
		plan.shown[t.Key] = cur
		if t.Beacon {
			continue
		}
		shownResults := results
		if len(in.external) > 0 && in.outside[t.service] {
			shownResults = append(slices.Clone(results), externalResults(in.reports, t, in.external)...)
		}
		plan.targets[t.service] = append(plan.targets[t.service], dashboard.Target{
			Node:         t.Node,
			Address:      targetAddress(results, in.reports, t, in.nodeAddr[t.Node]),
			Port:         int(t.port.Port),
			Protocol:     string(t.port.Protocol),
			State:        state,
			Since:        cur.since,
			Reason:       reason,
			Flapping:     j.Reason == status.ReasonFlapping && state == status.VerdictDown.String(),
			FailingSince: failing,
			Vantages:     shownResults,
			// The vantages shown, fresh or stale: a certificate's expiry
			// does not age with the report that carries it.
			CertNotAfter: certNotAfter(in.reports, t),
		})
	}
	slices.Reverse(plan.transitions)
	for v := range vantages {
		plan.vantages = append(plan.vantages, v)
	}
	slices.Sort(plan.vantages)
	return plan
}

// apply stores what plan shows for the next build, and returns the
// transitions to show: the plan's before the earlier ones, newest first,
// at most dashboard.MaxTransitions.
func (f *DashboardFeed) apply(plan feedPlan) []dashboard.Transition {
	f.shown = plan.shown
	f.transitions = append(slices.Clone(plan.transitions), f.transitions...)
	if len(f.transitions) > dashboard.MaxTransitions {
		f.transitions = f.transitions[:dashboard.MaxTransitions]
	}
	return slices.Clone(f.transitions)
}

// service returns svc's part of the State, with its targets.
func (f *DashboardFeed) service(svc *corev1.Service, targets []dashboard.Target) dashboard.Service {
	settings, _ := f.parsed.Parse(svc) // sync reports the problems
	out := dashboard.Service{Name: cache.MetaObjectToName(svc).String(), Published: []string{}, Targets: targets}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a := cmp.Or(in.IP, in.Hostname); a != "" {
			out.Published = append(out.Published, a)
		}
	}
	for _, n := range strings.Split(svc.Annotations[contract.AnnotationNodes], ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(out.PublishedNodes, n) {
			out.PublishedNodes = append(out.PublishedNodes, n)
		}
	}
	slices.Sort(out.PublishedNodes)
	if cond := meta.FindStatusCondition(svc.Status.Conditions, status.ConditionHealthy); cond != nil {
		out.Healthy = cond.Status == metav1.ConditionTrue
	} else {
		out.Healthy = len(out.Published) > 0
	}
	if !out.Healthy {
		out.AllDown = cmp.Or(settings.AllDown, contract.AllDownPublishAll)
	}
	if f.cfg.Zone != "" {
		out.DNSNames = dnsNames(svc, settings, f.cfg.Zone)
	}
	probes := map[contract.PortKey]string{}
	for _, p := range settings.Probes {
		// The canonical form: it names Secrets, never holds their values.
		probes[contract.PortKey(p.Port)] = p.Spec.String()
	}
	if out.Targets == nil {
		out.Targets = []dashboard.Target{}
	}
	for i := range out.Targets {
		t := &out.Targets[i]
		t.Probe = probes[contract.PortKey{Protocol: corev1.Protocol(t.Protocol), Port: int32(t.Port)}]
	}
	slices.SortFunc(out.Targets, func(a, b dashboard.Target) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port),
			strings.Compare(a.Protocol, b.Protocol))
	})
	return out
}

// dnsNames returns the names dnsexport serves svc, whose settings are
// settings, under in zone: <name>.<namespace>.<zone> and the hostnames
// the zone serves (dnsexport.ZoneHostname).
func dnsNames(svc *corev1.Service, settings contract.Settings, zone string) []string {
	zone = strings.ToLower(strings.Trim(strings.TrimSpace(zone), "."))
	if zone == "" {
		return nil
	}
	out := []string{strings.ToLower(svc.Name + "." + svc.Namespace + "." + zone + ".")}
	for _, h := range settings.Hostnames {
		if name, inZone, err := dnsexport.ZoneHostname(zone+".", h); err == nil && inZone && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// vantageResults returns what each of t's vantages reported about it,
// sorted by vantage.
func vantageResults(reports status.Reports, t healthTarget) []dashboard.VantageResult {
	out := make([]dashboard.VantageResult, 0, len(t.Vantages))
	for _, v := range t.Vantages {
		vr := dashboard.VantageResult{Vantage: v, State: status.VerdictUnknown.String()}
		fresh, ok := reports.Vantage(v)
		if !ok {
			vr.Stale, vr.Message = true, "no report from this prober"
			out = append(out, vr)
			continue
		}
		vr.Stale = !fresh
		setObservation(&vr, reports.Observation(v, t.Target))
		out = append(out, vr)
	}
	slices.SortFunc(out, func(a, b dashboard.VantageResult) int { return strings.Compare(a.Vantage, b.Vantage) })
	return out
}

// setObservation fills vr with what a vantage observed, if anything.
func setObservation(vr *dashboard.VantageResult, obs *v1alpha1.Observation) {
	if obs == nil {
		return
	}
	vr.State, vr.Outcome, vr.Message = string(obs.State), obs.Outcome, obs.Message
	if obs.Latency != nil {
		vr.LatencySeconds = obs.Latency.Seconds()
	}
	if obs.LastChange != nil {
		vr.LastChange = obs.LastChange.Time
	}
}

// externalResults returns what each external vantage in names reported
// about t, the published address of t's node, marked External.
func externalResults(reports status.Reports, t healthTarget, names []string) []dashboard.VantageResult {
	out := make([]dashboard.VantageResult, 0, len(names))
	for _, v := range names {
		vr := dashboard.VantageResult{Vantage: v, External: true, State: status.VerdictUnknown.String()}
		fresh, _ := reports.Vantage(v)
		vr.Stale = !fresh
		setObservation(&vr, reports.Observation(v, t.Target))
		out = append(out, vr)
	}
	return out
}

// certNotAfter is the earliest expiry of the certificate t served among
// what its vantages reported, zero when none reported one.
func certNotAfter(reports status.Reports, t healthTarget) time.Time {
	var out time.Time
	for _, v := range t.Vantages {
		if obs := reports.Observation(v, t.Target); obs != nil && obs.CertNotAfter != nil && !obs.CertNotAfter.IsZero() &&
			(out.IsZero() || obs.CertNotAfter.Time.Before(out)) {
			out = obs.CertNotAfter.Time
		}
	}
	return out
}

// targetAddress is the address the probers probe for t, from a report,
// else the node's address.
func targetAddress(results []dashboard.VantageResult, reports status.Reports, t healthTarget, fallback string) string {
	for _, vr := range results {
		if obs := reports.Observation(vr.Vantage, t.Target); obs != nil && obs.Address != "" {
			if host, _, err := net.SplitHostPort(obs.Address); err == nil {
				return host
			}
		}
	}
	return fallback
}

// firstSince is when a target first seen in state got there: the latest
// change among the vantages that agree, else now.
func firstSince(results []dashboard.VantageResult, state string, now time.Time) time.Time {
	var since time.Time
	for _, vr := range results {
		if vr.State == state && vr.LastChange.After(since) {
			since = vr.LastChange
		}
	}
	if since.IsZero() {
		return now
	}
	return since
}

// nodeAddress is the node's first InternalIP, else its first address.
func nodeAddress(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	if len(n.Status.Addresses) > 0 {
		return n.Status.Addresses[0].Address
	}
	return ""
}
