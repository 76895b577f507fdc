package dashboard

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// failoverStates is a Service on two nodes in three steps: both up; node-b
// down (first failed probe at t0+1s) while still published; node-b out of
// the published set.
func failoverStates(t0 time.Time) []State {
	target := func(node, addr, state string, latency float64) Target {
		t := Target{Node: node, Address: addr, Port: 443, Protocol: "TCP", State: state, Since: t0,
			Vantages: []VantageResult{{Vantage: "node-c", State: state, Outcome: "L7OK", LatencySeconds: latency}}}
		if state == StateDown {
			t.Vantages[0].Outcome = "L4CON"
			t.Reason, t.FailingSince, t.Since = "down by 2 of 3 probers: L4CON connection refused", t0.Add(time.Second), t0.Add(2*time.Second)
		}
		return t
	}
	svc := func(published []string, nodes []string, targets ...Target) Service {
		return Service{Name: "shop/web", Published: published, PublishedNodes: nodes, Healthy: true, Targets: targets}
	}
	both, nodes := []string{"198.18.0.11", "198.18.0.12"}, []string{"node-a", "node-b"}
	return []State{
		{GeneratedAt: t0, Services: []Service{svc(both, nodes, target("node-a", "198.18.0.11", "Up", 0.002), target("node-b", "198.18.0.12", "Up", 0.003))}},
		{GeneratedAt: t0.Add(2 * time.Second), Services: []Service{svc(both, nodes, target("node-a", "198.18.0.11", "Up", 0.004), target("node-b", "198.18.0.12", "Down", 0))}},
		{GeneratedAt: t0.Add(3500 * time.Millisecond), Services: []Service{svc([]string{"198.18.0.11"}, []string{"node-a"},
			target("node-a", "198.18.0.11", "Up", 0.004), target("node-b", "198.18.0.12", "Down", 0))}},
	}
}

func TestHistoryRecordsInOrder(t *testing.T) {
	t0 := testNow.Add(-time.Minute)
	h := newHistory(HistoryOptions{LatencyEvery: 2 * time.Second})
	for _, s := range failoverStates(t0) {
		h.observe(s, s.GeneratedAt)
	}
	got := h.snapshot(t0.Add(4 * time.Second))
	if len(got.Targets) != 2 || len(got.Services) != 1 {
		t.Fatalf("history has %d targets and %d services, want 2 and 1", len(got.Targets), len(got.Services))
	}
	b := got.Targets[1]
	if b.Node != "node-b" {
		t.Fatalf("second target is %q, want node-b (sorted)", b.Node)
	}
	wantChanges := []StateChange{
		{Time: t0, To: "Up", Outcome: "L7OK"},
		{Time: t0.Add(2 * time.Second), From: "Up", To: "Down", Outcome: "L4CON", Reason: "down by 2 of 3 probers: L4CON connection refused"},
	}
	if fmt.Sprint(b.Changes) != fmt.Sprint(wantChanges) {
		t.Errorf("node-b changes\n got %v\nwant %v", b.Changes, wantChanges)
	}
	a := got.Targets[0]
	var lat []float64
	for _, l := range a.Latency {
		lat = append(lat, l.Seconds)
	}
	if fmt.Sprint(lat) != "[0.002 0.004]" {
		t.Errorf("node-a latency samples %v, want [0.002 0.004] (one every 2 s at most)", lat)
	}

	svc := got.Services[0]
	var states []string
	for _, c := range svc.Changes {
		states = append(states, c.From+"→"+c.To)
	}
	if want := "[→Up Up→Degraded]"; fmt.Sprint(states) != want {
		t.Errorf("service changes %v, want %v", states, want)
	}
	if len(svc.Published) != 2 || fmt.Sprint(svc.Published[1].Addresses) != "[198.18.0.11]" || !svc.Published[1].Time.Equal(t0.Add(3500*time.Millisecond)) {
		t.Errorf("published sets %+v, want two, the second [198.18.0.11] from t0+3.5s", svc.Published)
	}
	if len(svc.Failovers) != 1 {
		t.Fatalf("failovers %+v, want one", svc.Failovers)
	}
	f := svc.Failovers[0]
	if fmt.Sprint(f.Nodes, f.Addresses) != "[node-b] [198.18.0.12]" || f.DurationSeconds != 2.5 || !f.FirstFailure.Equal(t0.Add(time.Second)) {
		t.Errorf("failover %+v, want node-b's 198.18.0.12, 2.5 s from its first failed probe", f)
	}
}

// TestPlannedRemovalIsNoFailover: an address taken out while its targets
// are up (maintenance, scale-down) changes the published set only.
func TestPlannedRemovalIsNoFailover(t *testing.T) {
	states := failoverStates(testNow)
	// Skip the Down step: node-b leaves while Up.
	planned := states[2]
	planned.Services = []Service{planned.Services[0]}
	planned.Services[0].Targets = states[0].Services[0].Targets
	h := newHistory(HistoryOptions{})
	h.observe(states[0], testNow)
	h.observe(planned, testNow)
	got := h.snapshot(testNow).Services[0]
	if len(got.Failovers) != 0 || len(got.Published) != 2 {
		t.Errorf("failovers %+v and %d published sets, want none and 2", got.Failovers, len(got.Published))
	}
}

// flap feeds h n rounds of every target of a service alternating between
// Up and Down once a second, with a new reason and latency each time.
func flap(h *history, targets, n int, start time.Time) time.Time {
	now := start
	for i := range n {
		now = start.Add(time.Duration(i) * time.Second)
		svc := Service{Name: "flappy/svc", Healthy: true}
		state := StateUp
		if i%2 == 1 {
			state = StateDown
		}
		for k := range targets {
			svc.Targets = append(svc.Targets, Target{Node: fmt.Sprintf("node-%03d", k), Address: "198.18.1.1", Port: 80, Protocol: "TCP",
				State: state, Reason: fmt.Sprintf("round %d: %s", i, strings.Repeat("x", 300)), FailingSince: now,
				Vantages: []VantageResult{{Vantage: "v", State: state, Outcome: "L4OK", LatencySeconds: float64(i%50+1) / 1000}}})
		}
		if state == StateDown {
			svc.Published = []string{}
		} else {
			svc.Published, svc.PublishedNodes = []string{"198.18.1.1"}, []string{"node-000"}
		}
		h.observe(State{GeneratedAt: now, Services: []Service{svc}}, now)
	}
	return now
}

func TestHistoryBoundedUnderFlapping(t *testing.T) {
	opts := HistoryOptions{}.withDefaults()
	h := newHistory(opts)
	end := flap(h, 1, 3*int(opts.Window/time.Second), testNow)
	got := h.snapshot(end)
	th, sh := got.Targets[0], got.Services[0]
	if len(th.Changes) != opts.MaxChanges || len(th.Latency) != opts.MaxLatency {
		t.Errorf("target keeps %d changes and %d latency samples, want the caps %d and %d",
			len(th.Changes), len(th.Latency), opts.MaxChanges, opts.MaxLatency)
	}
	if len(sh.Published) != opts.MaxPublished || len(sh.Failovers) != opts.MaxFailovers {
		t.Errorf("service keeps %d published sets and %d failovers, want the caps %d and %d",
			len(sh.Published), len(sh.Failovers), opts.MaxPublished, opts.MaxFailovers)
	}
	for i := 1; i < len(th.Changes); i++ {
		if th.Changes[i].Time.Before(th.Changes[i-1].Time) || th.Changes[i].From != th.Changes[i-1].To {
			t.Fatalf("changes out of order at %d: %+v then %+v", i, th.Changes[i-1], th.Changes[i])
		}
	}
	if last := th.Changes[len(th.Changes)-1]; !last.Time.Equal(end) {
		t.Errorf("last change at %v, want the latest round %v", last.Time, end)
	}
	for _, c := range th.Changes {
		if len(c.Reason) > maxHistoryReasonBytes+len("…") {
			t.Fatalf("a reason of %d bytes is kept, want at most %d", len(c.Reason), maxHistoryReasonBytes)
		}
	}
	// Bytes retained: entries times their size plus their strings.
	targetBytes, serviceBytes := historyBytes(got)
	t.Logf("one flapping target at the caps retains %d entries, %d bytes; its service %d bytes",
		len(th.Changes)+len(th.Latency), targetBytes, serviceBytes)
	if targetBytes > 48<<10 || serviceBytes > 48<<10 {
		t.Errorf("a flapping target retains %d bytes and its service %d, want under 48 KiB each", targetBytes, serviceBytes)
	}

	// Once the target and Service are gone for a window, nothing is kept.
	h.observe(State{GeneratedAt: end.Add(opts.Window + time.Second)}, time.Time{})
	if got := h.snapshot(end); len(got.Targets)+len(got.Services) != 0 {
		t.Errorf("after a window unseen the history keeps %d targets and %d services, want none", len(got.Targets), len(got.Services))
	}
}

// TestHistoryMemoryUnderFlapping measures the heap a history of flapping
// targets holds: it stays under the figure docs/dashboard.md states per
// target, however long they flap.
func TestHistoryMemoryUnderFlapping(t *testing.T) {
	const targets = 40
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	opts := HistoryOptions{}.withDefaults()
	before := heap()
	h := newHistory(opts)
	end := flap(h, targets, int(opts.Window/time.Second), testNow)
	atWindow := heap()
	flap(h, targets, int(opts.Window/time.Second), end.Add(time.Second))
	after := heap()
	runtime.KeepAlive(h)
	perTarget := (int64(after) - int64(before)) / targets
	t.Logf("heap held by %d flapping targets: %d bytes after one window, %d after two: %d bytes per target",
		targets, int64(atWindow)-int64(before), int64(after)-int64(before), perTarget)
	if perTarget > 48<<10 {
		t.Errorf("a flapping target holds %d bytes of heap, want under 48 KiB", perTarget)
	}
	if int64(after)-int64(atWindow) > int64(atWindow-before)/4 {
		t.Errorf("heap grew from %d to %d bytes over a second window; the history must not grow", atWindow-before, after-before)
	}
}

// historyBytes estimates the bytes h retains for its targets and for its
// services: their entries and their strings.
func historyBytes(h History) (targets, services int) {
	const timeSize, stringSize, sliceSize = 24, 16, 24
	n := 0
	str := func(ss ...string) {
		for _, s := range ss {
			n += len(s)
		}
	}
	for _, th := range h.Targets {
		n += 4*stringSize + 8 + timeSize + 2*sliceSize
		str(th.Service, th.Node, th.Address, th.Protocol)
		for _, c := range th.Changes {
			n += timeSize + 4*stringSize
			str(c.Outcome, c.Reason)
		}
		n += len(th.Latency) * (timeSize + 8)
	}
	targets, n = n, 0
	for _, sh := range h.Services {
		for _, c := range sh.Changes {
			n += timeSize + 4*stringSize
			str(c.Outcome, c.Reason)
		}
		for _, p := range sh.Published {
			n += timeSize + 2*sliceSize + stringSize*(len(p.Addresses)+len(p.Nodes))
			str(p.Addresses...)
			str(p.Nodes...)
		}
		for _, f := range sh.Failovers {
			n += 2*timeSize + 2*sliceSize + 8 + stringSize*(1+len(f.Nodes)+len(f.Addresses))
			str(f.Reason)
			str(f.Nodes...)
			str(f.Addresses...)
		}
	}
	return targets, n
}

func TestHistoryJSON(t *testing.T) {
	d := newTestDashboard(Options{History: HistoryOptions{LatencyEvery: time.Second}})
	t0 := testNow.Add(-10 * time.Second)
	for _, s := range failoverStates(t0) {
		d.Update(s)
	}
	rec := get(t, d, http.MethodGet, PathHistory)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s = %d %q, want 200 JSON", PathHistory, rec.Code, rec.Header().Get("Content-Type"))
	}
	if v := rec.Header().Get(VersionHeader); v != "3" {
		t.Errorf("%s = %q, want 3", VersionHeader, v)
	}
	var got History
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.WindowSeconds != 3600 || len(got.Services) != 1 || len(got.Services[0].Failovers) != 1 || got.Services[0].Failovers[0].DurationSeconds != 2.5 {
		t.Errorf("history = %s, want a 3600 s window and one failover of 2.5 s", rec.Body)
	}
	for _, key := range []string{`"changes":[`, `"latency":[`, `"published":[`, `"failovers":[`, `"firstFailure":`, `"durationSeconds":2.5`} {
		if !strings.Contains(rec.Body.String(), key) {
			t.Errorf("history JSON lacks %s: %s", key, rec.Body)
		}
	}
}

func TestPageShowsHistory(t *testing.T) {
	d := newTestDashboard(Options{History: HistoryOptions{Window: 10 * time.Second, LatencyEvery: 2 * time.Second}})
	t0 := testNow.Add(-10 * time.Second)
	for _, s := range failoverStates(t0) {
		d.Update(s)
	}
	body := get(t, d, http.MethodGet, PathFragment).Body.String()
	for _, re := range []string{
		// node-b's timeline: an Up band, then a Down band up to now.
		`(?s)data-node="node-b".*?<rect class="band band-up" data-state="Up" x="0" y="8" width="200" height="12"><title>Up .*?<rect class="band band-down" data-state="Down" x="200" y="0" width="800" height="20"><title>Down since 2026-12-01 11:59:52Z \(8s, now\) L4CON: down by 2 of 3 probers`,
		// Its text label says the same without colour.
		`(?s)data-node="node-b".*?<span class="summary">Down now for 8s · 1 outage in the last 10s, 8s</span>`,
		// node-a's latency sparkline has two samples.
		`(?s)data-node="node-a".*?<svg class="sparkline" [^>]*data-points="2"><polyline points="[0-9., ]+"></polyline></svg><span class="summary">last 4.00 ms, max 4.00 ms</span>`,
		// The failover log gives the duration from the first failed probe.
		`(?s)<tr class="failover" data-service="shop/web" data-nodes="node-b">.*?<code>198.18.0.12</code>.*?<td class="duration">2.5s</td>`,
		// The published log shows the set after the failover.
		`(?s)<tr class="published-set" data-service="shop/web">\s*<td>shop/web</td>\s*<td><time[^>]*>2026-12-01 11:59:53Z</time></td>\s*<td>now</td>\s*<td><code>198.18.0.11</code>`,
		// The Service's band went Degraded.
		`(?s)<tr class="service".*?data-state="Degraded"`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("fragment does not match %s", re)
		}
	}
	if t.Failed() {
		t.Logf("fragment:\n%s", body)
	}

	// node-b's proxy moves away: its target leaves the State, and its past
	// stays on the page among the targets no longer probed.
	moved := failoverStates(t0)[2]
	moved.GeneratedAt = testNow
	moved.Services[0].Targets = moved.Services[0].Targets[:1]
	d.Update(moved)
	body = get(t, d, http.MethodGet, PathFragment).Body.String()
	re := regexp.MustCompile(`(?s)<section id="former">.*?<tr class="former" data-service="shop/web" data-node="node-b" data-port="443">.*?data-state="Down".*?<span class="summary">gone 6s ago, last Down · 1 outage in the last 10s, 1s</span>`)
	if !re.MatchString(body) {
		t.Errorf("fragment does not show node-b as no longer probed, with its down band:\n%s", body)
	}
}

// TestTimelineSummary: the words under a timeline say what the colours
// do, and how far back the history reaches.
func TestTimelineSummary(t *testing.T) {
	now, window := testNow, time.Hour
	from := now.Add(-window)
	for _, tc := range []struct {
		name    string
		changes []StateChange
		end     time.Time
		want    string
	}{
		{"none", nil, now, "no history yet"},
		{"young history", []StateChange{{Time: now.Add(-time.Minute), To: StateUp}}, now,
			"Up now for 1m0s · no outage since 2026-12-01 11:59:00Z"},
		{"two outages, one flapping", []StateChange{
			{Time: now.Add(-2 * time.Hour), To: StateUp},
			{Time: now.Add(-30 * time.Minute), From: StateUp, To: StateDown},
			{Time: now.Add(-29 * time.Minute), From: StateDown, To: StateUp},
			{Time: now.Add(-10 * time.Minute), From: StateUp, To: StateDown},
			{Time: now.Add(-9 * time.Minute), From: StateDown, To: StateFlapping},
			{Time: now.Add(-8 * time.Minute), From: StateFlapping, To: StateUp},
		}, now, "Up now for 8m0s · 2 outages in the last 1h, 3m0s in all"},
		{"gone", []StateChange{{Time: now.Add(-2 * time.Hour), To: StateDown}}, now.Add(-5 * time.Minute),
			"gone 5m0s ago, last Down · 1 outage in the last 1h, 55m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newTimeline(tc.changes, from, tc.end, now, window).Summary; got != tc.want {
				t.Errorf("summary %q, want %q", got, tc.want)
			}
		})
	}
}

// TestZeroCountIsNeutral: "0 down" is not drawn in the down colour, and a
// count above zero is.
func TestZeroCountIsNeutral(t *testing.T) {
	d := newTestDashboard(Options{})
	s := testState()
	s.Services[0].Targets = s.Services[0].Targets[:1] // node-a, Up
	d.Update(s)
	body := get(t, d, http.MethodGet, PathFragment).Body.String()
	if !strings.Contains(body, `<span class="count count-zero">0 down</span>`) {
		t.Errorf("no neutral 0 down in:\n%s", body)
	}
	if !strings.Contains(body, `<span class="count state-up">1 up</span>`) {
		t.Errorf("no coloured 1 up in:\n%s", body)
	}
	d.Update(testState())
	if body := get(t, d, http.MethodGet, PathFragment).Body.String(); !strings.Contains(body, `<span class="count state-down">1 down</span>`) {
		t.Errorf("1 down is not in the down colour:\n%s", body)
	}
}

// TestPageSaysWhenItIsStatic: the text the page has before its script
// runs is true of a page without JavaScript, and says so.
func TestPageSaysWhenItIsStatic(t *testing.T) {
	d := newTestDashboard(Options{})
	body := get(t, d, http.MethodGet, PathPage).Body.String()
	if !strings.Contains(body, `<span id="live" class="live-off">static page (JavaScript is off): reload to refresh</span>`) {
		t.Errorf("the live indicator does not say the page is static only without JavaScript:\n%s", body)
	}
	js, _ := assets.ReadFile("assets/dashboard.js")
	if !strings.Contains(string(js), `setLive('live-pending', 'connecting to the event stream…')`) {
		t.Error("the script does not replace the static text at once when it runs")
	}
}

// TestYoungHistoryFillsTheAxis: a history younger than the window is drawn
// across the whole width, and the page says since when.
func TestYoungHistoryFillsTheAxis(t *testing.T) {
	d := newTestDashboard(Options{})
	for _, s := range failoverStates(testNow.Add(-10 * time.Second)) {
		d.Update(s)
	}
	body := get(t, d, http.MethodGet, PathFragment).Body.String()
	for _, re := range []string{
		`Timelines cover the time since 2026-12-01 11:59:50Z, when this process began to record \(at most 1h\)`,
		`(?s)data-node="node-b".*?<rect class="band band-up" data-state="Up" x="0" y="8" width="200" height="12">.*?<rect class="band band-down" data-state="Down" x="200" y="0" width="800" height="20">`,
		`(?s)data-node="node-b".*?<span class="summary">Down now for 8s · 1 outage since 2026-12-01 11:59:50Z, 8s</span>`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("fragment does not match %s", re)
		}
	}
	if t.Failed() {
		t.Logf("fragment:\n%s", body)
	}
}

// TestPageBoundsTheLogs: the page shows at most MaxLogRows rows of the
// failover and published-address logs, the newest; the JSON has all.
func TestPageBoundsTheLogs(t *testing.T) {
	d := newTestDashboard(Options{})
	h := newHistory(HistoryOptions{})
	end := flap(h, 1, 400, testNow.Add(-time.Hour/2))
	d.hist = h
	d.Update(State{GeneratedAt: end})
	body := get(t, d, http.MethodGet, PathFragment).Body.String()
	if n := strings.Count(body, `<tr class="failover"`); n != MaxLogRows {
		t.Errorf("page shows %d failovers, want %d", n, MaxLogRows)
	}
	if n := strings.Count(body, `<tr class="published-set"`); n != MaxLogRows {
		t.Errorf("page shows %d published sets, want %d", n, MaxLogRows)
	}
	if hist := d.History(); len(hist.Services[0].Published) != DefaultMaxPublished {
		t.Errorf("history keeps %d published sets, want %d", len(hist.Services[0].Published), DefaultMaxPublished)
	}
}

// TestHistoryWhileReading reads the page and the history JSON while a
// flapping producer updates the Dashboard; run with -race, it shows that
// the page's views and the JSON never read the history as it changes.
func TestHistoryWhileReading(t *testing.T) {
	d := newTestDashboard(Options{History: HistoryOptions{MaxChanges: 8, MaxLatency: 8, MaxPublished: 4, MaxFailovers: 4, LatencyEvery: time.Nanosecond}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 3000 {
			now := testNow.Add(time.Duration(i) * time.Second)
			state := StateUp
			if i%2 == 1 {
				state = StateDown
			}
			svc := Service{Name: "flappy/svc", Healthy: true, Targets: []Target{{Node: "n1", Address: "198.18.1.1", Port: 80, Protocol: "TCP",
				State: state, FailingSince: now, Reason: fmt.Sprint("round ", i),
				Vantages: []VantageResult{{Vantage: "v", State: state, LatencySeconds: float64(i+1) / 1000}}}}}
			if state == StateUp {
				svc.Published, svc.PublishedNodes = []string{"198.18.1.1"}, []string{"n1"}
			}
			d.Update(State{GeneratedAt: now, Services: []Service{svc}})
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			t.Logf("%d reads of the page and the history while updating", reads)
			return
		default:
		}
		if rec := get(t, d, http.MethodGet, PathFragment); rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d", PathFragment, rec.Code)
		}
		if rec := get(t, d, http.MethodGet, PathHistory); rec.Code != http.StatusOK {
			t.Fatalf("GET %s = %d", PathHistory, rec.Code)
		}
	}
}
