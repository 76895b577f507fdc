package status

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

// engineTargets are what the engine tests judge, by a short name: web,
// shop/web's port on n1, probed from n2 and n3; and the beacons of n1 and
// n2, each probed from the three other nodes.
var engineTargets = map[string]Target{
	"web": {Key: contract.TargetKey("shop/web", "TCP", 80, "n1"), Node: "n1", Vantages: []string{"n2", "n3"}},
	"b1":  {Key: contract.BeaconKey("n1"), Node: "n1", Beacon: true, Vantages: []string{"n2", "n3", "n4"}},
	"b2":  {Key: contract.BeaconKey("n2"), Node: "n2", Beacon: true, Vantages: []string{"n1", "n3", "n4"}},
}

// says is what prober node by reports about the target named target.
type says struct {
	by, target string
	state      v1alpha1.State
}

// engineReports indexes at now one fresh report from each of n1 to n4,
// holding what ss say.
func engineReports(now time.Time, ss ...says) Reports {
	byNode := map[string]*v1alpha1.ProbeReport{}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		byNode[n] = &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: n},
			Status: v1alpha1.ProbeReportStatus{HeartbeatTime: metav1.NewTime(now)}}
	}
	for _, s := range ss {
		r := byNode[s.by]
		t := engineTargets[s.target]
		obs := v1alpha1.Observation{Node: t.Node, State: s.state}
		if t.Beacon {
			r.Status.Beacons = append(r.Status.Beacons, v1alpha1.BeaconResult{Observation: obs})
		} else {
			r.Status.Results = append(r.Status.Results, v1alpha1.ProbeResult{Service: "shop/web", Port: 80, PortProtocol: "TCP", Observation: obs})
		}
	}
	var reports []*v1alpha1.ProbeReport
	for _, r := range byNode {
		reports = append(reports, r)
	}
	return IndexReports(reports, now)
}

// webSays is n2 and n3 both saying state about web.
func webSays(state v1alpha1.State) []says {
	return []says{{"n2", "web", state}, {"n3", "web", state}}
}

func TestEngine(t *testing.T) {
	const up, down = v1alpha1.StateUp, v1alpha1.StateDown
	u, d, unk := VerdictUp, VerdictDown, VerdictUnknown
	// round is one call of Judge, at a time since the start, and what must
	// follow.
	type round struct {
		at   time.Duration
		says []says
		// judged names the targets judged; nil means all of them.
		judged []string
		want   map[string]Verdict
		// changes are "name from>to" in the order of the targets judged.
		changes []string
		// flapping is Flapping() after the round; downFor is DownFor of
		// each named target at the round's time.
		flapping int
		downFor  map[string]time.Duration
		// written gives the named probers' reports an older heartbeatTime
		// (since the start) than the round's; they stay fresh, as a
		// current Lease keeps them.
		written map[string]time.Duration
	}
	b2Down := []says{{"n1", "b2", down}, {"n3", "b2", down}, {"n4", "b2", up}}
	tests := []struct {
		name   string
		rounds []round
	}{
		{"a prober on a node whose beacon is down now does not count for ports", []round{
			// n2 is cut off: it says web is Down; n3 says Up. Counting n2
			// would leave no majority.
			{at: 0, says: append(b2Down, says{"n2", "web", down}, says{"n3", "web", up}),
				want: map[string]Verdict{"b2": d, "web": u}, changes: []string{"web Unknown>Up", "b2 Unknown>Down"}},
		}},
		{"a prober on a node whose beacon was down does not count until ReturnGrace after it is back", []round{
			{at: 0, says: b2Down, want: map[string]Verdict{"b2": d, "b1": unk}, changes: []string{"b2 Unknown>Down"}},
			// n2 is back, and with n3 says n1's beacon is Down; n4 says
			// Up. This round n2 still does not count for beacons: no
			// majority on b1.
			{at: time.Second, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				want: map[string]Verdict{"b2": u, "b1": unk}, changes: []string{"b2 Down>Up"}},
			// Its Down vote may be what it saw while cut off: still not
			// counted, for beacons nor for other targets.
			{at: 2 * time.Second, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				want: map[string]Verdict{"b2": u, "b1": unk}},
			{at: time.Second + ReturnGrace - time.Millisecond, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}, {"n2", "web", down}, {"n3", "web", down}, {"n4", "web", up}},
				want: map[string]Verdict{"b2": u, "b1": unk, "web": unk}},
			{at: time.Second + ReturnGrace, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				want: map[string]Verdict{"b2": u, "b1": d}, changes: []string{"b1 Unknown>Down"}},
		}},
		// The fault soak's case: n2's report from while it was cut off
		// reaches the API server seconds after its return, with n2's Lease
		// renewal, while n3 is cut off from n1 only.
		{"a prober back from Down does not count while its report predates its return, up to ReturnMax", []round{
			{at: 0, says: b2Down, want: map[string]Verdict{"b2": d, "b1": unk}, changes: []string{"b2 Unknown>Down"}},
			{at: time.Second, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up}},
				want: map[string]Verdict{"b2": u}, changes: []string{"b2 Down>Up"}},
			{at: time.Second + ReturnGrace, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				written: map[string]time.Duration{"n2": 500 * time.Millisecond},
				want:    map[string]Verdict{"b2": u, "b1": unk}},
			{at: time.Second + ReturnMax - time.Millisecond, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				written: map[string]time.Duration{"n2": 500 * time.Millisecond},
				want:    map[string]Verdict{"b2": u, "b1": unk}},
			// Written since its return: n2 votes again.
			{at: time.Second + ReturnMax - time.Millisecond/2, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				written: map[string]time.Duration{"n2": 1001 * time.Millisecond},
				want:    map[string]Verdict{"b2": u, "b1": d}, changes: []string{"b1 Unknown>Down"}},
		}},
		{"a prober back from Down whose report it never wrote again counts after ReturnMax", []round{
			{at: 0, says: b2Down, want: map[string]Verdict{"b2": d, "b1": unk}, changes: []string{"b2 Unknown>Down"}},
			{at: time.Second, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up}},
				want: map[string]Verdict{"b2": u}, changes: []string{"b2 Down>Up"}},
			{at: time.Second + ReturnMax, says: []says{{"n1", "b2", up}, {"n3", "b2", up}, {"n4", "b2", up},
				{"n2", "b1", down}, {"n3", "b1", down}, {"n4", "b1", up}},
				written: map[string]time.Duration{"n2": 500 * time.Millisecond},
				want:    map[string]Verdict{"b2": u, "b1": d}, changes: []string{"b1 Unknown>Down"}},
		}},
		{"flap damping holds an Up after a flap, then releases it", []round{
			{at: 0, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Unknown>Up"}},
			{at: time.Minute, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Up>Down"},
				downFor: map[string]time.Duration{"web": 0}},
			{at: 61 * time.Second, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Down>Up"}},
			{at: 62 * time.Second, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Up>Down"}},
			{at: 63 * time.Second, says: webSays(up), want: map[string]Verdict{"web": d}, flapping: 1,
				downFor: map[string]time.Duration{"web": 0}},
			{at: 64 * time.Second, says: webSays(up), want: map[string]Verdict{"web": d}, flapping: 1},
			{at: 65 * time.Second, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Down>Up"}},
		}},
		{"down since the round it turned Down, while it stays Down", []round{
			{at: 0, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Unknown>Up"},
				downFor: map[string]time.Duration{"web": 0}},
			{at: time.Minute, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Up>Down"}},
			{at: 70 * time.Second, says: webSays(down), want: map[string]Verdict{"web": d},
				downFor: map[string]time.Duration{"web": 10 * time.Second}},
			// No majority: still Down, still since a minute.
			{at: 80 * time.Second, says: []says{{"n2", "web", up}, {"n3", "web", down}}, want: map[string]Verdict{"web": d},
				downFor: map[string]time.Duration{"web": 20 * time.Second}},
		}},
		{"a target no longer judged is forgotten, flaps and all", []round{
			{at: 0, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Unknown>Up"}},
			{at: time.Minute, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Up>Down"}},
			{at: 61 * time.Second, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Down>Up"}},
			{at: 62 * time.Second, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Up>Down"}},
			{at: 63 * time.Second, judged: []string{"b1"}, want: map[string]Verdict{"web": unk},
				downFor: map[string]time.Duration{"web": 0}},
			{at: 64 * time.Second, says: webSays(down), want: map[string]Verdict{"web": d}, changes: []string{"web Unknown>Down"}},
			// Remembering its flap would hold this Up.
			{at: 65 * time.Second, says: webSays(up), want: map[string]Verdict{"web": u}, changes: []string{"web Down>Up"}},
		}},
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Engine
			for i, r := range tt.rounds {
				now := start.Add(r.at)
				names := r.judged
				if names == nil {
					names = []string{"web", "b1", "b2"}
				}
				nameOf := map[string]string{}
				var targets []Target
				for _, n := range names {
					targets = append(targets, engineTargets[n])
					nameOf[engineTargets[n].Key] = n
				}
				var changes []string
				reports := engineReports(now, r.says...)
				for n, at := range r.written {
					ir := reports.byNode[n]
					ir.written, ir.fresh = start.Add(at), true
					reports.byNode[n] = ir
				}
				for _, c := range e.Judge(reports, targets, now) {
					changes = append(changes, fmt.Sprintf("%s %s>%s", nameOf[c.Target.Key], c.From.Verdict, c.To.Verdict))
				}
				if !slices.Equal(changes, r.changes) {
					t.Errorf("round %d: changes %q, want %q", i, changes, r.changes)
				}
				for n, want := range r.want {
					if j := e.Verdict(engineTargets[n].Key); j.Verdict != want {
						t.Errorf("round %d: %s is %s (%s), want %s", i, n, j.Verdict, j.Summary(), want)
					}
				}
				if got := e.Flapping(); got != r.flapping {
					t.Errorf("round %d: %d flapping, want %d", i, got, r.flapping)
				}
				for n, want := range r.downFor {
					if got := e.DownFor(engineTargets[n].Key, now); got != want {
						t.Errorf("round %d: %s down for %s, want %s", i, n, got, want)
					}
				}
			}
		})
	}
}

// TestEngineRestore: a restored verdict is the previous verdict of the
// next round.
func TestEngineRestore(t *testing.T) {
	var e Engine
	web := engineTargets["web"]
	e.Restore(web.Key, VerdictDown)
	if j := e.Verdict(web.Key); j.Verdict != VerdictDown {
		t.Fatalf("restored verdict %s, want Down", j.Verdict)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	changes := e.Judge(engineReports(now, webSays(v1alpha1.StateUp)...), []Target{web}, now)
	if len(changes) != 1 || changes[0].From.Verdict != VerdictDown || changes[0].To.Verdict != VerdictUp {
		t.Errorf("changes %+v, want web Down>Up", changes)
	}
}

// TestEngineQuietStart checks the rule for a Down verdict on a Starting
// target: quiet while it was never Up, announced (Late, once) if it outlasts
// the start, and an alarm as usual once the target has been Up.
func TestEngineQuietStart(t *testing.T) {
	type round struct {
		starting bool
		state    v1alpha1.State
		// want is the change of the round: "" none, "down", "up",
		// "quiet down", "quiet up" or "late".
		want string
	}
	tests := []struct {
		name   string
		rounds []round
	}{
		{"healthy start", []round{{true, v1alpha1.StateDown, "quiet down"}, {true, v1alpha1.StateUp, "quiet up"}, {false, v1alpha1.StateUp, ""}}},
		{"start outlasted", []round{{true, v1alpha1.StateDown, "quiet down"}, {false, v1alpha1.StateDown, "late"}, {false, v1alpha1.StateDown, ""}, {false, v1alpha1.StateUp, "up"}}},
		{"down after up while starting", []round{{true, v1alpha1.StateUp, "up"}, {true, v1alpha1.StateDown, "down"}}},
		{"not starting", []round{{false, v1alpha1.StateDown, "down"}, {false, v1alpha1.StateUp, "up"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Engine
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			for i, r := range tt.rounds {
				now = now.Add(time.Minute) // past any flap damping
				web := engineTargets["web"]
				web.Starting = r.starting
				changes := e.Judge(engineReports(now, webSays(r.state)...), []Target{web}, now)
				got := ""
				for _, ch := range changes {
					switch {
					case ch.Late:
						got = "late"
					case ch.Quiet:
						got = "quiet " + strings.ToLower(ch.To.Verdict.String())
					default:
						got = strings.ToLower(ch.To.Verdict.String())
					}
				}
				if got != r.want {
					t.Errorf("round %d (starting %v, %s): change %q, want %q", i+1, r.starting, r.state, got, r.want)
				}
			}
		})
	}
}

// TestRejudgeAsJudge drives two engines through the same random rounds of
// reports, freshness and time: one judges every target each round, the
// other keeps its Reports with Put and SetFresh and judges again only what
// they say changed (Rejudge). Their verdicts, changes, Down times and
// flapping counts must be the same in every round, flap damping, ignored
// probers of Down nodes, ReturnGrace and quiet starts included.
func TestRejudgeAsJudge(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	var targets []Target
	ports := map[string]int32{}
	for i, n := range nodes {
		var vs []string
		for j := 1; j <= 3; j++ {
			vs = append(vs, nodes[(i+j)%len(nodes)])
		}
		targets = append(targets, Target{Key: contract.BeaconKey(n), Node: n, Beacon: true, Vantages: vs})
		for p := int32(80); p <= 81; p++ {
			k := contract.TargetKey("shop/web", "TCP", p, n)
			ports[k] = p
			targets = append(targets, Target{Key: k, Node: n, Vantages: vs, Starting: p == 81 && i < 2})
		}
	}
	states := []v1alpha1.State{v1alpha1.StateUp, v1alpha1.StateDown, ""}
	for seed := range int64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			// says[by][key] is what prober by reports about key ("" for
			// nothing); fresh[by] whether its report counts.
			says := map[string]map[string]v1alpha1.State{}
			fresh := map[string]bool{}
			for _, n := range nodes {
				says[n] = map[string]v1alpha1.State{}
				fresh[n] = true
			}
			// written[by] is when by last wrote its report: both engines
			// see the same heartbeatTimes (ReturnMax).
			written := map[string]time.Time{}
			build := func(by string) *v1alpha1.ProbeReport {
				r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: by}}
				for _, tg := range targets {
					st := says[by][tg.Key]
					if st == "" || !slices.Contains(tg.Vantages, by) {
						continue
					}
					obs := v1alpha1.Observation{Node: tg.Node, State: st}
					if st == v1alpha1.StateDown {
						obs.Outcome = "L4CON"
					}
					if tg.Beacon {
						r.Status.Beacons = append(r.Status.Beacons, v1alpha1.BeaconResult{Observation: obs})
					} else {
						r.Status.Results = append(r.Status.Results, v1alpha1.ProbeResult{Service: "shop/web",
							Port: ports[tg.Key], PortProtocol: "TCP", Observation: obs})
					}
				}
				r.Status.HeartbeatTime = metav1.NewTime(written[by])
				return r
			}
			var full, inc Engine
			var idx Reports
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			put := func(by string) []string {
				written[by] = now
				return idx.Put(build(by))
			}
			for round := range 400 {
				var keys, flipped []string
				switch round {
				case 0:
					for _, n := range nodes {
						put(n)
					}
				default:
					for range rng.IntN(4) {
						by := nodes[rng.IntN(len(nodes))]
						tg := targets[rng.IntN(len(targets))]
						says[by][tg.Key] = states[rng.IntN(len(states))]
						keys = append(keys, put(by)...)
					}
					if rng.IntN(3) == 0 {
						// Every vantage of a target at once: verdicts
						// that flap.
						tg := targets[rng.IntN(2)]
						st := states[rng.IntN(2)]
						for _, by := range tg.Vantages {
							says[by][tg.Key] = st
							keys = append(keys, put(by)...)
						}
					}
					if rng.IntN(10) == 0 {
						by := nodes[rng.IntN(len(nodes))]
						fresh[by] = !fresh[by]
					}
				}
				for _, n := range nodes {
					if idx.SetFresh(n, fresh[n]) {
						flipped = append(flipped, n)
					}
				}
				var reports []*v1alpha1.ProbeReport
				for _, n := range nodes {
					reports = append(reports, build(n))
				}
				fullIdx := IndexReports(reports, now)
				for _, n := range nodes {
					fullIdx.SetFresh(n, fresh[n])
				}
				// Now and then the targets change (a proxy is done
				// starting), which takes a Judge of every target, or a
				// verdict is restored.
				newTargets := round == 0 || rng.IntN(40) == 0
				if newTargets {
					i := 1 + 3*rng.IntN(len(nodes))
					targets[i].Starting = !targets[i].Starting
				}
				if rng.IntN(60) == 0 {
					k := targets[rng.IntN(len(targets))].Key
					full.Restore(k, VerdictDown)
					inc.Restore(k, VerdictDown)
				}
				a := full.Judge(fullIdx, targets, now)
				var b []Change
				if newTargets {
					b = inc.Judge(idx, targets, now)
				} else {
					b = inc.Rejudge(idx, keys, flipped, now)
				}
				if !equalChanges(a, b) {
					t.Fatalf("round %d (keys %q, flipped %q): changes\nJudge   %+v\nRejudge %+v", round, keys, flipped, a, b)
				}
				for _, tg := range targets {
					if ja, jb := full.Verdict(tg.Key), inc.Verdict(tg.Key); !reflect.DeepEqual(ja, jb) {
						t.Fatalf("round %d: %s: Judge %+v, Rejudge %+v", round, tg.Key, ja, jb)
					}
					if da, db := full.DownFor(tg.Key, now), inc.DownFor(tg.Key, now); da != db {
						t.Fatalf("round %d: %s down for %s and %s", round, tg.Key, da, db)
					}
				}
				if full.Flapping() != inc.Flapping() {
					t.Fatalf("round %d: flapping %d and %d", round, full.Flapping(), inc.Flapping())
				}
				now = now.Add(time.Duration(200+rng.IntN(3000)) * time.Millisecond)
			}
		})
	}
}

func equalChanges(a, b []Change) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Target.Ignore, y.Target.Ignore = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}
