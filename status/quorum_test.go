package status

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

var quorumNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// vote is one prober's report about the target shop/web:TCP/80@n1 and n1's beacon.
type vote struct {
	prober string
	state  v1alpha1.State // "" means the prober has not concluded
	age    time.Duration  // heartbeat age
}

func reportsOf(votes ...vote) []*v1alpha1.ProbeReport {
	var out []*v1alpha1.ProbeReport
	for _, v := range votes {
		r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: v.prober}}
		r.Status.HeartbeatTime = metav1.NewTime(quorumNow.Add(-v.age))
		if v.state != "" {
			failing := metav1.NewTime(quorumNow.Add(-time.Second))
			obs := v1alpha1.Observation{Node: "n1", Address: "10.0.0.1:80", State: v.state, Outcome: "L4CON", Message: "connection refused"}
			if v.state == v1alpha1.StateDown {
				obs.FailingSince = &failing
			}
			r.Status.Results = []v1alpha1.ProbeResult{{Service: "shop/web", Port: 80, PortProtocol: "TCP", Protocol: "tcp", Observation: obs}}
			r.Status.Beacons = []v1alpha1.BeaconResult{{Observation: obs}}
		}
		out = append(out, r)
	}
	return out
}

func TestJudge(t *testing.T) {
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	stale := contract.StaleHeartbeats*contract.DefaultHeartbeat + time.Second
	three := []string{"a", "b", "c"}
	tests := []struct {
		name     string
		votes    []vote
		vantages []string
		minDown  int
		prev     Verdict
		want     Verdict
		reason   string
	}{
		{"all up", []vote{{"a", up, 0}, {"b", up, 0}, {"c", up, 0}}, three, 0, VerdictUnknown, VerdictUp, ReasonMajorityUp},
		{"two of three down", []vote{{"a", down, 0}, {"b", down, 0}, {"c", up, 0}}, three, 0, VerdictUp, VerdictDown, ReasonMajorityDown},
		{"one of three down stays up", []vote{{"a", down, 0}, {"b", up, 0}, {"c", up, 0}}, three, 0, VerdictUp, VerdictUp, ReasonMajorityUp},
		{"single prober cannot fail it", []vote{{"a", down, 0}, {"b", up, stale}, {"c", up, stale}}, three, 0, VerdictUp, VerdictUp, ReasonSingleProber},
		{"single vantage cannot fail it", []vote{{"a", down, 0}}, []string{"a"}, 0, VerdictUp, VerdictUp, ReasonSingleProber},
		{"stale reports do not count", []vote{{"a", down, stale}, {"b", down, stale}, {"c", up, 0}}, three, 0, VerdictDown, VerdictUp, ReasonMajorityUp},
		{"two fresh both down", []vote{{"a", down, 0}, {"b", down, 0}, {"c", up, stale}}, three, 0, VerdictUp, VerdictDown, ReasonMajorityDown},
		{"no fresh vantage keeps previous", []vote{{"a", up, stale}, {"b", up, stale}}, three, 0, VerdictDown, VerdictDown, ReasonNoFreshVantage},
		{"undecided vantages block a majority", []vote{{"a", down, 0}, {"b", "", 0}, {"c", "", 0}, {"d", down, 0}}, []string{"a", "b", "c", "d"}, 0, VerdictUp, VerdictUp, ReasonNoMajority},
		{"reports of unassigned probers are ignored", []vote{{"x", down, 0}, {"y", down, 0}, {"a", up, 0}}, three, 0, VerdictUnknown, VerdictUp, ReasonMajorityUp},
		{"no vantage", nil, nil, 0, VerdictUnknown, VerdictUnknown, ReasonNoVantage},
		{"one lone vantage with MinDown 1 fails it", []vote{{"a", down, 0}}, []string{"a"}, 1, VerdictUp, VerdictDown, ReasonMajorityDown},
		{"MinDown 1 still needs a majority", []vote{{"a", down, 0}, {"b", up, 0}}, []string{"a", "b"}, 1, VerdictUp, VerdictUp, ReasonNoMajority},
		{"tie keeps previous", []vote{{"a", down, 0}, {"b", up, 0}}, []string{"a", "b"}, 0, VerdictDown, VerdictDown, ReasonNoMajority},
	}
	for _, tt := range tests {
		for _, beacon := range []bool{false, true} {
			name := tt.name
			if beacon {
				name += "/beacon"
			}
			t.Run(name, func(t *testing.T) {
				idx := IndexReports(reportsOf(tt.votes...), quorumNow)
				target := Target{Key: contract.TargetKey("shop/web", "TCP", 80, "n1"), Node: "n1", Beacon: beacon, Vantages: tt.vantages, MinDown: tt.minDown}
				j := Judge(idx, target, tt.prev)
				if j.Verdict != tt.want || j.Reason != tt.reason {
					t.Fatalf("Judge = %v (%s: %s), want %v (%s)", j.Verdict, j.Reason, j.Summary(), tt.want, tt.reason)
				}
				if j.Verdict == VerdictDown && j.Reason == ReasonMajorityDown {
					if !j.FirstFailure.Equal(quorumNow.Add(-time.Second)) || j.Message != "L4CON connection refused" {
						t.Errorf("FirstFailure %v, Message %q", j.FirstFailure, j.Message)
					}
				}
			})
		}
	}
}

func TestReportHeartbeatInterval(t *testing.T) {
	r := reportsOf(vote{"a", v1alpha1.StateDown, 10 * time.Second}, vote{"b", v1alpha1.StateDown, 10 * time.Second})
	for _, rep := range r {
		rep.Status.HeartbeatSeconds = 2 // stale after 6s
	}
	j := Judge(IndexReports(r, quorumNow), Target{Key: contract.TargetKey("shop/web", "TCP", 80, "n1"), Node: "n1", Vantages: []string{"a", "b"}}, VerdictUp)
	if j.Verdict != VerdictUp || j.Reason != ReasonNoFreshVantage {
		t.Fatalf("got %v (%s), want reports stale after 3 of their own heartbeats", j.Verdict, j.Reason)
	}
}

func TestNodeHealth(t *testing.T) {
	p80 := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 80}
	p443 := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 443}
	upJ := Judgement{Verdict: VerdictUp, Reason: ReasonMajorityUp, Fresh: 3, Up: 3, Assigned: 3}
	downJ := Judgement{Verdict: VerdictDown, Reason: ReasonMajorityDown, Fresh: 3, Down: 2, Assigned: 3, Message: "L7STS HTTP 503"}
	pendingJ := Judgement{Reason: ReasonNoMajority, Fresh: 3, Assigned: 3}
	uncovered := Judgement{Reason: ReasonNoFreshVantage, Assigned: 3}
	tests := []struct {
		name        string
		v           NodeVerdicts
		publishWhen string
		wantDown    bool
		wantErrors  []contract.PortKey
	}{
		{"all up", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: upJ, p443: upJ}, Published: true}, "", false, nil},
		{"beacon down", NodeVerdicts{Beacon: downJ, Ports: map[contract.PortKey]Judgement{p80: upJ}, Published: true}, "", true, nil},
		{"one port down, all-ports", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: downJ, p443: upJ}, Published: true}, "all-ports", true, []contract.PortKey{p80}},
		{"one port down, any-port", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: downJ, p443: upJ}, Published: true}, contract.PublishAnyPort, false, []contract.PortKey{p80}},
		{"every port down, any-port", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: downJ, p443: downJ}, Published: true}, contract.PublishAnyPort, true, []contract.PortKey{p80, p443}},
		{"new node awaits its first Up", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: pendingJ}}, "", true, nil},
		{"published node without verdict stays", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: pendingJ}, Published: true}, "", false, nil},
		{"no prober coverage falls back to readiness", NodeVerdicts{Ports: map[contract.PortKey]Judgement{p80: uncovered}}, "", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NodeHealth(tt.v, tt.publishWhen)
			if h.Down != tt.wantDown {
				t.Errorf("Down = %v, want %v", h.Down, tt.wantDown)
			}
			if len(h.PortErrors) != len(tt.wantErrors) {
				t.Fatalf("PortErrors = %v, want errors on %v", h.PortErrors, tt.wantErrors)
			}
			for _, p := range tt.wantErrors {
				if h.PortErrors[p] != "down by 2 of 3 probers: L7STS HTTP 503" {
					t.Errorf("PortErrors[%v] = %q", p, h.PortErrors[p])
				}
			}
		})
	}
}

// TestJudgeIgnoresVantagesOnDownNodes checks that the report of a prober
// whose node is down does not count, fresh or not: a new proxy probed Up by
// the one healthy vantage of two is Up at once, and the ignored prober's
// Down vote can neither fail a target nor hold one back.
func TestJudgeIgnoresVantagesOnDownNodes(t *testing.T) {
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	key := contract.TargetKey("shop/web", "TCP", 80, "n1")
	tests := []struct {
		name   string
		votes  []vote
		ignore map[string]bool
		prev   Verdict
		want   Verdict
	}{
		{"cut-off vantage holds back Up", []vote{{"a", down, 0}, {"b", up, 0}}, nil, VerdictUnknown, VerdictUnknown},
		{"ignored, the other vantage decides Up", []vote{{"a", down, 0}, {"b", up, 0}}, map[string]bool{"a": true}, VerdictUnknown, VerdictUp},
		{"ignored votes cannot fail it", []vote{{"a", down, 0}, {"b", down, 0}, {"c", up, 0}}, map[string]bool{"a": true}, VerdictUp, VerdictUp},
		{"one vantage left still cannot fail it", []vote{{"a", down, 0}, {"b", down, 0}}, map[string]bool{"a": true}, VerdictUp, VerdictUp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx := IndexReports(reportsOf(tt.votes...), quorumNow)
			var vantages []string
			for _, v := range tt.votes {
				vantages = append(vantages, v.prober)
			}
			j := Judge(idx, Target{Key: key, Node: "n1", Vantages: vantages, Ignore: tt.ignore}, tt.prev)
			if j.Verdict != tt.want {
				t.Fatalf("Judge = %v (%s: %s), want %v", j.Verdict, j.Reason, j.Summary(), tt.want)
			}
		})
	}
}

// lease returns node's prober Lease renewed age ago for seconds.
func lease(node string, age time.Duration, seconds int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: contract.ProberLeasePrefix + node},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(seconds),
			RenewTime: ptr.To(metav1.NewMicroTime(quorumNow.Add(-age)))},
	}
}

// TestFresh: a vantage counts while its Lease is current or its report
// was written within three heartbeats, whichever it keeps: old probers
// write report heartbeats and no Lease, new ones a Lease and reports only
// on change.
func TestFresh(t *testing.T) {
	report := func(age time.Duration, heartbeatSeconds int32) *v1alpha1.ProbeReport {
		r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: "a"}}
		r.Status.HeartbeatTime = metav1.NewTime(quorumNow.Add(-age))
		r.Status.HeartbeatSeconds = heartbeatSeconds
		return r
	}
	noRenew := lease("a", 0, 30)
	noRenew.Spec.RenewTime = nil
	noDuration := lease("a", 0, 30)
	noDuration.Spec.LeaseDurationSeconds = nil
	tests := []struct {
		name   string
		lease  *coordinationv1.Lease
		report *v1alpha1.ProbeReport
		want   bool
	}{
		{"old prober: recent report heartbeat, no Lease", nil, report(29*time.Second, 10), true},
		{"old prober: heartbeat just within three intervals", nil, report(30*time.Second, 10), true},
		{"old prober: three heartbeats missed", nil, report(31*time.Second, 10), false},
		{"old prober: heartbeat interval from the report", nil, report(50*time.Second, 20), true},
		{"old prober: default interval when the report has none", nil, report(31*time.Second, 0), false},
		{"report never written with a heartbeat", nil, &v1alpha1.ProbeReport{}, false},
		{"new prober: current Lease, report unchanged for an hour", lease("a", 5*time.Second, 30), report(time.Hour, 10), true},
		{"new prober: Lease renewed just within its duration", lease("a", 30*time.Second, 30), report(time.Hour, 10), true},
		{"new prober: Lease expired, report old", lease("a", 31*time.Second, 30), report(time.Hour, 10), false},
		{"new prober: Lease expired, report written since", lease("a", 35*time.Second, 30), report(10*time.Second, 10), true},
		{"rollback: expired Lease left behind, old prober's heartbeat recent", lease("a", time.Hour, 30), report(3*time.Second, 10), true},
		{"Lease without renewTime", noRenew, report(time.Hour, 10), false},
		{"Lease without duration", noDuration, report(time.Hour, 10), false},
		{"current Lease but no report", lease("a", 0, 30), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fresh(tt.lease, tt.report, quorumNow); got != tt.want {
				t.Errorf("Fresh = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJudgeDuringLeaseUpgrade judges a target during a rolling upgrade:
// some vantages are old probers (report heartbeats, no Lease), others new
// (a Lease, reports written only on change, long ago). The verdict is the
// one the fresh vantages reach, whatever kind they are, and a vantage of
// either kind that stopped is ignored.
func TestJudgeDuringLeaseUpgrade(t *testing.T) {
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	hour := time.Hour
	stale := contract.StaleHeartbeats*contract.DefaultHeartbeat + time.Second
	tests := []struct {
		name   string
		votes  []vote
		leases []*coordinationv1.Lease
		prev   Verdict
		want   Verdict
		reason string
		fresh  int
	}{
		{"new and old vantages agree down", []vote{{"a", down, 0}, {"b", down, hour}, {"c", up, hour}},
			[]*coordinationv1.Lease{lease("b", time.Second, 30), lease("c", time.Second, 30)}, VerdictUp, VerdictDown, ReasonMajorityDown, 3},
		{"all new, reports unchanged for an hour", []vote{{"a", up, hour}, {"b", up, hour}, {"c", down, hour}},
			[]*coordinationv1.Lease{lease("a", 9*time.Second, 30), lease("b", 9*time.Second, 30), lease("c", 9*time.Second, 30)}, VerdictUnknown, VerdictUp, ReasonMajorityUp, 3},
		{"new vantages with expired Leases do not count", []vote{{"a", down, hour}, {"b", down, hour}, {"c", up, 0}},
			[]*coordinationv1.Lease{lease("a", stale, 30), lease("b", stale, 30)}, VerdictDown, VerdictUp, ReasonMajorityUp, 1},
		{"old vantage stopped, new one alone cannot fail it", []vote{{"a", down, stale}, {"b", down, hour}, {"c", up, stale}},
			[]*coordinationv1.Lease{lease("b", 0, 30)}, VerdictUp, VerdictUp, ReasonSingleProber, 1},
		{"a Lease of another node makes no report fresh", []vote{{"a", down, hour}, {"b", down, hour}, {"c", up, 0}},
			[]*coordinationv1.Lease{lease("x", 0, 30)}, VerdictUp, VerdictUp, ReasonMajorityUp, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leases := map[string]*coordinationv1.Lease{}
			for _, l := range tt.leases {
				node, _ := contract.ProberLeaseNode(l.Name)
				leases[node] = l
			}
			idx := IndexVantages(reportsOf(tt.votes...), leases, quorumNow)
			j := Judge(idx, Target{Key: contract.TargetKey("shop/web", "TCP", 80, "n1"), Node: "n1", Vantages: []string{"a", "b", "c"}}, tt.prev)
			if j.Verdict != tt.want || j.Reason != tt.reason || j.Fresh != tt.fresh {
				t.Errorf("Judge = %s (%s, %d fresh), want %s (%s, %d fresh)", j.Verdict, j.Reason, j.Fresh, tt.want, tt.reason, tt.fresh)
			}
		})
	}
}

// TestJudgeDualStack: a vantage that probes a dual-stack port on both of
// the node's addresses says Down when either family is Down, whichever
// order its report lists them in.
func TestJudgeDualStack(t *testing.T) {
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	tests := []struct {
		name   string
		v4, v6 v1alpha1.State
		want   Verdict
	}{
		{"both up", up, up, VerdictUp},
		{"IPv6 down", up, down, VerdictDown},
		{"IPv4 down", down, up, VerdictDown},
		{"both down", down, down, VerdictDown},
	}
	for _, tt := range tests {
		for _, v6First := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				var reports []*v1alpha1.ProbeReport
				for _, p := range []string{"a", "b", "c"} {
					r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: p}}
					r.Status.HeartbeatTime = metav1.NewTime(quorumNow)
					res := func(addr string, st v1alpha1.State) v1alpha1.ProbeResult {
						obs := v1alpha1.Observation{Node: "n1", Address: addr, State: st, Outcome: "L4OK"}
						if st == down {
							obs.Outcome, obs.FailingSince = "L4TOUT", ptr.To(metav1.NewTime(quorumNow.Add(-time.Second)))
						}
						return v1alpha1.ProbeResult{Service: "shop/web", Port: 80, PortProtocol: "TCP", Protocol: "tcp", Observation: obs}
					}
					r.Status.Results = []v1alpha1.ProbeResult{res("10.0.0.1:80", tt.v4), res("[fd00::1]:80", tt.v6)}
					if v6First {
						r.Status.Results[0], r.Status.Results[1] = r.Status.Results[1], r.Status.Results[0]
					}
					reports = append(reports, r)
				}
				target := Target{Key: contract.TargetKey("shop/web", "TCP", 80, "n1"), Node: "n1", Vantages: []string{"a", "b", "c"}}
				if j := Judge(IndexReports(reports, quorumNow), target, VerdictUnknown); j.Verdict != tt.want {
					t.Errorf("v6 first %v: Judge = %v (%s), want %v", v6First, j.Verdict, j.Summary(), tt.want)
				}
			})
		}
	}
}
