package contract

import "time"

// A prober's heartbeat: how often it renews its Lease (or, without one,
// rewrites its report), and how many it may miss before its verdicts stop
// counting. The prober agent writes by these, standalone mode's peers
// state them, and status.Fresh judges by them.
const (
	// DefaultHeartbeat is the heartbeat of a prober that sets none
	// (--heartbeat), and of a report that does not state its own.
	DefaultHeartbeat = 10 * time.Second
	// StaleHeartbeats is how many heartbeats (Lease renewals, or report
	// writes of a prober without a Lease) a vantage may miss before it
	// stops counting.
	StaleHeartbeats = 3
)

// HeartbeatSeconds is a heartbeat of d in a report's whole seconds, rounded
// up and at least 1: rounded down, a heartbeat of 1.9 s would make the
// report count as stale after fewer missed writes than it should.
func HeartbeatSeconds(d time.Duration) int32 {
	return int32(max(1, (d+time.Second-1)/time.Second))
}

// ProberLeaseSeconds is the duration of the Lease of a prober whose
// heartbeat is d: StaleHeartbeats heartbeats, so that it goes stale after
// as many missed renewals as a report does after missed heartbeats.
func ProberLeaseSeconds(d time.Duration) int32 {
	return StaleHeartbeats * HeartbeatSeconds(d)
}
