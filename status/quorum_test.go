package status

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	stale := StaleHeartbeats*DefaultHeartbeat + time.Second
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
