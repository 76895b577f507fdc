package status

import (
	"strings"
	"testing"
	"time"
)

func TestHold(t *testing.T) {
	for flaps, want := range map[int]time.Duration{0: 0, 1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second,
		4: 16 * time.Second, 5: 30 * time.Second, 50: 30 * time.Second} {
		if got := Hold(flaps); got != want {
			t.Errorf("Hold(%d) = %s, want %s", flaps, got, want)
		}
	}
}

// TestDamper feeds the damper a sequence of quorum judgements, one per
// step, and checks the verdict it lets through.
func TestDamper(t *testing.T) {
	type step struct {
		at   time.Duration // since the start
		raw  Verdict       // the quorum's judgement
		want Verdict
	}
	u, d := VerdictUp, VerdictDown
	tests := []struct {
		name  string
		steps []step
	}{
		{"first failure and recovery are not delayed", []step{
			{0, u, u}, {time.Minute, d, d}, {time.Minute + time.Second, u, u}}},
		{"a new target that fails soon after its first Up is not flapping", []step{
			{0, u, u}, {2 * time.Second, d, d}, {3 * time.Second, u, u}}},
		{"down again soon after recovering: the next Up holds 2 s", []step{
			{0, u, u}, {time.Minute, d, d}, {61 * time.Second, u, u}, {63 * time.Second, d, d},
			{64 * time.Second, u, d}, {65 * time.Second, u, d}, {66 * time.Second, u, u}}},
		{"an interrupted Up starts the hold over", []step{
			{0, u, u}, {time.Minute, d, d}, {61 * time.Second, u, u}, {62 * time.Second, d, d},
			{63 * time.Second, u, d}, {64 * time.Second, d, d}, {65 * time.Second, u, d}, {66 * time.Second, u, d},
			{67 * time.Second, u, u}}},
		{"each further flap doubles the hold", []step{
			{0, u, u}, {time.Minute, d, d}, {61 * time.Second, u, u}, {62 * time.Second, d, d}, // flap 1
			{63 * time.Second, u, d}, {65 * time.Second, u, u}, {66 * time.Second, d, d}, // flap 2: 4 s
			{67 * time.Second, u, d}, {70 * time.Second, u, d}, {71 * time.Second, u, u}}},
		{"a long Up forgets the flaps", []step{
			{0, u, u}, {time.Minute, d, d}, {61 * time.Second, u, u}, {62 * time.Second, d, d},
			{63 * time.Second, u, d}, {65 * time.Second, u, u}, {2 * time.Minute, d, d}, {2*time.Minute + time.Second, u, u}}},
		{"a Down is never delayed", []step{
			{0, u, u}, {time.Minute, d, d}, {61 * time.Second, u, u}, {62 * time.Second, d, d},
			{62500 * time.Millisecond, u, d}, {63 * time.Second, d, d}}},
	}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dm Damper
			prev := VerdictUnknown
			for i, s := range tt.steps {
				j := dm.Apply("k", prev, Judgement{Verdict: s.raw, Reason: ReasonMajorityUp, Up: 2, Assigned: 3}, start.Add(s.at))
				if j.Verdict != s.want {
					t.Fatalf("step %d at %s: quorum %s, verdict %s, want %s", i, s.at, s.raw, j.Verdict, s.want)
				}
				if s.raw == u && s.want == d {
					if j.Reason != ReasonFlapping || !strings.Contains(j.Summary(), "flapping") {
						t.Errorf("step %d: held Down with reason %q, summary %q", i, j.Reason, j.Summary())
					}
				}
				prev = j.Verdict
			}
		})
	}
}

func TestDamperRetain(t *testing.T) {
	var dm Damper
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// Flap "a" once, then forget it: it starts clean.
	for _, s := range []struct {
		prev, raw Verdict
		at        time.Duration
	}{{VerdictUnknown, VerdictUp, 0}, {VerdictUp, VerdictDown, time.Minute}, {VerdictDown, VerdictUp, 61 * time.Second}, {VerdictUp, VerdictDown, 62 * time.Second}} {
		dm.Apply("a", s.prev, Judgement{Verdict: s.raw}, now.Add(s.at))
	}
	if j := dm.Apply("a", VerdictDown, Judgement{Verdict: VerdictUp}, now.Add(63*time.Second)); j.Verdict != VerdictDown {
		t.Fatalf("flapping target not held: %v", j.Verdict)
	}
	dm.Retain(func(k string) bool { return k != "a" })
	if j := dm.Apply("a", VerdictDown, Judgement{Verdict: VerdictUp}, now.Add(63*time.Second)); j.Verdict != VerdictUp {
		t.Fatalf("forgotten target still held: %v", j.Verdict)
	}
}
