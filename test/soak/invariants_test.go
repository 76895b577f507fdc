package soak

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/test/scenario"
)

func TestLeakedRules(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [0:0]
:PLT-HOSTPORTS - [0:0]
:KUBE-SVC-ABC - [0:0]
-A PLT-HOSTPORTS -p tcp --dport 9472 -m comment --comment pulselb-system/pulselb-prober-x7k2p -j DNAT --to-destination 198.18.129.5:9472
-A PLT-HOSTPORTS -p tcp --dport 80 -m comment --comment pulselb-system/pulselb-web-47d4c8b78e-75bc68d47c-w2wxg -j DNAT --to-destination 198.18.129.7:80
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment "pulselb-system/pulselb-dns:dns-udp cluster IP" -j KUBE-SVC-ABC
-A KUBE-SERVICES -d 10.96.0.20/32 -p udp -m comment --comment "soak/dns:udp cluster IP" -j KUBE-SVC-DEF
-A PREROUTING -m comment --comment "pulselb proxy" -j PULSELB-PREROUTING
COMMIT
`
	got := leakedRules("node-1", save)
	want := []string{"pulselb-web-47d4c8b78e", "soak/dns:udp", "PULSELB-PREROUTING"}
	if len(got) != len(want) {
		t.Fatalf("leaked %q, want the lines with %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) || !strings.HasPrefix(got[i], "on node-1: ") {
			t.Errorf("leaked[%d] = %q, want the line with %q", i, got[i], w)
		}
	}
}

// testState is the state of a two-minute run started now.
func testState() *state {
	cfg := Config{Duration: 2 * time.Minute}
	cfg.defaults()
	s := newState(&env{}, cfg)
	s.start = time.Now()
	return s
}

func TestCheckGrowth(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		first, last          float64
		lastHeap             float64
		wantFailures         int
		wantFirstN, wantLast int
	}{
		{"flat", 100, 110, 40 << 20, 0, 6, 6},
		{"goroutines leak", 100, 200, 40 << 20, 1, 6, 6},
		{"heap leak", 100, 100, 200 << 20, 1, 6, 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testState()
			for i := range 24 {
				at := s.start.Add(time.Duration(i)*5*time.Second + time.Second)
				g, h := tt.first, float64(40<<20)
				if i >= 18 {
					g, h = tt.last, tt.lastHeap
				}
				for _, c := range components {
					s.samples = append(s.samples, sample{at: at, comp: c.name, values: map[string]float64{"go_goroutines": g, "go_memstats_heap_inuse_bytes": h}})
				}
			}
			growth := s.checkGrowth()
			if len(growth) != len(components)*len(watched) {
				t.Fatalf("growth %v, want every series of every component", growth)
			}
			if g := growth[0]; g.FirstN != tt.wantFirstN || g.LastN != tt.wantLast || g.First != tt.first || g.Last != tt.last {
				t.Errorf("%+v, want %v → %v from %d and %d samples", g, tt.first, tt.last, tt.wantFirstN, tt.wantLast)
			}
			if len(s.failures) != tt.wantFailures*len(components) {
				t.Errorf("failures %v, want %d per component", s.failures, tt.wantFailures)
			}
		})
	}
	t.Run("nothing sampled", func(t *testing.T) {
		s := testState()
		s.checkGrowth()
		if len(s.failures) != len(components)*len(watched) || s.failures[0].Invariant != InvFlat {
			t.Errorf("failures %v, want one per series: nothing to compare is no pass", s.failures)
		}
	})
}

// TestHeldSince: a healed node is back once a status after its heal (or the
// one in force at it) holds its address, even if a later fault takes it
// out again (the hour's soak reported node-2 "not back" 82 s after its heal
// although it had been back for a minute before a partition took it out).
func TestHeldSince(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 22, 20, 18, 0, time.UTC)
	at := func(d time.Duration, ips ...string) scenario.StatusWrite {
		return scenario.StatusWrite{At: t0.Add(d), IPs: ips}
	}
	const ip = "198.18.1.2"
	for _, tt := range []struct {
		name string
		ws   []scenario.StatusWrite
		want bool
	}{
		{"back, then out again", []scenario.StatusWrite{at(-time.Minute, "198.18.1.3"), at(27*time.Second, "198.18.1.3", ip), at(83*time.Second, "198.18.1.3")}, true},
		{"never back", []scenario.StatusWrite{at(-time.Minute, "198.18.1.3"), at(27*time.Second, "198.18.1.1", "198.18.1.3")}, false},
		{"never left", []scenario.StatusWrite{at(-time.Minute, "198.18.1.3", ip)}, true},
		{"held only before the cut that the heal ends", []scenario.StatusWrite{at(-time.Minute, ip), at(-30*time.Second, "198.18.1.3")}, false},
		{"deleted since", []scenario.StatusWrite{at(-time.Minute, "198.18.1.3"), {At: t0.Add(time.Second), Deleted: true}}, false},
	} {
		if got := heldSince(tt.ws, ip, t0); got != tt.want {
			t.Errorf("%s: heldSince = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestFailingOpen(t *testing.T) {
	for _, tt := range []struct {
		conds []string
		want  bool
	}{
		{[]string{`ProxiesScheduled=True/Scheduled "x"`, `Healthy=False/AllDown "no proxy node is healthy; publishing all 2 proxy nodes (all-down: publish-all)"`}, true},
		{[]string{`Healthy=True/Healthy "2 of 3 ready proxy nodes are healthy"`}, false},
		{[]string{`Healthy=False/NoProxyReady "no proxy pod is ready"`}, false},
		{nil, false},
	} {
		if got := failingOpen(tt.conds); got != tt.want {
			t.Errorf("failingOpen(%q) = %v, want %v", tt.conds, got, tt.want)
		}
	}
}

func TestVoters(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	v := voters{}
	cut := map[string]time.Time{"node-3": at(0)}
	all := map[string]bool{"node-1": true, "node-2": true, "node-3": true, "node-4": true}
	one := map[string]bool{"node-3": true, "node-4": true} // node-1's and node-2's probers restarting

	if short := v.track(cut, one, at(0)); !slices.Equal(short, []string{"node-3"}) {
		t.Errorf("cut with one voter: short %v, want [node-3]", short)
	}
	if _, ok := v.quorumSince("node-3"); ok {
		t.Error("cut with one voter: quorum, want none")
	}
	if short := v.track(cut, one, at(1)); len(short) != 0 {
		t.Errorf("still one voter: short %v again, want it once per cut", short)
	}
	v.track(cut, all, at(5))
	if got, ok := v.quorumSince("node-3"); !ok || !got.Equal(at(5)) {
		t.Errorf("voters back at +5s: quorum since %v (%v), want +5s", got, ok)
	}
	v.track(cut, all, at(6))
	if got, _ := v.quorumSince("node-3"); !got.Equal(at(5)) {
		t.Errorf("voters still there at +6s: quorum since %v, want +5s", got)
	}
	v.track(map[string]time.Time{}, all, at(7))
	if len(v) != 0 {
		t.Errorf("after the heal: %d episodes kept, want none", len(v))
	}
	recut := map[string]time.Time{"node-3": at(8)}
	if short := v.track(recut, all, at(8)); len(short) != 0 {
		t.Errorf("cut again with every voter: short %v", short)
	}
	if got, ok := v.quorumSince("node-3"); !ok || !got.Equal(at(8)) {
		t.Errorf("cut again at +8s with every voter: quorum since %v (%v), want +8s", got, ok)
	}
	// A partition cuts two nodes: the voters are the two others.
	two := map[string]time.Time{"node-1": at(9), "node-3": at(9)}
	v.track(two, all, at(9))
	if _, ok := v.quorumSince("node-1"); !ok {
		t.Error("node-1 and node-3 cut, node-2 and node-4 voting: no quorum, want one")
	}
}
