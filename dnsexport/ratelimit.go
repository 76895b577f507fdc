package dnsexport

import (
	"net/netip"
	"sync"
	"time"
)

// RateLimit limits the UDP responses sent to each source network, so the
// server cannot be used to flood a spoofed victim. Sources are grouped by
// /24 (IPv4) and /56 (IPv6), the networks one site or one customer
// usually holds. TCP is never limited: its source cannot be spoofed.
type RateLimit struct {
	// ResponsesPerSecond per source network; 0 disables rate limiting.
	ResponsesPerSecond float64
	// Burst is how many responses a quiet source may get at once;
	// default twice ResponsesPerSecond.
	Burst int
	// Slip: every Slip-th limited response is sent as an empty truncated
	// answer, so a real client behind a spoofed flood retries over TCP;
	// the others are dropped. 0 drops them all; 1 truncates them all.
	Slip int
	// Sources bounds the table of tracked source networks; default
	// 65536. When it is full of active sources, new ones share one bucket.
	Sources int
}

// DefaultRateLimit is the rate limit of the controller's flags and of
// standalone mode when the configuration sets none: 100 responses a
// second per source network, bursts of 200, every 2nd limited response
// truncated.
var DefaultRateLimit = RateLimit{ResponsesPerSecond: 100, Burst: 200, Slip: 2}

type rateAction uint8

const (
	rateAllow rateAction = iota
	rateDrop
	rateSlip
)

type bucket struct {
	tokens  float64
	last    time.Time
	limited uint32
}

// limiter is a token bucket per source network with a bounded table.
type limiter struct {
	mu       sync.Mutex
	rate     float64
	burst    float64
	slip     uint32
	max      int
	table    map[netip.Prefix]*bucket
	overflow bucket
}

func newLimiter(rl RateLimit) *limiter {
	if rl.ResponsesPerSecond <= 0 {
		return nil
	}
	l := &limiter{
		rate:  rl.ResponsesPerSecond,
		burst: float64(rl.Burst),
		slip:  uint32(max(rl.Slip, 0)),
		max:   rl.Sources,
	}
	if l.burst <= 0 {
		l.burst = 2 * l.rate
	}
	if l.max <= 0 {
		l.max = 65536
	}
	l.table = make(map[netip.Prefix]*bucket)
	l.overflow.tokens = l.burst
	return l
}

// sourceNetwork is the network a source address is limited as.
func sourceNetwork(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 56
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

// allow takes a token for one response to src.
func (l *limiter) allow(src netip.Addr, now time.Time) rateAction {
	if l == nil {
		return rateAllow
	}
	key := sourceNetwork(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.table[key]
	if b == nil {
		if len(l.table) >= l.max {
			l.sweep(now)
		}
		if len(l.table) >= l.max {
			b = &l.overflow
		} else {
			b = &bucket{tokens: l.burst, last: now}
			l.table[key] = b
		}
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		b.limited = 0
		return rateAllow
	}
	b.limited++
	if l.slip > 0 && b.limited%l.slip == 0 {
		return rateSlip
	}
	return rateDrop
}

// sweep forgets sources whose bucket has refilled: they are idle, and a
// fresh bucket is the same as theirs.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.table {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.table, k)
		}
	}
}

// size is the number of tracked source networks.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.table)
}
