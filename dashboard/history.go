package dashboard

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// HistoryOptions bound the history a Dashboard keeps in memory. Zero
// fields take the defaults below. History lives only in the process: a
// restart or another replica starts empty. Prometheus metrics are the
// long-term record.
type HistoryOptions struct {
	// Window is how far back the history reaches (default 1h). A target or
	// Service unseen for that long is forgotten.
	Window time.Duration
	// MaxChanges bounds the state changes kept per target and per Service
	// (default 120); a flapping target keeps its latest.
	MaxChanges int
	// MaxLatency bounds the latency samples kept per target (default 360).
	MaxLatency int
	// LatencyEvery is the least time between two latency samples of a
	// target (default 10s: 360 samples cover the hour).
	LatencyEvery time.Duration
	// MaxPublished bounds the published address sets kept per Service
	// (default 120).
	MaxPublished int
	// MaxFailovers bounds the failovers kept per Service (default 50).
	MaxFailovers int
	// MaxTargets and MaxServices bound how many are tracked at once,
	// those no longer in the State included (defaults 1000 and 200); the
	// longest unseen are forgotten first.
	MaxTargets, MaxServices int
}

// History defaults.
const (
	DefaultHistoryWindow   = time.Hour
	DefaultMaxChanges      = 120
	DefaultMaxLatency      = 360
	DefaultLatencyEvery    = 10 * time.Second
	DefaultMaxPublished    = 120
	DefaultMaxFailovers    = 50
	DefaultMaxTargets      = 1000
	DefaultMaxServices     = 200
	maxHistoryReasonBytes  = 160
	maxHistoryAddressCount = 64
)

// States of the history's bands: a target's verdict (StateUp, StateDown,
// StateUnknown), StateFlapping while flap damping holds it Down, and for
// a Service StateDegraded when some but not all of its targets are down.
const (
	StateUp       = "Up"
	StateDown     = "Down"
	StateUnknown  = "Unknown"
	StateFlapping = "Flapping"
	StateDegraded = "Degraded"
)

func (o HistoryOptions) withDefaults() HistoryOptions {
	o.Window = cmp.Or(max(o.Window, 0), DefaultHistoryWindow)
	o.MaxChanges = cmp.Or(max(o.MaxChanges, 0), DefaultMaxChanges)
	o.MaxLatency = cmp.Or(max(o.MaxLatency, 0), DefaultMaxLatency)
	o.LatencyEvery = cmp.Or(max(o.LatencyEvery, 0), DefaultLatencyEvery)
	o.MaxPublished = cmp.Or(max(o.MaxPublished, 0), DefaultMaxPublished)
	o.MaxFailovers = cmp.Or(max(o.MaxFailovers, 0), DefaultMaxFailovers)
	o.MaxTargets = cmp.Or(max(o.MaxTargets, 0), DefaultMaxTargets)
	o.MaxServices = cmp.Or(max(o.MaxServices, 0), DefaultMaxServices)
	return o
}

// History is what the dashboard remembers, and the JSON document served
// at /api/v1/history. Lists are oldest first.
type History struct {
	GeneratedAt time.Time `json:"generatedAt"`
	// WindowSeconds is how far back the history reaches.
	WindowSeconds float64 `json:"windowSeconds"`
	// Targets are sorted by Service, Node, Port and Protocol.
	Targets []TargetHistory `json:"targets"`
	// Services are sorted by Name.
	Services []ServiceHistory `json:"services"`
}

// TargetHistory is one target's past.
type TargetHistory struct {
	Service  string `json:"service"`
	Node     string `json:"node"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	// LastSeen is when a State last listed the target; it has no band
	// after that.
	LastSeen time.Time `json:"lastSeen"`
	// Changes are its state changes. The first may be older than the
	// window: it is the state the window starts in.
	Changes []StateChange `json:"changes"`
	// Latency are samples of its probe latency: the median over its
	// fresh vantages.
	Latency []LatencySample `json:"latency"`
}

// StateChange is one change of a target's or a Service's band state.
type StateChange struct {
	Time time.Time `json:"time"`
	// From is empty for the first state seen.
	From string `json:"from,omitempty"`
	To   string `json:"to"`
	// Outcome is the typed outcome of a probe that agrees with To, such as
	// L4CON.
	Outcome string `json:"outcome,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// LatencySample is a target's probe latency at a time.
type LatencySample struct {
	Time    time.Time `json:"time"`
	Seconds float64   `json:"seconds"`
}

// ServiceHistory is one Service's past.
type ServiceHistory struct {
	Name     string        `json:"name"`
	LastSeen time.Time     `json:"lastSeen"`
	Changes  []StateChange `json:"changes"`
	// Published are the published address sets, each from its Time until
	// the next.
	Published []PublishedSet `json:"published"`
	Failovers []Failover     `json:"failovers"`
}

// PublishedSet is what a Service published from Time on.
type PublishedSet struct {
	Time      time.Time `json:"time"`
	Addresses []string  `json:"addresses"`
	Nodes     []string  `json:"nodes,omitempty"`
}

// Failover is an address of a Service leaving the published set because
// its target failed.
type Failover struct {
	// Time is when the dashboard first saw the addresses out of the
	// published set.
	Time time.Time `json:"time"`
	// Nodes and Addresses are those that left.
	Nodes     []string `json:"nodes,omitempty"`
	Addresses []string `json:"addresses"`
	// FirstFailure is the first failed probe of the failed targets; zero
	// when no report said.
	FirstFailure time.Time `json:"firstFailure,omitzero"`
	// DurationSeconds is Time minus FirstFailure; 0 without FirstFailure.
	DurationSeconds float64 `json:"durationSeconds"`
	Reason          string  `json:"reason,omitempty"`
}

// history keeps the past of the States given to observe. It is not safe
// for concurrent use; the Dashboard holds its lock.
type history struct {
	opts     HistoryOptions
	targets  map[targetID]*TargetHistory
	services map[string]*ServiceHistory
}

type targetID struct {
	service, node string
	port          int
	protocol      string
}

func newHistory(opts HistoryOptions) *history {
	return &history{opts: opts.withDefaults(), targets: map[targetID]*TargetHistory{}, services: map[string]*ServiceHistory{}}
}

// observe records what s changes, at s.GeneratedAt (now when zero), and
// forgets what is older than the window. It reports whether anything was
// recorded.
func (h *history) observe(s State, now time.Time) bool {
	if !s.GeneratedAt.IsZero() {
		now = s.GeneratedAt
	}
	changed := false
	for _, svc := range s.Services {
		sh := h.services[svc.Name]
		if sh == nil {
			sh = &ServiceHistory{Name: svc.Name, Changes: []StateChange{}, Published: []PublishedSet{}, Failovers: []Failover{}}
			h.services[svc.Name] = sh
		}
		sh.LastSeen = now
		for _, t := range svc.Targets {
			if h.observeTarget(svc.Name, t, now) {
				changed = true
			}
		}
		if h.observeService(sh, svc, now) {
			changed = true
		}
	}
	h.prune(now)
	return changed
}

func (h *history) observeTarget(service string, t Target, now time.Time) bool {
	id := targetID{service: service, node: t.Node, port: t.Port, protocol: t.Protocol}
	th := h.targets[id]
	if th == nil {
		th = &TargetHistory{Service: service, Node: t.Node, Port: t.Port, Protocol: t.Protocol,
			Changes: []StateChange{}, Latency: []LatencySample{}}
		h.targets[id] = th
	}
	th.Address, th.LastSeen = t.Address, now
	changed := false
	state := bandState(t)
	var last StateChange
	if n := len(th.Changes); n > 0 {
		last = th.Changes[n-1]
	}
	if len(th.Changes) == 0 || last.To != state {
		// The producer's Since is more precise than now when it is newer
		// than what is recorded.
		at := now
		if !t.Since.IsZero() && !t.Since.After(now) && t.Since.After(last.Time) {
			at = t.Since
		}
		th.Changes = appendBounded(th.Changes, StateChange{Time: at, From: last.To, To: state,
			Outcome: outcomeFor(t), Reason: reuse(th.Changes, state, t.Reason)}, h.opts.MaxChanges)
		changed = true
	}
	if l, ok := medianLatency(t); ok {
		if n := len(th.Latency); n == 0 || now.Sub(th.Latency[n-1].Time) >= h.opts.LatencyEvery {
			th.Latency = appendBounded(th.Latency, LatencySample{Time: now, Seconds: l}, h.opts.MaxLatency)
			changed = true
		}
	}
	return changed
}

func (h *history) observeService(sh *ServiceHistory, svc Service, now time.Time) bool {
	changed := false
	state, reason := serviceState(svc)
	if n := len(sh.Changes); n == 0 || sh.Changes[n-1].To != state {
		from := ""
		if n > 0 {
			from = sh.Changes[n-1].To
		}
		sh.Changes = appendBounded(sh.Changes, StateChange{Time: now, From: from, To: state, Reason: reason}, h.opts.MaxChanges)
		changed = true
	}
	addrs := svc.Published
	if len(addrs) > maxHistoryAddressCount {
		addrs = addrs[:maxHistoryAddressCount]
	}
	nodes := svc.PublishedNodes
	if len(nodes) > maxHistoryAddressCount {
		nodes = nodes[:maxHistoryAddressCount]
	}
	n := len(sh.Published)
	if n > 0 && sameSet(sh.Published[n-1].Addresses, addrs) && sameSet(sh.Published[n-1].Nodes, nodes) {
		return changed
	}
	cur := PublishedSet{Time: now, Addresses: slices.Clone(addrs), Nodes: slices.Clone(nodes)}
	if cur.Addresses == nil {
		cur.Addresses = []string{}
	}
	if n > 0 {
		if f, ok := failover(sh.Published[n-1], cur, svc, now); ok {
			sh.Failovers = appendBounded(sh.Failovers, f, h.opts.MaxFailovers)
		}
	}
	sh.Published = appendBounded(sh.Published, cur, h.opts.MaxPublished)
	return true
}

// failover returns the failover of svc that took it from prev to cur: the
// nodes (or, without nodes, the addresses) that left, when a target of
// theirs is down. Addresses taken out for another reason, such as
// maintenance, are no failover.
func failover(prev, cur PublishedSet, svc Service, now time.Time) (Failover, bool) {
	f := Failover{Time: now, Addresses: []string{}}
	for _, a := range prev.Addresses {
		if !slices.Contains(cur.Addresses, a) && !slices.Contains(f.Addresses, a) {
			f.Addresses = append(f.Addresses, a)
		}
	}
	var left []string
	for _, n := range prev.Nodes {
		if !slices.Contains(cur.Nodes, n) {
			left = append(left, n)
		}
	}
	failed := false
	for _, t := range svc.Targets {
		var gone bool
		if len(prev.Nodes) > 0 {
			gone = slices.Contains(left, t.Node)
		} else {
			gone = slices.Contains(f.Addresses, t.Address)
		}
		if !gone || (t.State != StateDown && !t.Flapping) {
			continue
		}
		failed = true
		if !slices.Contains(f.Nodes, t.Node) {
			f.Nodes = append(f.Nodes, t.Node)
		}
		if !t.FailingSince.IsZero() && !t.FailingSince.After(now) && (f.FirstFailure.IsZero() || t.FailingSince.Before(f.FirstFailure)) {
			f.FirstFailure = t.FailingSince
			f.Reason = truncate(t.Reason)
		}
		if f.Reason == "" {
			f.Reason = truncate(t.Reason)
		}
	}
	if !failed || (len(f.Addresses) == 0 && len(left) == 0) {
		return Failover{}, false
	}
	slices.Sort(f.Nodes)
	if !f.FirstFailure.IsZero() {
		f.DurationSeconds = now.Sub(f.FirstFailure).Seconds()
	}
	return f, true
}

// prune forgets entries older than the window, keeping each target's and
// Service's last change before it (the state the window starts in), and
// what is unseen for the whole window; then the longest unseen beyond
// MaxTargets and MaxServices.
func (h *history) prune(now time.Time) {
	from := now.Add(-h.opts.Window)
	for id, th := range h.targets {
		if th.LastSeen.Before(from) {
			delete(h.targets, id)
			continue
		}
		th.Changes = dropBefore(th.Changes, func(c StateChange) time.Time { return c.Time }, from, 1)
		th.Latency = dropBefore(th.Latency, func(l LatencySample) time.Time { return l.Time }, from, 0)
	}
	for name, sh := range h.services {
		if sh.LastSeen.Before(from) {
			delete(h.services, name)
			continue
		}
		sh.Changes = dropBefore(sh.Changes, func(c StateChange) time.Time { return c.Time }, from, 1)
		sh.Published = dropBefore(sh.Published, func(p PublishedSet) time.Time { return p.Time }, from, 1)
		sh.Failovers = dropBefore(sh.Failovers, func(f Failover) time.Time { return f.Time }, from, 0)
	}
	evictOldest(h.targets, h.opts.MaxTargets, func(t *TargetHistory) time.Time { return t.LastSeen })
	evictOldest(h.services, h.opts.MaxServices, func(s *ServiceHistory) time.Time { return s.LastSeen })
}

// snapshot returns a deep copy of the history at now, sorted.
func (h *history) snapshot(now time.Time) History {
	out := h.alias(now)
	for i := range out.Targets {
		th := &out.Targets[i]
		th.Changes, th.Latency = slices.Clone(th.Changes), slices.Clone(th.Latency)
	}
	for i := range out.Services {
		sh := &out.Services[i]
		sh.Changes, sh.Failovers, sh.Published = slices.Clone(sh.Changes), slices.Clone(sh.Failovers), slices.Clone(sh.Published)
	}
	return out
}

// alias returns the history at now, sorted, sharing its lists with h: it
// must be used, and dropped, before h changes. The addresses and nodes of
// a PublishedSet or Failover never change once recorded, and may be kept.
func (h *history) alias(now time.Time) History {
	out := History{GeneratedAt: now, WindowSeconds: h.opts.Window.Seconds(),
		Targets: make([]TargetHistory, 0, len(h.targets)), Services: make([]ServiceHistory, 0, len(h.services))}
	for _, th := range h.targets {
		out.Targets = append(out.Targets, *th)
	}
	for _, sh := range h.services {
		out.Services = append(out.Services, *sh)
	}
	slices.SortFunc(out.Targets, func(a, b TargetHistory) int {
		return cmp.Or(strings.Compare(a.Service, b.Service), strings.Compare(a.Node, b.Node), cmp.Compare(a.Port, b.Port),
			strings.Compare(a.Protocol, b.Protocol))
	})
	slices.SortFunc(out.Services, func(a, b ServiceHistory) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// bandState is the state t's band shows.
func bandState(t Target) string {
	switch {
	case t.Flapping:
		return StateFlapping
	case t.State == StateUp, t.State == StateDown:
		return t.State
	}
	return StateUnknown
}

// serviceState is the state svc's band shows, and why.
func serviceState(svc Service) (string, string) {
	var up, down, flapping int
	for _, t := range svc.Targets {
		switch bandState(t) {
		case StateUp:
			up++
		case StateDown:
			down++
		case StateFlapping:
			flapping++
		}
	}
	switch {
	case up+down+flapping == 0:
		return StateUnknown, "no target judged yet"
	case !svc.Healthy:
		return StateDown, "no healthy address (" + cmp.Or(svc.AllDown, "publish-all") + ")"
	case flapping > 0:
		return StateFlapping, plural(flapping, "target") + " flapping"
	case down > 0:
		return StateDegraded, plural(down, "target") + " down of " + plural(len(svc.Targets), "")
	}
	return StateUp, "every judged target up"
}

func plural(n int, noun string) string {
	s := strconv.Itoa(n)
	if noun == "" {
		return s
	}
	if n == 1 {
		return s + " " + noun
	}
	return s + " " + noun + "s"
}

// outcomeFor is the outcome of a fresh vantage that agrees with t's
// verdict.
func outcomeFor(t Target) string {
	want := t.State
	for _, v := range t.Vantages {
		if !v.Stale && v.State == want && v.Outcome != "" {
			return v.Outcome
		}
	}
	return ""
}

// medianLatency is the median of the latencies t's fresh vantages
// measured.
func medianLatency(t Target) (float64, bool) {
	var ls []float64
	for _, v := range t.Vantages {
		if !v.Stale && v.LatencySeconds > 0 && v.LatencySeconds < 1e6 {
			ls = append(ls, v.LatencySeconds)
		}
	}
	if len(ls) == 0 {
		return 0, false
	}
	slices.Sort(ls)
	if len(ls)%2 == 1 {
		return ls[len(ls)/2], true
	}
	return (ls[len(ls)/2-1] + ls[len(ls)/2]) / 2, true
}

// reuse returns reason truncated, sharing the string of the last change
// to the same state when it says the same: a flapping target repeats its
// reasons.
func reuse(changes []StateChange, state, reason string) string {
	for i := len(changes) - 1; i >= 0 && i >= len(changes)-4; i-- {
		if c := changes[i]; c.To == state && (c.Reason == reason || c.Reason == truncate(reason)) {
			return c.Reason
		}
	}
	return truncate(reason)
}

// truncate bounds a producer's text kept in the history.
func truncate(s string) string {
	if len(s) <= maxHistoryReasonBytes {
		return strings.Clone(s)
	}
	cut := maxHistoryReasonBytes
	for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return s[:cut] + "…"
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// appendBounded appends v and drops the oldest entries beyond limit,
// moving the rest so that the dropped ones are not kept alive. The slice
// never grows beyond limit, so its capacity is the bound too.
func appendBounded[T any](s []T, v T, limit int) []T {
	if over := len(s) - limit + 1; over > 0 {
		n := copy(s, s[over:])
		clear(s[n:])
		s = s[:n]
	}
	if len(s) == cap(s) {
		grown := make([]T, len(s), min(max(2*cap(s), 4), limit))
		copy(grown, s)
		s = grown
	}
	return append(s, v)
}

// dropBefore drops the entries older than from (s is oldest first), but
// keeps the last keep of them.
func dropBefore[T any](s []T, at func(T) time.Time, from time.Time, keep int) []T {
	old := 0
	for old < len(s) && at(s[old]).Before(from) {
		old++
	}
	drop := old - keep
	if drop <= 0 {
		return s
	}
	n := copy(s, s[drop:])
	clear(s[n:])
	return s[:n]
}

// evictOldest deletes the entries of m with the oldest seen times until
// at most limit are left.
func evictOldest[K comparable, V any](m map[K]V, limit int, seen func(V) time.Time) {
	over := len(m) - limit
	if over <= 0 {
		return
	}
	type entry struct {
		k K
		t time.Time
	}
	all := make([]entry, 0, len(m))
	for k, v := range m {
		all = append(all, entry{k, seen(v)})
	}
	slices.SortFunc(all, func(a, b entry) int { return a.t.Compare(b.t) })
	for _, e := range all[:over] {
		delete(m, e.k)
	}
}
