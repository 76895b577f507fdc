package soak

import (
	"slices"
	"testing"
	"time"
)

func testSchedule(seed uint64) []Fault {
	return Schedule(ScheduleConfig{Seed: seed, Duration: time.Hour, Nodes: []string{"node-1", "node-2", "node-3"},
		MinGap: 2 * time.Second, MaxGap: 10 * time.Second, MinHold: 5 * time.Second, MaxHold: 20 * time.Second})
}

func TestScheduleReplaysItsSeed(t *testing.T) {
	a, b := testSchedule(42), testSchedule(42)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	if slices.Equal(a, testSchedule(43)) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
}

func TestScheduleOverlapsButCutsOneNodeAtATime(t *testing.T) {
	s := testSchedule(7)
	kinds := map[Kind]int{}
	overlapped := 0
	var cutUntil time.Duration
	lastLeaderKill := -time.Hour
	for _, f := range s {
		kinds[f.Kind]++
		if f.At < cutUntil {
			overlapped++
			if f.Kind.nodeFault() {
				t.Fatalf("%s at %s starts while a node is cut off until %s", f, f.At, cutUntil)
			}
		}
		if f.Kind == KillLeader {
			if f.At-lastLeaderKill < leaderKillSpacing {
				t.Errorf("leader killed at %s and %s", lastLeaderKill, f.At)
			}
			lastLeaderKill = f.At
		}
		if f.Kind.nodeFault() {
			if f.Hold < 5*time.Second || f.Hold >= 20*time.Second {
				t.Errorf("%s: hold outside [5s, 20s)", f)
			}
			cutUntil = f.At + f.Hold
		}
		if f.At+20*time.Second > time.Hour {
			t.Errorf("%s at %s may outlast the run", f, f.At)
		}
	}
	for _, w := range weights {
		if kinds[w.kind] == 0 {
			t.Errorf("an hour drew no %s: %v", w.kind, kinds)
		}
	}
	if overlapped == 0 {
		t.Error("no fault overlapped a cut-off node")
	}
}
