package controller

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/status"
)

// TestPlanFeed: planFeed shows each target's state from its verdict, its
// node's beacon and whether its node is out, keeps or restarts its since,
// and lists a transition for each change of state, without changing what
// it was given.
func TestPlanFeed(t *testing.T) {
	web := cache.ObjectName{Namespace: "shop", Name: "web"}
	port := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 80}
	target := func(node string) healthTarget {
		return healthTarget{Target: status.Target{Key: port.TargetKey(web.String(), node), Node: node, Vantages: []string{"n3", "n2"}},
			service: web, port: port}
	}
	beacon := func(node string) healthTarget {
		return healthTarget{Target: status.Target{Key: contract.BeaconKey(node), Node: node, Beacon: true, Vantages: []string{"n1"}}}
	}
	// A Service's target listed before its node's beacon: the beacon is
	// planned first all the same.
	targets := []healthTarget{target("n1"), target("n2"), beacon("n1"), beacon("n2")}
	before := testNow.Add(-time.Minute)
	failing := testNow.Add(-1500 * time.Millisecond)
	down := status.Judgement{Verdict: status.VerdictDown, Reason: status.ReasonMajorityDown, FirstFailure: failing}
	up := status.Judgement{Verdict: status.VerdictUp, Reason: status.ReasonMajorityUp}
	allUp := map[string]status.Judgement{}
	for _, tg := range targets {
		allUp[tg.Key] = up
	}
	with := func(key string, j status.Judgement) map[string]status.Judgement {
		m := maps.Clone(allUp)
		m[key] = j
		return m
	}
	shownAll := func(state string) map[string]shown {
		m := map[string]shown{}
		for _, tg := range targets {
			m[tg.Key] = shown{state: state, since: before}
		}
		return m
	}
	upS, downS := status.VerdictUp.String(), status.VerdictDown.String()
	type want struct {
		state, reason string
		since         time.Time
		failing       time.Time
	}
	for _, tc := range []struct {
		name     string
		verdicts map[string]status.Judgement // nil: health checks off
		out      map[string]string
		prev     map[string]shown
		// want is n2's target on port 80; transitions the plan's, newest first.
		want        want
		transitions []string
	}{
		{
			name: "first seen up, since now", verdicts: allUp, prev: map[string]shown{},
			want: want{state: upS, reason: up.Summary(), since: testNow},
		},
		{
			name: "still up keeps its since", verdicts: allUp, prev: shownAll(upS),
			want: want{state: upS, reason: up.Summary(), since: before},
		},
		{
			name: "down by verdict", verdicts: with(target("n2").Key, down), prev: shownAll(upS),
			want:        want{state: downS, reason: down.Summary(), since: testNow, failing: failing},
			transitions: []string{"shop/web:80 n2 Up→Down"},
		},
		{
			name: "beacon down takes the node's targets down", verdicts: with(contract.BeaconKey("n2"), down), prev: shownAll(upS),
			want: want{state: downS, reason: "node beacon is down", since: testNow, failing: failing},
			// Newest first: the target after its beacon.
			transitions: []string{"shop/web:80 n2 Up→Down", " n2 Up→Down"},
		},
		{
			name: "node out of every status", verdicts: allUp, out: map[string]string{"n2": "node is labelled " + contract.LabelUnhealthy},
			prev:        shownAll(upS),
			want:        want{state: downS, reason: "node is labelled " + contract.LabelUnhealthy, since: testNow},
			transitions: []string{"shop/web:80 n2 Up→Down", " n2 Up→Down"},
		},
		{
			name: "health checks off", prev: shownAll(upS),
			want:        want{state: status.VerdictUnknown.String(), reason: "health checks are off", since: testNow},
			transitions: []string{"shop/web:80 n2 Up→Unknown", "shop/web:80 n1 Up→Unknown", " n2 Up→Unknown", " n1 Up→Unknown"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := feedInputs{now: testNow, targets: slices.Clone(targets), out: tc.out,
				nodeAddr: map[string]string{"n1": "10.0.0.1", "n2": "10.0.0.2"}}
			if tc.verdicts != nil {
				in.verdict = func(key string) status.Judgement { return tc.verdicts[key] }
			}
			prev := maps.Clone(tc.prev)
			plan := planFeed(in, tc.prev)
			if !maps.Equal(prev, tc.prev) || !slices.EqualFunc(in.targets, targets, func(a, b healthTarget) bool { return a.Key == b.Key }) {
				t.Errorf("planFeed changed its inputs")
			}
			var got *dashboard.Target
			for i, tg := range plan.targets[web] {
				if tg.Node == "n2" {
					got = &plan.targets[web][i]
				}
			}
			if got == nil || len(plan.targets[web]) != 2 {
				t.Fatalf("targets %+v, want n1's and n2's", plan.targets)
			}
			if g := (want{state: got.State, reason: got.Reason, since: got.Since, failing: got.FailingSince}); g != tc.want {
				t.Errorf("n2's target %+v, want %+v", g, tc.want)
			}
			if s := plan.shown[target("n2").Key]; s.state != tc.want.state || !s.since.Equal(tc.want.since) {
				t.Errorf("n2's shown %+v, want %s since %s", s, tc.want.state, tc.want.since)
			}
			if got.Address != "10.0.0.2" || got.Port != 80 || got.Protocol != "TCP" || len(got.Vantages) != 2 || got.Vantages[0].Vantage != "n2" {
				t.Errorf("n2's target %+v, want 10.0.0.2:80/TCP probed by n2 and n3", got)
			}
			var trans []string
			for _, tr := range plan.transitions {
				if !tr.Time.Equal(testNow) {
					t.Errorf("transition %+v at %s, want %s", tr, tr.Time, testNow)
				}
				where := tr.Service
				if tr.Port != 0 {
					where += ":" + strconv.Itoa(tr.Port)
				}
				trans = append(trans, where+" "+tr.Node+" "+tr.From+"→"+tr.To)
			}
			if !slices.Equal(trans, tc.transitions) {
				t.Errorf("transitions %q, want %q", trans, tc.transitions)
			}
			if want := []string{"n1", "n2", "n3"}; !slices.Equal(plan.vantages, want) {
				t.Errorf("vantages %q, want %q", plan.vantages, want)
			}
		})
	}
}

// TestPlanFeedFirstSince: a target seen first is shown since the latest
// change among the vantages that agree with its state.
func TestPlanFeedFirstSince(t *testing.T) {
	web := cache.ObjectName{Namespace: "shop", Name: "web"}
	port := contract.PortKey{Protocol: corev1.ProtocolTCP, Port: 80}
	tg := healthTarget{Target: status.Target{Key: port.TargetKey(web.String(), "n1"), Node: "n1", Vantages: []string{"n2"}}, service: web, port: port}
	r := withResult(report("n2", 0), newService("web"), 80, "n1", v1alpha1.StateUp)
	changed := testNow.Add(-time.Hour)
	r.Status.Results[0].LastChange = ptr.To(metav1.NewTime(changed))
	in := feedInputs{now: testNow, targets: []healthTarget{tg}, reports: status.IndexReports([]*v1alpha1.ProbeReport{r}, testNow),
		verdict: func(string) status.Judgement { return status.Judgement{Verdict: status.VerdictUp} }}
	plan := planFeed(in, nil)
	if got := plan.targets[web]; len(got) != 1 || !got[0].Since.Equal(changed) || got[0].Address != "10.0.0.1" {
		t.Errorf("targets %+v, want one Up since %s at 10.0.0.1 (the report's address)", got, changed)
	}
}

// TestDashboardFeedApply: apply keeps the plan's shown states for the
// next build and shows its transitions before the earlier ones, at most
// dashboard.MaxTransitions.
func TestDashboardFeedApply(t *testing.T) {
	f := &DashboardFeed{}
	tr := func(node string) dashboard.Transition { return dashboard.Transition{Node: node} }
	f.apply(feedPlan{shown: map[string]shown{"a": {state: "Up"}}, transitions: []dashboard.Transition{tr("b"), tr("a")}})
	got := f.apply(feedPlan{shown: map[string]shown{"b": {state: "Down"}}, transitions: []dashboard.Transition{tr("c")}})
	var nodes []string
	for _, t := range got {
		nodes = append(nodes, t.Node)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(nodes, want) {
		t.Errorf("transitions %q, want %q", nodes, want)
	}
	if len(f.shown) != 1 || f.shown["b"].state != "Down" {
		t.Errorf("shown %+v, want the last plan's", f.shown)
	}
	many := make([]dashboard.Transition, dashboard.MaxTransitions+5)
	if got := f.apply(feedPlan{transitions: many}); len(got) != dashboard.MaxTransitions {
		t.Errorf("%d transitions shown, want at most %d", len(got), dashboard.MaxTransitions)
	}
}
