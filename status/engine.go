package status

import (
	"maps"
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
	// ReturnGrace. Only Judge uses it.
	back map[string]time.Time
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

// Judge judges targets over reports at now and returns those whose verdict
// changed, in the order of targets. Beacons are judged first, ignoring the
// probers on nodes whose beacon was Down before this round; then the
// other targets, ignoring the probers on nodes whose beacon is Down now.
// Both ignore, too, the probers on nodes whose beacon came back Up less
// than ReturnGrace ago.
// It sets each target's Ignore itself. Targets not in targets are
// forgotten.
func (e *Engine) Judge(reports Reports, targets []Target, now time.Time) []Change {
	e.judging.Lock()
	defer e.judging.Unlock()
	e.mu.RLock()
	// Only Judge replaces the map, and never changes it in place.
	prev := e.verdicts
	e.mu.RUnlock()

	next := make(map[string]Judgement, len(targets))
	if e.back == nil {
		e.back = map[string]time.Time{}
	}
	for n, t := range e.back {
		if now.Sub(t) >= ReturnGrace {
			delete(e.back, n)
		}
	}
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
	for _, beacons := range []bool{true, false} {
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

	var changes []Change
	for _, t := range targets {
		was, is := prev[t.Key], next[t.Key]
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
