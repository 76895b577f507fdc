package controller

import (
	"sync"
	"time"

	"github.com/pulselb/pulselb/placement"
)

// DefaultMaxRollouts is how many proxy workloads roll out a new pod
// template at once (Config.MaxRollouts).
const DefaultMaxRollouts = 4

const (
	// rolloutRetry is how soon a Service whose rollout waits for others is
	// synced again.
	rolloutRetry = 5 * time.Second
	// rolloutSeen is how long a rollout this controller began counts
	// whatever the cache says, which lags behind the write that began it.
	rolloutSeen = 10 * time.Second
)

// rollouts limits how many proxy workloads roll out at once, so that a new
// pulselb version (a new proxy image) replaces proxies a few Services at a
// time rather than all at once. It is safe for concurrent use by the sync
// workers.
type rollouts struct {
	mu      sync.Mutex
	max     int
	started map[string]time.Time
}

// begin reports whether the workload name may start a rollout at now, given
// the workloads rolling by the cache; if so it counts as rolling from now.
// A workload already rolling may always change again.
func (r *rollouts) begin(name string, rolling map[string]bool, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.max <= 0 {
		return true
	}
	if r.started == nil {
		r.started = map[string]time.Time{}
	}
	busy := len(rolling)
	for n, t := range r.started {
		switch {
		case rolling[n]:
		case now.Sub(t) > rolloutSeen:
			delete(r.started, n) // done, and the cache has caught up
		default:
			busy++
		}
	}
	if rolling[name] || r.started[name] != (time.Time{}) {
		r.started[name] = now
		return true
	}
	if busy >= r.max {
		return false
	}
	r.started[name] = now
	return true
}

// rollingWorkloads returns the names of the proxy workloads whose rollout
// the cache shows under way.
func (c *Controller) rollingWorkloads() (map[string]bool, error) {
	all, err := c.listWorkloads(everything)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, w := range all {
		if placement.Rolling(w) {
			out[w.GetName()] = true
		}
	}
	return out, nil
}
