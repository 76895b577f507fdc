package dashboard

import (
	"context"
	"sync"
	"time"
)

// pacer spaces the dashboard's large responses (the page, its fragment,
// the state and history JSON) to at most rate a second over all clients,
// with bursts of burst, so that clients fetching in a loop cannot take the
// process's CPU from the DNS server and the probes: a request beyond the
// rate waits its turn, and one whose turn is further off than maxWait is
// refused at once. A client that waits for its answer (a browser, a
// script in a loop) is slowed down to the rate rather than refused.
type pacer struct {
	interval time.Duration
	burst    int
	maxWait  time.Duration

	mu sync.Mutex
	// next is when the next response may start, counting the burst: it
	// never lags now by more than burst intervals.
	next time.Time
}

func newPacer(rate float64, burst int, maxWait time.Duration) *pacer {
	return &pacer{interval: time.Duration(float64(time.Second) / rate), burst: burst, maxWait: maxWait}
}

// wait returns after the caller's turn has come, how long it waited, and
// false when the turn is further off than maxWait (nothing is reserved
// then) or ctx ended first.
func (p *pacer) wait(ctx context.Context) (time.Duration, bool) {
	now := time.Now()
	p.mu.Lock()
	if earliest := now.Add(-time.Duration(p.burst) * p.interval); p.next.Before(earliest) {
		p.next = earliest
	}
	at := p.next.Add(p.interval)
	delay := at.Sub(now)
	if delay > p.maxWait {
		p.mu.Unlock()
		return 0, false
	}
	p.next = at
	p.mu.Unlock()
	if delay <= 0 {
		return 0, true
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return delay, true
	case <-ctx.Done():
		return delay, false
	}
}
