package status

import (
	"fmt"
	"time"
)

// Flap damping. Rise and fall counts at each prober and the quorum over
// probers absorb a single bad probe, but a target that fails and recovers
// every second or so still passes both, and every verdict change rewrites
// the Service's status and the DNS answer. A target that goes Down again
// soon after it came back is flapping: its next Up must then hold for a
// while before it is believed, longer each time.
const (
	// FlapUp is how long an Up that followed a Down must last for the
	// next Down not to count as a flap.
	FlapUp = 10 * time.Second
	// FlapHold is how long a majority must say Up, without a break, before
	// a target with one flap is Up again; it doubles with each further
	// flap, up to FlapHoldMax.
	FlapHold    = 2 * time.Second
	FlapHoldMax = 30 * time.Second
)

// ReasonFlapping marks a Down verdict held by flap damping while a
// majority says Up.
const ReasonFlapping = "flapping"

// Damper holds flap state per target. It is not safe for concurrent use;
// the zero value is ready.
type Damper struct {
	m map[string]*flapState
}

type flapState struct {
	// recoveredAt is when the verdict last went from Down to Up; zero
	// while Down, and for an Up that did not follow a Down.
	recoveredAt time.Time
	// flaps counts Downs that came less than FlapUp after a recovery, since
	// the last Up that lasted longer.
	flaps int
	// upFrom is when the majority began saying Up while the verdict is
	// held Down.
	upFrom time.Time
}

// Hold returns how long a target with flaps flaps must be Up, without a
// break, before its verdict is Up again.
func Hold(flaps int) time.Duration {
	if flaps <= 0 {
		return 0
	}
	h := FlapHold
	for i := 1; i < flaps && h < FlapHoldMax; i++ {
		h *= 2
	}
	return min(h, FlapHoldMax)
}

// Apply returns j, the quorum's judgement of key at now given its previous
// verdict prev, with flap damping: an Up after a Down of a flapping target
// stays Down (ReasonFlapping) until a majority has said Up for Hold(flaps).
// A Down is never delayed.
func (d *Damper) Apply(key string, prev Verdict, j Judgement, now time.Time) Judgement {
	if d.m == nil {
		d.m = map[string]*flapState{}
	}
	st := d.m[key]
	if st == nil {
		st = &flapState{}
		d.m[key] = st
	}
	switch {
	case prev == VerdictUp && j.Verdict == VerdictDown:
		if !st.recoveredAt.IsZero() && now.Sub(st.recoveredAt) < FlapUp {
			st.flaps++
		} else {
			st.flaps = 0
		}
		st.recoveredAt, st.upFrom = time.Time{}, time.Time{}
	case prev == VerdictDown && j.Verdict == VerdictUp:
		hold := Hold(st.flaps)
		if hold > 0 {
			if st.upFrom.IsZero() {
				st.upFrom = now
			}
			if up := now.Sub(st.upFrom); up < hold {
				j.Verdict, j.Reason = VerdictDown, ReasonFlapping
				j.Flaps, j.UpFor, j.Hold = st.flaps, up, hold
				return j
			}
		}
		st.recoveredAt, st.upFrom = now, time.Time{}
	case prev == VerdictDown:
		// Still Down, or no majority: an interrupted Up starts over.
		st.upFrom = time.Time{}
	}
	return j
}

// Retain forgets the targets for which keep is false.
func (d *Damper) Retain(keep func(key string) bool) {
	for k := range d.m {
		if !keep(k) {
			delete(d.m, k)
		}
	}
}

// flappingSummary does not change while the target stays held, so a
// published ports[].error carrying it causes no status writes of its own.
func flappingSummary(j Judgement) string {
	return fmt.Sprintf("flapping: down again within %s of recovering, %d times; held down until up by a majority for %s",
		FlapUp, j.Flaps, j.Hold)
}
