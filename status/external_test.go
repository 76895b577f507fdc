package status

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

// extReport is an external vantage's report: states by node for port
// TCP/80 of shop/web ("" leaves the node out); stale makes it old.
func extReport(name string, stale bool, states map[string]v1alpha1.State) *v1alpha1.ProbeReport {
	hb := now.Time
	if stale {
		hb = hb.Add(-time.Hour)
	}
	r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: contract.ExternalReportPrefix + name},
		Status: v1alpha1.ProbeReportStatus{External: true, HeartbeatTime: metav1.NewTime(hb), HeartbeatSeconds: 10}}
	for _, n := range slices.Sorted(maps.Keys(states)) {
		r.Status.Results = append(r.Status.Results, v1alpha1.ProbeResult{Service: "shop/web", Port: 80, PortProtocol: "TCP", Protocol: "tcp",
			Observation: v1alpha1.Observation{Node: n, Address: "203.0.113.1:80", State: states[n], Outcome: "L4TOUT"}})
	}
	return r
}

const (
	up   = v1alpha1.StateUp
	down = v1alpha1.StateDown
)

func TestJudgeExternal(t *testing.T) {
	port := []contract.PortKey{{Protocol: corev1.ProtocolTCP, Port: 80}}
	inCluster := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1alpha1.ProbeReportStatus{HeartbeatTime: now, Results: []v1alpha1.ProbeResult{{Service: "shop/web", Port: 80, PortProtocol: "TCP",
			Observation: v1alpha1.Observation{Node: "a", State: down}}}}}
	tests := []struct {
		name                    string
		reports                 []*v1alpha1.ProbeReport
		vantages, fresh, cutOff int
		down                    []string
	}{
		{"no external vantage: in-cluster reports do not count", []*v1alpha1.ProbeReport{inCluster}, 0, 0, 0, nil},
		{"one vantage says a is down", []*v1alpha1.ProbeReport{extReport("x", false, map[string]v1alpha1.State{"a": down, "b": up})}, 1, 1, 0, []string{"a"}},
		{"majority of two is two", []*v1alpha1.ProbeReport{
			extReport("x", false, map[string]v1alpha1.State{"a": down, "b": up}),
			extReport("y", false, map[string]v1alpha1.State{"a": up, "b": up})}, 2, 2, 0, nil},
		{"two of three", []*v1alpha1.ProbeReport{
			extReport("x", false, map[string]v1alpha1.State{"a": down, "b": up}),
			extReport("y", false, map[string]v1alpha1.State{"a": down, "b": up}),
			extReport("z", false, map[string]v1alpha1.State{"a": up, "b": up})}, 3, 3, 0, []string{"a"}},
		{"a stale vantage does not count", []*v1alpha1.ProbeReport{
			extReport("x", true, map[string]v1alpha1.State{"a": down, "b": up}),
			extReport("y", false, map[string]v1alpha1.State{"a": up, "b": up})}, 2, 1, 0, nil},
		{"all stale", []*v1alpha1.ProbeReport{extReport("x", true, map[string]v1alpha1.State{"a": down})}, 1, 0, 0, nil},
		{"a vantage that says everything is down is cut off", []*v1alpha1.ProbeReport{
			extReport("x", false, map[string]v1alpha1.State{"a": down, "b": down}),
			extReport("y", false, map[string]v1alpha1.State{"a": up, "b": up})}, 2, 2, 1, nil},
		{"every vantage cut off", []*v1alpha1.ProbeReport{
			extReport("x", false, map[string]v1alpha1.State{"a": down, "b": down})}, 1, 1, 1, nil},
		{"not probed yet votes neither way", []*v1alpha1.ProbeReport{
			extReport("x", false, map[string]v1alpha1.State{"a": down, "b": up}),
			extReport("y", false, map[string]v1alpha1.State{"b": up}),
			extReport("z", false, map[string]v1alpha1.State{"b": up})}, 3, 3, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := JudgeExternal(IndexReports(tt.reports, now.Time), "shop/web", port, []string{"a", "b"}, contract.PublishAllPorts)
			if e.Vantages != tt.vantages || e.Fresh != tt.fresh || e.CutOff != tt.cutOff {
				t.Errorf("vantages, fresh, cut off = %d, %d, %d; want %d, %d, %d", e.Vantages, e.Fresh, e.CutOff, tt.vantages, tt.fresh, tt.cutOff)
			}
			if got := slices.Sorted(maps.Keys(e.Down)); !slices.Equal(got, tt.down) {
				t.Errorf("down = %v (%v), want %v", got, e.Down, tt.down)
			}
			for n, why := range e.Down {
				if !strings.Contains(why, "TCP/80 unreachable from") || !strings.Contains(why, "L4TOUT") {
					t.Errorf("why %s is down = %q, want the port, the count and the outcome", n, why)
				}
			}
		})
	}
}

func TestDecideExternal(t *testing.T) {
	nodes := nodeMap(node("a", "ext:203.0.113.1", "int:10.0.0.1"), node("b", "ext:203.0.113.2", "int:10.0.0.2"))
	pods := []*corev1.Pod{pod("a", "ready"), pod("b", "ready")}
	aDown := External{Vantages: 1, Fresh: 1, Down: map[string]string{"a": "TCP/80 unreachable from 1 of 1 external vantages: L4TOUT"}}
	bothDown := External{Vantages: 1, Fresh: 1, Down: map[string]string{"a": "x", "b": "y"}}
	tests := []struct {
		name        string
		mode        string
		ext         External
		health      map[string]Health
		ips         []string
		unreachable string
		cond        string // "" for no condition, else "Status/Reason"
		event       string
	}{
		{"off ignores them", contract.ExternalOff, aDown, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "", ""},
		{"unset is off", "", aDown, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "", ""},
		{"advisory without vantages says nothing", contract.ExternalAdvisory, External{}, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "", ""},
		{"advisory keeps the status and warns", contract.ExternalAdvisory, aDown, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "False/Unreachable", ReasonExternalPathDown},
		{"advisory all reachable", contract.ExternalAdvisory, External{Vantages: 2, Fresh: 2}, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "True/Reachable", ""},
		{"required holds the unreachable address out", contract.ExternalRequired, aDown, nil, []string{"203.0.113.2"}, "203.0.113.1", "False/Unreachable", ReasonExternalPathDown},
		{"required without vantages follows in-cluster", contract.ExternalRequired, External{}, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "False/NoExternalVantage", ReasonNoExternalVantage},
		{"required with stale vantages fails open", contract.ExternalRequired, External{Vantages: 2, Down: aDown.Down}, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "False/ExternalVantagesStale", ReasonExternalStale},
		{"required with cut-off vantages fails open", contract.ExternalRequired, External{Vantages: 1, Fresh: 1, CutOff: 1}, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "False/ExternalVantagesCutOff", ReasonExternalCutOff},
		{"required, every address unreachable: fail open", contract.ExternalRequired, bothDown, nil, []string{"203.0.113.1", "203.0.113.2"}, "", "False/AllUnreachable", ReasonExternalPathDown},
		{"required, the reachable node is down in-cluster: fail open", contract.ExternalRequired, aDown, map[string]Health{"b": {Down: true}}, []string{"203.0.113.1"}, "", "False/AllUnreachable", ReasonExternalPathDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := svc()
			r := Decide(Input{Service: s, Nodes: nodes, Pods: pods, Health: tt.health, AddressType: contract.AddressExternal,
				AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: 2, Now: now, ExternalMode: tt.mode, External: tt.ext})
			if got := ingressIPs(r); !slices.Equal(got, tt.ips) {
				t.Errorf("ingress = %v, want %v", got, tt.ips)
			}
			if got := r.Annotations[contract.AnnotationExternalUnreachable]; got != tt.unreachable {
				t.Errorf("%s = %q, want %q", contract.AnnotationExternalUnreachable, got, tt.unreachable)
			}
			c := findCondition(r.Conditions, ConditionExternallyReachable)
			switch {
			case tt.cond == "" && c != nil:
				t.Errorf("condition %+v, want none", *c)
			case tt.cond != "" && (c == nil || string(c.Status)+"/"+c.Reason != tt.cond):
				t.Errorf("condition %+v, want %s", c, tt.cond)
			}
			var events []string
			for _, e := range r.Events {
				events = append(events, e.Reason)
			}
			if tt.event == "" && len(events) > 0 || tt.event != "" && !slices.Contains(events, tt.event) {
				t.Errorf("events %v, want %q", events, tt.event)
			}
			// Steady: the same input on the written Service records nothing
			// and writes nothing.
			again := Decide(Input{Service: withResult(s, r), Nodes: nodes, Pods: pods, Health: tt.health, AddressType: contract.AddressExternal,
				AllDown: contract.AllDownPublishAll, Servable: true, EligibleNodes: 2, Now: now, ExternalMode: tt.mode, External: tt.ext})
			if len(again.Events) > 0 || Differs(withResult(s, r), again) || AnnotationsDiffer(withResult(s, r), again) {
				t.Errorf("second pass: events %v, differs %v", again.Events, Differs(withResult(s, r), again))
			}
		})
	}
}

func TestDecideExternalBackUp(t *testing.T) {
	nodes := nodeMap(node("a", "ext:203.0.113.1"), node("b", "ext:203.0.113.2"))
	pods := []*corev1.Pod{pod("a", "ready"), pod("b", "ready")}
	in := Input{Service: svc(), Nodes: nodes, Pods: pods, AddressType: contract.AddressExternal, AllDown: contract.AllDownPublishAll,
		Servable: true, EligibleNodes: 2, Now: now, ExternalMode: contract.ExternalRequired,
		External: External{Vantages: 1, Fresh: 1, Down: map[string]string{"a": "TCP/80 unreachable"}}}
	held := Decide(in)
	in.Service, in.External = withResult(in.Service, held), External{Vantages: 1, Fresh: 1}
	back := Decide(in)
	if got := ingressIPs(back); !slices.Equal(got, []string{"203.0.113.2", "203.0.113.1"}) {
		t.Errorf("ingress = %v, want both addresses back, the one that stayed first", got)
	}
	if back.Annotations[contract.AnnotationExternalUnreachable] != "" {
		t.Errorf("%s = %q, want empty", contract.AnnotationExternalUnreachable, back.Annotations[contract.AnnotationExternalUnreachable])
	}
	if len(back.Events) != 1 || back.Events[0].Reason != ReasonExternalPathUp {
		t.Errorf("events %+v, want one %s", back.Events, ReasonExternalPathUp)
	}
	// Turning external-vantages off removes the condition.
	in.Service, in.ExternalMode = withResult(in.Service, back), contract.ExternalOff
	off := Decide(in)
	if c := findCondition(off.Conditions, ConditionExternallyReachable); c != nil {
		t.Errorf("condition %+v after external-vantages: off, want none", *c)
	}
}
