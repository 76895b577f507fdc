package status

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

// Verdict is the controller's conclusion about a target or a node beacon,
// by quorum over the fresh reports of its assigned vantages.
type Verdict uint8

// Verdicts. Unknown means no quorum has ever been reached.
const (
	VerdictUnknown Verdict = iota
	VerdictUp
	VerdictDown
)

// String returns "Up", "Down" or "Unknown".
func (v Verdict) String() string {
	switch v {
	case VerdictUp:
		return "Up"
	case VerdictDown:
		return "Down"
	}
	return "Unknown"
}

// Reasons a verdict is what it is.
const (
	ReasonMajorityDown   = "majorityDown"
	ReasonMajorityUp     = "majorityUp"
	ReasonNoMajority     = "noMajority"
	ReasonSingleProber   = "singleProber"
	ReasonNoFreshVantage = "noFreshVantage"
	ReasonNoVantage      = "noVantage"
	ReasonBeaconDown     = "beaconDown"
)

// Quorum rules.
const (
	// MinDownVotes is the fewest vantages that must say Down: a single
	// prober, however confused, never fails a node.
	MinDownVotes = 2
	// ReturnGrace is how long after its node's beacon is Up again a
	// vantage still does not vote (Engine.Judge): a prober cut off with
	// its node saw every target fail, and until it has probed them again
	// (rise probes, at the default 1s interval) and written its report,
	// its Down votes are stale; with one transient failure elsewhere they
	// would fail a healthy node the moment the cut-off one returns.
	ReturnGrace = 5 * time.Second
	// ReturnMax bounds how long after its node's beacon is Up again a
	// vantage whose report predates its return still does not vote. A
	// report written while the prober was cut off can reach the API server
	// long after the cut ends (its write waited in a TCP retransmission,
	// and the prober's Lease renewal, arriving with it, makes it fresh), so
	// past ReturnGrace a returned vantage votes again only once its report
	// was written after its return (heartbeatTime, by its own clock). One
	// that writes only on change and finds after its return what it found
	// before writes nothing new; it votes again ReturnMax after the return,
	// the age at which a report without a Lease goes stale
	// (contract.StaleHeartbeats of the default heartbeat).
	ReturnMax = 30 * time.Second
)

// Judgement is a verdict with the counts behind it.
type Judgement struct {
	Verdict Verdict
	// Reason is one of the Reason* constants of this file.
	Reason string
	// Assigned, Fresh, Up and Down count the vantages assigned, those with
	// a fresh report, and the fresh ones saying Up and Down.
	Assigned, Fresh, Up, Down int
	// FirstFailure is the earliest first failed probe among the Down votes;
	// zero unless Verdict is Down by majority.
	FirstFailure time.Time
	// Message is a Down vote's outcome and message, for ports[].error and
	// Events; empty unless Down.
	Message string
	// Flaps, UpFor and Hold describe a Down held by flap damping
	// (ReasonFlapping): the target's flaps, how long a majority has said
	// Up, and how long it must (see Damper).
	Flaps       int
	UpFor, Hold time.Duration
}

// Summary reads as a short explanation: "down by 2 of 3 probers: L4CON ...".
func (j Judgement) Summary() string {
	switch j.Reason {
	case ReasonMajorityDown:
		s := fmt.Sprintf("down by %d of %d probers", j.Down, j.Assigned)
		if j.Message != "" {
			s += ": " + j.Message
		}
		return s
	case ReasonMajorityUp:
		return fmt.Sprintf("up by %d of %d probers", j.Up, j.Assigned)
	case ReasonBeaconDown:
		return "node beacon is down"
	case ReasonSingleProber:
		return fmt.Sprintf("only 1 of %d probers says down; need %d", j.Assigned, MinDownVotes)
	case ReasonNoFreshVantage:
		return fmt.Sprintf("none of %d probers reported recently", j.Assigned)
	case ReasonNoVantage:
		return "no prober can probe it"
	case ReasonFlapping:
		return flappingSummary(j)
	}
	return fmt.Sprintf("no majority: %d up, %d down of %d fresh probers", j.Up, j.Down, j.Fresh)
}

// Reports indexes ProbeReports by prober node for Judge.
type Reports struct {
	byNode map[string]indexedReport
}

type indexedReport struct {
	fresh bool
	// written is the report's heartbeatTime: when its prober wrote it.
	written time.Time
	// external marks an external vantage's report; allDown says it has
	// results and every one is Down.
	external, allDown bool
	results           map[string]*v1alpha1.Observation
	beacons           map[string]*v1alpha1.Observation
}

// Vantage returns whether node's prober has a report, and whether the
// report is fresh enough to count.
func (r Reports) Vantage(node string) (fresh, ok bool) {
	ir, ok := r.byNode[node]
	return ir.fresh, ok
}

// Written returns when node's prober wrote the report indexed for it, by
// the prober's clock (its heartbeatTime); zero when there is none.
func (r Reports) Written(node string) time.Time {
	return r.byNode[node].written
}

// Observation returns what vantage's report, fresh or stale, says about
// t: its result for t.Key, or for a beacon its beacon of t.Node; nil when
// it says nothing.
func (r Reports) Observation(vantage string, t Target) *v1alpha1.Observation {
	ir := r.byNode[vantage]
	if t.Beacon {
		return ir.beacons[t.Node]
	}
	return ir.results[t.Key]
}

// IndexReports indexes reports (named after their prober node), each fresh
// while its heartbeat is (see Fresh): IndexVantages without Leases, for
// reports whose writers keep no Lease, such as standalone peers.
func IndexReports(reports []*v1alpha1.ProbeReport, now time.Time) Reports {
	return IndexVantages(reports, nil, now)
}

// IndexVantages indexes reports (named after their prober node) and marks
// each fresh or stale at now by Fresh, from the report and its node's
// Lease in leases (keyed by node; see contract.ProberLeaseNode).
func IndexVantages(reports []*v1alpha1.ProbeReport, leases map[string]*coordinationv1.Lease, now time.Time) Reports {
	idx := Reports{byNode: make(map[string]indexedReport, len(reports))}
	for _, r := range reports {
		idx.byNode[r.Name] = indexReport(r, Fresh(leases[r.Name], r, now))
	}
	return idx
}

// indexReport indexes what report r says, fresh or not.
func indexReport(r *v1alpha1.ProbeReport, fresh bool) indexedReport {
	ir := indexedReport{
		fresh:    fresh,
		written:  r.Status.HeartbeatTime.Time,
		external: r.Status.External,
		allDown:  len(r.Status.Results) > 0,
		results:  make(map[string]*v1alpha1.Observation, len(r.Status.Results)),
		beacons:  make(map[string]*v1alpha1.Observation, len(r.Status.Beacons)),
	}
	for i := range r.Status.Results {
		res := &r.Status.Results[i]
		key := contract.TargetKey(res.Service, res.PortProtocol, res.Port, res.Node)
		ir.results[key] = worse(ir.results[key], &res.Observation)
		ir.allDown = ir.allDown && res.State == v1alpha1.StateDown
	}
	for i := range r.Status.Beacons {
		b := &r.Status.Beacons[i]
		ir.beacons[b.Node] = &b.Observation
	}
	return ir
}

// worse returns the observation of a port on a node that counts when a
// vantage probed it on several addresses (a dual-stack Service, once per
// family): Down when either is, so that a node is published only while
// every family it is published in works; of two Downs, the one failing
// longer.
func worse(had, obs *v1alpha1.Observation) *v1alpha1.Observation {
	switch {
	case had == nil:
		return obs
	case had.State != v1alpha1.StateDown && obs.State == v1alpha1.StateDown:
		return obs
	case had.State == v1alpha1.StateDown && obs.State == v1alpha1.StateDown &&
		obs.FailingSince != nil && (had.FailingSince == nil || obs.FailingSince.Before(had.FailingSince)):
		return obs
	}
	return had
}

// Fresh is the one rule for whether a vantage counts at now: it has a
// report, and its last sign of life is recent. A sign of life is a renewal
// of its Lease, current until renewTime plus leaseDurationSeconds (a
// prober asks for contract.StaleHeartbeats renew intervals, so it goes stale after
// as many missed renewals as a report did after missed heartbeats), or a
// write of its report, current for contract.StaleHeartbeats heartbeat intervals
// after heartbeatTime. Probers that write their report only on change
// keep it fresh with the Lease; probers from before Leases (during a
// rolling upgrade, or after a rollback that left an expired Lease behind)
// and standalone peers keep it fresh with report heartbeats. Either
// suffices, so that neither kind is ever judged stale while it writes.
func Fresh(lease *coordinationv1.Lease, r *v1alpha1.ProbeReport, now time.Time) bool {
	if r == nil {
		return false
	}
	return LeaseCurrent(lease, now) || heartbeatRecent(r.Status, now)
}

// LeaseCurrent reports whether lease was renewed within its duration at
// now; a Lease without a renewTime or a duration is not.
func LeaseCurrent(lease *coordinationv1.Lease, now time.Time) bool {
	if lease == nil || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds <= 0 {
		return false
	}
	return !now.After(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// heartbeatRecent reports whether a report written at its heartbeatTime is
// within contract.StaleHeartbeats of its heartbeat intervals at now.
func heartbeatRecent(st v1alpha1.ProbeReportStatus, now time.Time) bool {
	hb := contract.DefaultHeartbeat
	if st.HeartbeatSeconds > 0 {
		hb = time.Duration(st.HeartbeatSeconds) * time.Second
	}
	return !st.HeartbeatTime.IsZero() && now.Sub(st.HeartbeatTime.Time) <= contract.StaleHeartbeats*hb
}

// Target is what Judge decides about: a Service port on a node (Key from
// contract.TargetKey) or, with Beacon set, Node's beacon.
type Target struct {
	Key    string
	Node   string
	Beacon bool
	// Vantages are the prober nodes assigned to it (contract.Vantages).
	Vantages []string
	// Ignore lists vantages whose own node is Down by quorum: a prober cut
	// off with its node cannot see anything, and its report would otherwise
	// count as fresh until it goes stale, holding back verdicts such as a
	// replacement proxy's first Up. Engine.Judge sets it.
	Ignore map[string]bool
	// Starting says the server behind the target is still starting, such
	// as a proxy pod whose containers are not ready yet: probers that find
	// it refusing are right, but nothing is wrong. Engine.Judge marks the
	// Changes of a Down verdict on a target that was never Up and is
	// Starting Quiet, and announces the verdict (Late) only if it is still
	// Down once the target stops Starting.
	Starting bool
	// MinDown is the fewest Down votes that can make the verdict Down; 0
	// means MinDownVotes. Only a standalone instance without peers, its
	// own only vantage, sets 1: with a single vantage there is no second
	// opinion to wait for.
	MinDown int
}

// Judge returns the verdict on t: Down when a majority of its fresh
// assigned vantages, and at least t.MinDown (default MinDownVotes) of
// them, say Down; Up when
// a majority say Up; otherwise prev, unchanged. A vantage with a fresh
// report that has not concluded about t counts toward the majority needed
// but votes neither way.
func Judge(reports Reports, t Target, prev Verdict) Judgement {
	j := Judgement{Verdict: prev, Assigned: len(t.Vantages)}
	minDown := t.MinDown
	if minDown <= 0 {
		minDown = MinDownVotes
	}
	var downMsgs []string
	for _, v := range t.Vantages {
		if fresh, _ := reports.Vantage(v); !fresh || t.Ignore[v] {
			continue
		}
		j.Fresh++
		obs := reports.Observation(v, t)
		if obs == nil {
			continue
		}
		switch obs.State {
		case v1alpha1.StateUp:
			j.Up++
		case v1alpha1.StateDown:
			j.Down++
			if obs.FailingSince != nil && (j.FirstFailure.IsZero() || obs.FailingSince.Time.Before(j.FirstFailure)) {
				j.FirstFailure = obs.FailingSince.Time
			}
			if m := strings.TrimSpace(strings.TrimSpace(obs.Outcome) + " " + obs.Message); m != "" {
				downMsgs = append(downMsgs, m)
			}
		}
	}
	switch {
	case j.Assigned == 0:
		j.Reason = ReasonNoVantage
	case j.Fresh == 0:
		j.Reason = ReasonNoFreshVantage
	case 2*j.Down > j.Fresh && j.Down >= minDown:
		j.Verdict, j.Reason = VerdictDown, ReasonMajorityDown
		// A report, such as a standalone peer's, may say Down without
		// saying why.
		if len(downMsgs) > 0 {
			j.Message = downMsgs[0]
		}
	case 2*j.Up > j.Fresh:
		j.Verdict, j.Reason = VerdictUp, ReasonMajorityUp
	case 2*j.Down > j.Fresh:
		j.Reason = ReasonSingleProber
	default:
		j.Reason = ReasonNoMajority
	}
	if j.Verdict != VerdictDown {
		j.FirstFailure, j.Message = time.Time{}, ""
	}
	return j
}

// NodeVerdicts is what the quorum decided about one node for one Service.
type NodeVerdicts struct {
	// Beacon is the node's beacon verdict.
	Beacon Judgement
	// Ports holds the verdict on each of the Service's ports on the node.
	Ports map[contract.PortKey]Judgement
	// Published is whether the node is in the Service's status now; a
	// node that is not is added only once its ports are probed Up.
	Published bool
}

// NodeHealth turns a node's verdicts into the Health Decide reads.
// publishWhen is "all-ports" (default) or "any-port". A node whose beacon
// is Down is down on every port. A port Down by quorum gets an error text.
// A node not yet published stays out while a port has fresh vantages but
// no verdict, so a new proxy's IP appears only once probed Up. Pending says
// that no port has a verdict yet (see Healthy).
func NodeHealth(v NodeVerdicts, publishWhen string) Health {
	if v.Beacon.Verdict == VerdictDown {
		return Health{Down: true}
	}
	var h Health
	down, up, pending := 0, 0, 0
	for p, j := range v.Ports {
		switch {
		case j.Verdict == VerdictUp:
			up++
		case j.Verdict == VerdictDown:
			if h.PortErrors == nil {
				h.PortErrors = map[contract.PortKey]string{}
			}
			h.PortErrors[p] = j.Summary()
			down++
		case j.Verdict == VerdictUnknown && j.Fresh > 0:
			pending++
		}
	}
	h.Pending = pending > 0 && up == 0 && down == 0
	switch {
	case publishWhen == contract.PublishAnyPort && len(v.Ports) > 0 && down == len(v.Ports):
		h.Down = true
	case publishWhen != contract.PublishAnyPort && down > 0:
		h.Down = true
	case !v.Published && pending > 0:
		h.Down = true
	}
	return h
}
