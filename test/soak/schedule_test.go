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
	lastLeaderKill, lastUpgrade := -time.Hour, -time.Hour
	for _, f := range s {
		kinds[f.Kind]++
		if f.At < cutUntil {
			overlapped++
			if f.Kind.exclusive() {
				t.Fatalf("%s at %s starts while a node is cut off or in maintenance until %s", f, f.At, cutUntil)
			}
		}
		switch f.Kind {
		case KillLeader:
			if f.At-lastLeaderKill < leaderKillSpacing {
				t.Errorf("leader killed at %s and %s", lastLeaderKill, f.At)
			}
			lastLeaderKill = f.At
		case Upgrade:
			if f.At-lastUpgrade < upgradeReserve || f.At+upgradeReserve > time.Hour {
				t.Errorf("upgrades at %s and %s in an hour", lastUpgrade, f.At)
			}
			lastUpgrade = f.At
		case Partition:
			if f.Peer == "" || f.Peer == f.Node {
				t.Errorf("%s: a partition needs two nodes", f)
			}
		case PauseEtcd:
			if f.Hold < minEtcdPause || f.Hold >= maxEtcdPause {
				t.Errorf("%s: pause outside [%s, %s)", f, minEtcdPause, maxEtcdPause)
			}
		}
		if f.Kind.exclusive() {
			if f.Hold < 5*time.Second || f.Hold >= 20*time.Second {
				t.Errorf("%s: hold outside [5s, 20s)", f)
			}
			cutUntil = f.At + f.Hold
			if f.Kind == Maintenance {
				cutUntil += maintenanceReserve
				if f.At+maintenanceReserve+20*time.Second > time.Hour {
					t.Errorf("%s at %s may outlast the run", f, f.At)
				}
			}
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

// TestShortFormDrawsThePlannedChanges checks what TestSoak's seed draws
// in its two minutes on 3 proxy nodes: every kind of fault but node-down
// (no seed up to 3 million draws all 13 kinds in two minutes: the node
// faults and the maintenance take turns on the node slot), which the
// blackhole stands in for.
func TestShortFormDrawsThePlannedChanges(t *testing.T) {
	s := Config{Seed: ShortSeed, Duration: ShortDuration}.schedule([]string{"node-1", "node-2", "node-3"})
	kinds := map[Kind]int{}
	for _, f := range s {
		kinds[f.Kind]++
	}
	for _, k := range Kinds() {
		if kinds[k] == 0 && k != NodeDown {
			t.Errorf("seed %d draws no %s in %s: %v", ShortSeed, k, ShortDuration, kinds)
		}
	}
}
