package soak

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/pulselb/pulselb/status"
	"github.com/pulselb/pulselb/test/scenario"
	"github.com/pulselb/pulselb/test/traffic"
)

// The invariants, as named in a Failure.
const (
	// InvStatusEmpty: a published Service's status is never empty while
	// some proxy node is not cut off.
	InvStatusEmpty = "status-never-empty"
	// InvStaleAddress: no status holds the address of a node cut off for
	// longer than the failover bound (plus the leader bound when a
	// controller was killed around it).
	InvStaleAddress = "no-stale-address"
	// InvHealedBack: a healed node is back in the daemonset Service's
	// status within the heal bound.
	InvHealedBack = "healed-node-back"
	// InvSettled: after the last fault every Service is published on its
	// full set of proxy nodes again.
	InvSettled = "settled-after-faults"
	// InvClientLoss: clients lose requests only in the window after an
	// unplanned fault.
	InvClientLoss = "client-loss-only-after-faults"
	// InvPlannedLoss: clients lose no request during a planned change
	// (maintenance and drain, an upgrade), outside the windows of the
	// unplanned faults that overlap it.
	InvPlannedLoss = "no-loss-during-planned-change"
	// InvPlannedCompletes: a node in maintenance is drained by pulselb,
	// and an upgrade has replaced every pulselb pod, within their bounds.
	InvPlannedCompletes = "planned-change-completes"
	// InvNoLeak: deleting every Service leaves no proxy workload, PDB,
	// ProbeReport entry, iptables rule or conntrack entry DNATed to a
	// removed proxy pod on a node.
	InvNoLeak = "nothing-leaks"
	// InvFlat: the controllers' and probers' goroutines and heap in the
	// last quarter of the run are within a tolerance of the first
	// quarter's.
	InvFlat = "resources-flat"
)

// check evaluates the status invariants every 250 ms until ctx ends.
func (s *state) check(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) { s.checkOnce(time.Now()) }, 250*time.Millisecond)
}

func (s *state) checkOnce(now time.Time) {
	s.mu.Lock()
	cut, healed := maps.Clone(s.cut), maps.Clone(s.healed)
	stalled := s.stalled > 0
	controlUp, leaderKilled := s.controlUp, s.leaderKilled
	// A bound runs from the later of its event, the control plane's return
	// and the end of the leader gap after the leader was killed.
	from := func(t time.Time) time.Time {
		t = later(t, controlUp)
		if !leaderKilled.IsZero() {
			t = later(t, leaderKilled.Add(s.cfg.LeaderBound))
		}
		return t
	}
	s.checks++
	healthy := len(s.e.proxyNodes) - len(cut) - len(s.maintained)
	short := s.voting.track(cut, s.addrs.readyProbers(), now)
	quorum := map[string]time.Time{}
	for node := range cut {
		if t, ok := s.voting.quorumSince(node); ok {
			quorum[node] = t
		}
	}
	s.mu.Unlock()
	for _, node := range short {
		s.event("%s is cut off with fewer than %d probers elsewhere ready to vote; its failover bound waits for them", node, status.MinDownVotes)
	}
	for _, svc := range services {
		s.mu.Lock()
		absent := s.absent[svc.Name]
		s.mu.Unlock()
		ws := s.recorders[svc.Name].Since(0)
		if absent || len(ws) == 0 || ws[len(ws)-1].Deleted {
			continue
		}
		last := ws[len(ws)-1]
		s.mu.Lock()
		published := s.published[svc.Name]
		if len(last.IPs) > 0 {
			s.published[svc.Name] = true
		}
		s.mu.Unlock()
		key := fmt.Sprintf("%s/%s/%d", InvStatusEmpty, svc.Name, len(ws))
		if published && len(last.IPs) == 0 && healthy > 0 {
			s.fail(key, InvStatusEmpty, fmt.Sprintf("%s/%s has no address since +%s while %d proxy nodes are healthy; conditions %v",
				Namespace, svc.Name, s.since(last.At), healthy, last.Conds))
		}
		for node, since := range cut {
			ip := s.e.nodeIP[node]
			s.measure(s.pending, node, svc.Name, since, ws, func(ips []string) bool { return !slices.Contains(ips, ip) }, "left", &s.failovers)
			votersAt, voting := quorum[node]
			start := later(from(since), votersAt)
			if voting && !stalled && !failingOpen(last.Conds) && now.Sub(start) > s.cfg.FailoverBound && slices.Contains(last.IPs, ip) {
				s.fail(fmt.Sprintf("%s/%s/%s/%d", InvStaleAddress, svc.Name, node, since.UnixNano()), InvStaleAddress,
					fmt.Sprintf("%s/%s still publishes %s (%s), cut off since +%s, %s after the bound's start +%s (bound %s); status %v",
						Namespace, svc.Name, ip, node, s.since(since), now.Sub(start).Round(time.Millisecond), s.since(start), s.cfg.FailoverBound, last.IPs))
			}
		}
		if !svc.DaemonSet {
			continue
		}
		for node, at := range healed {
			ip := s.e.nodeIP[node]
			s.measure(s.back, node, svc.Name, at, ws, func(ips []string) bool { return slices.Contains(ips, ip) }, "back in", &s.returns)
			start := from(at)
			// Once back, the obligation is met: a later fault (a
			// partition, a killed proxy) may take the address out again.
			if now.Sub(start) > s.cfg.HealBound && !heldSince(ws, ip, at) {
				s.fail(fmt.Sprintf("%s/%s/%s/%d", InvHealedBack, svc.Name, node, at.UnixNano()), InvHealedBack,
					fmt.Sprintf("%s (%s), healed at +%s, is not back in %s/%s's status %s after the bound's start +%s (bound %s); status %v",
						node, ip, s.since(at), Namespace, svc.Name, now.Sub(start).Round(time.Millisecond), s.since(start), s.cfg.HealBound, last.IPs))
			}
		}
	}
}

// heldSince reports whether a status among ws, the one in force at t or
// a later one, held ip.
func heldSince(ws []scenario.StatusWrite, ip string, t time.Time) bool {
	for i, w := range ws {
		inForce := !w.At.After(t) && (i == len(ws)-1 || ws[i+1].At.After(t))
		if (inForce || w.At.After(t)) && !w.Deleted && slices.Contains(w.IPs, ip) {
			return true
		}
	}
	return false
}

// measure records, once per episode (a cut or a heal of node at t), how
// long Service svc took until done held for a write of its status ws: it
// adds the time to out and logs it. An episode whose first check finds
// done already (the Service never had the address, or it came back at
// once) is not measured.
func (s *state) measure(episodes map[string]time.Time, node, svc string, t time.Time, ws []scenario.StatusWrite, done func([]string) bool, what string, out *[]time.Duration) {
	key := node + "/" + svc
	s.mu.Lock()
	seen, ok := episodes[key]
	first := !ok || !seen.Equal(t)
	episodes[key] = t
	measuredKey := fmt.Sprintf("measured/%s/%d", key, t.UnixNano())
	if first {
		if done(ws[len(ws)-1].IPs) {
			s.reported[measuredKey] = true
		}
		s.mu.Unlock()
		return
	}
	if s.reported[measuredKey] {
		s.mu.Unlock()
		return
	}
	for _, w := range ws {
		if w.At.After(t) && !w.Deleted && done(w.IPs) {
			s.reported[measuredKey] = true
			*out = append(*out, w.At.Sub(t))
			s.mu.Unlock()
			s.event("%s %s %s/%s's status %s after +%s", node, what, Namespace, svc, w.At.Sub(t).Round(time.Millisecond), s.since(t))
			return
		}
	}
	s.mu.Unlock()
}

// settle waits, after the last fault, for every Service to be published
// on its full set of proxy nodes (2, or every proxy node in daemonset
// mode; the churn Service may be at 3).
func (s *state) settle(ctx context.Context) {
	for _, svc := range services {
		var got []string
		err := scenario.Poll(ctx, 2*time.Minute, svc.Name+" settled", func() bool {
			got = s.e.ingress(ctx, svc.Name)
			switch {
			case svc.DaemonSet:
				return len(got) == len(s.e.proxyNodes)
			case svc.Name == churn:
				return len(got) >= 2
			}
			return len(got) == 2
		})
		if err != nil {
			s.fail(InvSettled+"/"+svc.Name, InvSettled, fmt.Sprintf("%s/%s: %v; status %v", Namespace, svc.Name, err, got))
		}
		if svc.ExternalRequired {
			s.settledOn(ctx, svc.Name, "reachable from external vantage "+vantageName, func() string { return s.e.unreachableWhy(ctx, svc.Name) })
		}
	}
	s.settledOn(ctx, churn, "probed with its current probe", func() string { return s.churnProbedWhyNot(ctx) })
	s.event("settled")
}

// settledOn waits up to 2 minutes for Service svc to be what: whyNot
// returns "". Else it fails InvSettled with whyNot's last answer.
func (s *state) settledOn(ctx context.Context, svc, what string, whyNot func() string) {
	var why string
	err := scenario.Poll(ctx, 2*time.Minute, svc+" "+what, func() bool {
		why = whyNot()
		return why == ""
	})
	if err != nil {
		s.fail(InvSettled+"/"+svc+"/"+what, InvSettled, fmt.Sprintf("%s/%s: %v: %s", Namespace, svc, err, why))
	}
}

// churnProbedWhyNot says why the churn Service is not probed, by every
// prober and the external vantage that has a result for it, on its
// current port with its current probe's protocol and found Up ("" when
// it is). An edit changes port and probe together (editChurn).
func (s *state) churnProbedWhyNot(ctx context.Context) string {
	svc, err := s.e.c.Client.CoreV1().Services(Namespace).Get(ctx, churn, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	probe := cmp.Or(svc.Annotations[annotationProbe], churnProbes[0])
	proto, _, _ := strings.Cut(probe, " ")
	port := svc.Spec.Ports[0].Port
	reports, err := scenario.ListReports(ctx, s.e.dyn, scenario.SystemNamespace)
	if err != nil {
		return err.Error()
	}
	n := 0
	for _, r := range reports {
		for _, res := range r.Status.Results {
			if res.Service != Namespace+"/"+churn {
				continue
			}
			n++
			if res.Port != port || res.Protocol != proto || res.State != "Up" {
				return fmt.Sprintf("ProbeReport %s has port %d on %s probed %s: %s %s %q; want port %d probed %s (%q) Up",
					r.Name, res.Port, res.Node, res.Protocol, res.State, res.Outcome, res.Message, port, proto, probe)
			}
		}
	}
	if n == 0 {
		return "no ProbeReport has a result for it"
	}
	return ""
}

// judgeClients stops the clients and fails every request lost outside
// the windows after unplanned faults: InvPlannedLoss during a planned
// change, InvClientLoss elsewhere.
func (s *state) judgeClients(clients map[string]*traffic.Client) []ClientResult {
	var out []ClientResult
	for _, svc := range services {
		cl := clients[svc.Name]
		if cl == nil {
			continue
		}
		rep, _ := cl.Stop()
		res := ClientResult{Service: svc.Name, Sent: rep.Sent}
		var outside, planned []traffic.Request
		for _, r := range rep.Requests {
			if r.OK {
				continue
			}
			res.Failed++
			switch {
			case s.in(s.windows, r.At):
				res.InWindow++
			case s.in(s.planned, r.At):
				res.InPlanned++
				planned = append(planned, r)
			default:
				outside = append(outside, r)
			}
		}
		s.failLost(InvClientLoss, svc.Name, "outside every fault's window", outside)
		s.failLost(InvPlannedLoss, svc.Name, "during a planned change, outside every unplanned fault's window", planned)
		out = append(out, res)
	}
	return out
}

// failLost fails invariant inv when the client of svc lost requests
// lost, naming the first ones.
func (s *state) failLost(inv, svc, where string, lost []traffic.Request) {
	if len(lost) == 0 {
		return
	}
	var ex []string
	for _, r := range lost[:min(5, len(lost))] {
		ex = append(ex, fmt.Sprintf("+%s to %s: %s", s.since(r.At), r.Addr, r.Err))
	}
	s.fail(inv+"/"+svc, inv, fmt.Sprintf("the client of %s/%s lost %d requests %s, first: %s",
		Namespace, svc, len(lost), where, strings.Join(ex, "; ")))
}

// in reports whether t is in one of spans.
func (s *state) in(spans [][2]time.Time, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range spans {
		if !t.Before(w[0]) && !t.After(w[1]) {
			return true
		}
	}
	return false
}

// checkLeaks deletes every Service and waits for their proxies, PDBs,
// ProbeReport entries, iptables rules and the conntrack entries DNATed to
// their proxy pods to go.
func (s *state) checkLeaks(ctx context.Context) {
	cs := s.e.c.Client
	for _, svc := range services {
		if err := cs.CoreV1().Services(Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			s.fail(InvNoLeak+"/delete/"+svc.Name, InvNoLeak, fmt.Sprintf("deleting %s: %v", svc.Name, err))
		}
	}
	sel := metav1.ListOptions{LabelSelector: labelServiceNS + "=" + Namespace}
	var left []string
	err := scenario.Poll(ctx, 90*time.Second, "nothing left of the deleted Services", func() bool {
		left = nil
		if l, err := cs.AppsV1().Deployments("").List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "Deployment "+o.Namespace+"/"+o.Name)
			}
		}
		if l, err := cs.AppsV1().DaemonSets("").List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "DaemonSet "+o.Namespace+"/"+o.Name)
			}
		}
		if l, err := cs.PolicyV1().PodDisruptionBudgets("").List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "PodDisruptionBudget "+o.Namespace+"/"+o.Name)
			}
		}
		for _, p := range scenario.ListPods(ctx, cs, "", sel.LabelSelector) {
			left = append(left, "Pod "+p.Namespace+"/"+p.Name)
		}
		reports, err := scenario.ListReports(ctx, s.e.dyn, scenario.SystemNamespace)
		if err != nil {
			left = append(left, err.Error())
		}
		for _, r := range reports {
			for _, res := range slices.Concat(r.Status.Results, r.Status.Beacons) {
				if strings.HasPrefix(res.Service, Namespace+"/") {
					left = append(left, fmt.Sprintf("ProbeReport %s entry %s:%d on %s", r.Name, res.Service, res.Port, res.Node))
				}
			}
		}
		left = append(left, s.leftRules(ctx)...)
		left = append(left, s.leftConntrack(ctx)...)
		return len(left) == 0
	})
	if err != nil {
		s.fail(InvNoLeak, InvNoLeak, fmt.Sprintf("%v: %s", err, strings.Join(left, ", ")))
	}
	s.event("every Service deleted; leak check done (conntrack checked for %d removed proxy addresses)", len(s.addrs.removedProxies()))
}

// leftRules lists the iptables rules of the deleted Services left in the
// nodes' network namespaces (see leakedRules).
func (s *state) leftRules(ctx context.Context) []string {
	var left []string
	for _, n := range s.e.c.Nodes() {
		out, err := s.e.c.Exec(ctx, n, "iptables-save")
		if err != nil {
			left = append(left, fmt.Sprintf("iptables-save on %s: %v", n, err))
			continue
		}
		left = append(left, leakedRules(n, string(out))...)
	}
	return left
}

// leakedRules returns the lines of node's iptables-save output that name
// a soak Service (kube-proxy's comments, namespace/name:port), map a host
// port to one of their proxy pods (the harness' portmap, commented with
// the pod, pulselb-system/pulselb-<service>-…), or are pulselb's own (a
// PULSELB chain, which no proxy should ever put in a node's namespace).
func leakedRules(node, save string) []string {
	var marks []string
	for _, svc := range services {
		marks = append(marks, Namespace+"/"+svc.Name+":", scenario.SystemNamespace+"/pulselb-"+svc.Name+"-")
	}
	var left []string
	for line := range strings.Lines(save) {
		if strings.Contains(line, "PULSELB") || slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(line, m) }) {
			left = append(left, fmt.Sprintf("on %s: %s", node, strings.TrimSpace(line)))
		}
	}
	return left
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// voters follows, for each node cut off, whether a quorum of probers can
// vote on it: a node is down by quorum only once status.MinDownVotes
// probers on nodes not cut off are ready (a single prober never fails a
// node), so its failover bound starts no earlier.
type voters map[string]*voteEpisode

type voteEpisode struct {
	cutAt time.Time // the cut this episode follows
	// quorumAt is when the voters last became enough; zero while they
	// are not.
	quorumAt time.Time
	// short is set once the episode was reported short of voters.
	short bool
}

// track updates v for the nodes cut off (node → since when) given the
// nodes with a ready prober, at now. It returns the cut nodes newly short
// of voters, once per cut, sorted.
func (v voters) track(cut map[string]time.Time, ready map[string]bool, now time.Time) (short []string) {
	n := 0
	for node := range ready {
		if _, c := cut[node]; !c {
			n++
		}
	}
	maps.DeleteFunc(v, func(node string, e *voteEpisode) bool { return !cut[node].Equal(e.cutAt) })
	for _, node := range slices.Sorted(maps.Keys(cut)) {
		e := v[node]
		if e == nil {
			e = &voteEpisode{cutAt: cut[node]}
			v[node] = e
		}
		switch {
		case n < status.MinDownVotes:
			e.quorumAt = time.Time{}
			if !e.short {
				e.short = true
				short = append(short, node)
			}
		case e.quorumAt.IsZero():
			e.quorumAt = now
		}
	}
	return short
}

// quorumSince returns when node, cut off, last got a quorum of voters,
// and false while it has none.
func (v voters) quorumSince(node string) (time.Time, bool) {
	e := v[node]
	if e == nil || e.quorumAt.IsZero() {
		return time.Time{}, false
	}
	return e.quorumAt, true
}

// failingOpen reports conditions saying that no proxy node of the Service
// is healthy: pulselb then publishes every node with a ready proxy
// (all-down: publish-all, the default), a cut one among them, by design,
// rather than an empty status.
func failingOpen(conds []string) bool {
	return slices.ContainsFunc(conds, func(c string) bool { return strings.HasPrefix(c, "Healthy=False/AllDown") })
}
