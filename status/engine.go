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
}

// Change is a target whose verdict changed in a round.
type Change struct {
	Target   Target
	From, To Judgement
}

// Judge judges targets over reports at now and returns those whose verdict
// changed, in the order of targets. Beacons are judged first, ignoring the
// probers on nodes whose beacon was Down before this round; then the
// other targets, ignoring the probers on nodes whose beacon is Down now.
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
	down := map[string]bool{}
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
				if t.Beacon && next[t.Key].Verdict == VerdictDown {
					down[t.Node] = true
				}
			}
		}
	}
	e.damper.Retain(func(k string) bool { _, ok := next[k]; return ok })

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
		if was, is := prev[t.Key], next[t.Key]; was.Verdict != is.Verdict {
			changes = append(changes, Change{Target: t, From: was, To: is})
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
