package status

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Engine reaches the verdicts on a set of targets round after round: the
// quorum of Judge, beacons first, flap damping, and how long each target
// has been Down. The leader, every controller replica's dashboard and a
// standalone instance each keep one, so that for the same reports they
// show the same verdicts. The zero value is ready. Judge may be called by
// one goroutine at a time; the accessors are safe alongside it.
type Engine struct {
	// judging serialises Judge: the damper and the previous verdicts it
	// reads are one round's input.
	judging sync.Mutex
	damper  Damper

	mu       sync.RWMutex
	verdicts map[string]Judgement
	// downSince holds when each target's verdict last turned Down, for as
	// long as it stays Down; a Down held by flap damping does not count,
	// so a flapping target does not get its proxy restarted.
	downSince map[string]time.Time
	held      int
	// upSeen holds the targets ever judged Up, for as long as they are
	// judged; quiet holds the targets whose Down verdict has not been
	// announced (Change.Quiet). Only Judge uses them.
	upSeen map[string]bool
	quiet  map[string]bool
	// back holds when each node's beacon last turned Up from Down, for
	// ReturnGrace and ReturnMax. Only Judge and Rejudge use it.
	back map[string]time.Time

	// What Rejudge needs of the previous round, kept by Judge and Rejudge:
	// the targets of the last Judge, by key and by vantage; the nodes whose
	// beacon is Down; the probers ignored in judging beacons and in
	// judging the other targets; the targets held Down by flap damping,
	// whose verdict depends on the time (guarded by mu too); and whether
	// Restore set a verdict since.
	targets    []Target
	pos        map[string]int
	byVantage  map[string][]int
	beaconDown map[string]bool
	ignored    [2]map[string]bool
	flapping   map[string]bool
	restored   bool
	// judged is how many targets the last round judged.
	judged int
}

// Change is a target whose verdict changed in a round, or whose quiet Down
// verdict is now due to be announced.
type Change struct {
	Target   Target
	From, To Judgement
	// Quiet marks a change that calls for no alarm: a change to Down of a
	// target that is Starting and was never Up, or the change that ends
	// such a Down.
	Quiet bool
	// Late marks a Change whose From and To are the same Down verdict: a
	// quiet Down that outlasted the target's start, to be announced now as
	// a change to Down would have been. It comes once per Down verdict.
	Late bool
}

// quietChange returns whether the change of t from was to is calls for no
// alarm, and records the quiet Down verdicts. A Down verdict on a target
// being started is expected, as its probers find it refusing until it
// serves, and announcing it would raise an alarm at every new Service.
// e.judging must be held.
func (e *Engine) quietChange(t Target, was, is Verdict) bool {
	switch {
	case is == VerdictDown && t.Starting && !e.upSeen[t.Key]:
		e.quiet[t.Key] = true
		return true
	case was == VerdictDown && e.quiet[t.Key]:
		delete(e.quiet, t.Key)
		return true
	}
	return false
}

// expireBack forgets the nodes back from Down whose probers vote again at
// now: ReturnGrace has passed since the node's beacon came back and its
// prober has written its report since, or ReturnMax has passed (see
// ReturnMax). e.judging must be held.
func (e *Engine) expireBack(reports Reports, now time.Time) {
	for n, t := range e.back {
		since := now.Sub(t)
		if since >= ReturnMax || since >= ReturnGrace && reports.Written(n).After(t) {
			delete(e.back, n)
		}
	}
}

// Judge judges targets over reports at now and returns those whose verdict
// changed, in the order of targets. Beacons are judged first, ignoring the
// probers on nodes whose beacon was Down before this round; then the
// other targets, ignoring the probers on nodes whose beacon is Down now.
// Both ignore, too, the probers on nodes whose beacon came back Up less
// than ReturnGrace ago, or whose report predates that return (at most
// ReturnMax).
// It sets each target's Ignore itself. Targets not in targets are
// forgotten.
func (e *Engine) Judge(reports Reports, targets []Target, now time.Time) []Change {
	e.judging.Lock()
	defer e.judging.Unlock()
	return e.judge(reports, targets, now)
}

// judge is Judge with e.judging held.
func (e *Engine) judge(reports Reports, targets []Target, now time.Time) []Change {
	e.mu.RLock()
	// Only Judge replaces the map, and never changes it in place.
	prev := e.verdicts
	e.mu.RUnlock()

	next := make(map[string]Judgement, len(targets))
	if e.back == nil {
		e.back = map[string]time.Time{}
	}
	e.expireBack(reports, now)
	// down holds the nodes whose probers do not vote: Down, or back from
	// Down for less than ReturnGrace.
	down := map[string]bool{}
	for n := range e.back {
		down[n] = true
	}
	for _, t := range targets {
		if t.Beacon && prev[t.Key].Verdict == VerdictDown {
			down[t.Node] = true
		}
	}
	var ignored [2]map[string]bool
	for phase, beacons := range []bool{true, false} {
		ignored[phase] = down
		for _, t := range targets {
			if t.Beacon != beacons {
				continue
			}
			t.Ignore = down
			was := prev[t.Key].Verdict
			next[t.Key] = e.damper.Apply(t.Key, was, Judge(reports, t, was), now)
		}
		if beacons {
			down = map[string]bool{}
			for _, t := range targets {
				if !t.Beacon {
					continue
				}
				switch {
				case next[t.Key].Verdict == VerdictDown:
					down[t.Node] = true
				case prev[t.Key].Verdict == VerdictDown:
					e.back[t.Node] = now
				}
			}
			for n := range e.back {
				down[n] = true
			}
		}
	}
	e.damper.Retain(func(k string) bool { _, ok := next[k]; return ok })
	if e.upSeen == nil {
		e.upSeen, e.quiet = map[string]bool{}, map[string]bool{}
	}
	for k := range e.upSeen {
		if _, ok := next[k]; !ok {
			delete(e.upSeen, k)
		}
	}
	for k := range e.quiet {
		if _, ok := next[k]; !ok {
			delete(e.quiet, k)
		}
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	since := make(map[string]time.Time, len(e.downSince))
	held := 0
	for k, j := range next {
		if j.Reason == ReasonFlapping {
			held++
			continue
		}
		if j.Verdict != VerdictDown {
			continue
		}
		if t, ok := e.downSince[k]; ok && prev[k].Verdict == VerdictDown {
			since[k] = t
		} else {
			since[k] = now
		}
	}
	e.verdicts, e.downSince, e.held = next, since, held
	e.remember(targets, ignored)
	e.judged = len(targets)

	var changes []Change
	for _, t := range targets {
		changes = e.appendChange(changes, t, prev[t.Key], next[t.Key])
	}
	return changes
}

// appendChange appends to changes what t's verdict going from was to is
// is: a change, or a late warning for a quiet Down whose target stopped
// starting; and remembers that t was seen Up.
func (e *Engine) appendChange(changes []Change, t Target, was, is Judgement) []Change {
	switch {
	case was.Verdict != is.Verdict:
		changes = append(changes, Change{Target: t, From: was, To: is, Quiet: e.quietChange(t, was.Verdict, is.Verdict)})
	case is.Verdict == VerdictDown && e.quiet[t.Key] && !t.Starting:
		delete(e.quiet, t.Key)
		changes = append(changes, Change{Target: t, From: is, To: is, Late: true})
	}
	if is.Verdict == VerdictUp {
		e.upSeen[t.Key] = true
	}
	return changes
}

// Restore sets key's previous verdict, such as one saved before a
// restart, for the next Judge to start from.
func (e *Engine) Restore(key string, v Verdict) {
	e.judging.Lock()
	defer e.judging.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	// A copy: a reader may hold the old map.
	next := maps.Clone(e.verdicts)
	if next == nil {
		next = map[string]Judgement{}
	}
	next[key] = Judgement{Verdict: v}
	e.verdicts = next
	e.restored = true
}

// Verdict returns the latest judgement of key; its Verdict is Unknown for
// a target never judged.
func (e *Engine) Verdict(key string) Judgement {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.verdicts[key]
}

// DownFor returns how long key's verdict has been Down at now, not
// counting a Down held by flap damping; zero when it is not Down.
func (e *Engine) DownFor(key string, now time.Time) time.Duration {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if t, ok := e.downSince[key]; ok {
		return max(now.Sub(t), 0)
	}
	return 0
}

// Flapping returns how many targets the latest round held Down by flap
// damping.
func (e *Engine) Flapping() int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.held
}

// remember keeps what Rejudge needs of a round of Judge over targets, in
// which ignored were the probers ignored in judging beacons and the other
// targets. e.judging and e.mu must be held.
func (e *Engine) remember(targets []Target, ignored [2]map[string]bool) {
	e.targets = slices.Clone(targets)
	e.pos = make(map[string]int, len(targets))
	e.byVantage = map[string][]int{}
	e.beaconDown, e.flapping = map[string]bool{}, map[string]bool{}
	for i, t := range e.targets {
		e.targets[i].Ignore = nil
		e.pos[t.Key] = i
		for _, v := range t.Vantages {
			e.byVantage[v] = append(e.byVantage[v], i)
		}
		j := e.verdicts[t.Key]
		if t.Beacon && j.Verdict == VerdictDown {
			e.beaconDown[t.Node] = true
		}
		if j.Reason == ReasonFlapping {
			e.flapping[t.Key] = true
		}
	}
	e.ignored = [2]map[string]bool{maps.Clone(ignored[0]), maps.Clone(ignored[1])}
	e.restored = false
}

// Rejudge judges again, over reports at now, the targets of the last Judge,
// as Judge would, but only those whose verdict can have changed since the
// previous round: the targets named in keys (a prober's observation of
// them changed, see Reports.Put), those a prober in vantages probes (it
// turned fresh or stale), those whose ignored probers changed (a beacon's
// verdict changed, or a returned prober votes again: see expireBack),
// those held Down by flap damping (the hold ends with time) and those
// whose Down verdict is quiet.
// Every other target's verdict is what it was: its inputs are the same,
// and Judge with the same inputs and the verdict it gave before gives it
// again. A round with nothing to judge again does nothing. It returns the
// changes as Judge does, in the order of the targets. After Restore it
// judges every target.
func (e *Engine) Rejudge(reports Reports, keys, vantages []string, now time.Time) []Change {
	e.judging.Lock()
	defer e.judging.Unlock()
	switch {
	case e.pos == nil:
		e.judged = 0
		return nil // no Judge yet: no targets
	case e.restored:
		return e.judge(reports, e.targets, now)
	}
	prev := e.verdicts // only Judge and Rejudge change it, with e.judging held

	dirty := map[int]bool{}
	for _, k := range keys {
		if i, ok := e.pos[k]; ok {
			dirty[i] = true
		}
	}
	for _, v := range vantages {
		for _, i := range e.byVantage[v] {
			dirty[i] = true
		}
	}
	for k := range e.flapping {
		dirty[e.pos[k]] = true
	}
	for k := range e.quiet {
		if i, ok := e.pos[k]; ok {
			dirty[i] = true
		}
	}
	e.expireBack(reports, now)
	// The beacons' ignored probers, as Judge finds them.
	down := maps.Clone(e.beaconDown)
	for n := range e.back {
		down[n] = true
	}
	next := map[string]Judgement{}
	beaconDown := maps.Clone(e.beaconDown)
	var ignored [2]map[string]bool
	for phase, beacons := range []bool{true, false} {
		ignored[phase] = down
		for n := range symmetricDifference(down, e.ignored[phase]) {
			for _, i := range e.byVantage[n] {
				if e.targets[i].Beacon == beacons {
					dirty[i] = true
				}
			}
		}
		for i := range dirty {
			t := e.targets[i]
			if t.Beacon != beacons {
				continue
			}
			t.Ignore = down
			was := prev[t.Key].Verdict
			j := e.damper.Apply(t.Key, was, Judge(reports, t, was), now)
			next[t.Key] = j
			if !beacons {
				continue
			}
			switch {
			case j.Verdict == VerdictDown:
				beaconDown[t.Node] = true
			case was == VerdictDown:
				delete(beaconDown, t.Node)
				e.back[t.Node] = now
			}
		}
		if beacons {
			down = maps.Clone(beaconDown)
			for n := range e.back {
				down[n] = true
			}
		}
	}
	e.beaconDown, e.ignored, e.judged = beaconDown, ignored, len(next)
	if len(next) == 0 {
		return nil
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	// In place: every reader of verdicts and downSince holds e.mu, and
	// prev, the same map, is read no more.
	before := make(map[string]Judgement, len(next))
	for k, j := range next {
		was := prev[k]
		before[k] = was
		e.verdicts[k] = j
		delete(e.flapping, k)
		switch {
		case j.Reason == ReasonFlapping:
			e.flapping[k] = true
			delete(e.downSince, k)
		case j.Verdict != VerdictDown:
			delete(e.downSince, k)
		case was.Verdict != VerdictDown:
			e.downSince[k] = now
		default:
			if _, ok := e.downSince[k]; !ok {
				e.downSince[k] = now
			}
		}
	}
	e.held = len(e.flapping)

	order := make([]int, 0, len(next))
	for i := range dirty {
		order = append(order, i)
	}
	slices.Sort(order)
	var changes []Change
	for _, i := range order {
		t := e.targets[i]
		changes = e.appendChange(changes, t, before[t.Key], next[t.Key])
	}
	return changes
}

// symmetricDifference returns the keys in exactly one of a and b.
func symmetricDifference(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		if !b[k] {
			out[k] = true
		}
	}
	for k := range b {
		if !a[k] {
			out[k] = true
		}
	}
	return out
}

// DownKeys returns the keys of the targets whose verdict is Down, held
// Down by flap damping included.
func (e *Engine) DownKeys() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]string, 0, len(e.downSince)+len(e.flapping))
	for k := range e.downSince {
		out = append(out, k)
	}
	for k := range e.flapping {
		out = append(out, k)
	}
	return out
}

// Judged returns how many targets the last Judge or Rejudge judged.
func (e *Engine) Judged() int {
	e.judging.Lock()
	defer e.judging.Unlock()
	return e.judged
}
