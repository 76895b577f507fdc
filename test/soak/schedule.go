package soak

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the soak injects.
const (
	// Blackhole drops every packet of a proxy node (heartbeats go on) for
	// the fault's hold, then heals it.
	Blackhole Kind = "blackhole"
	// NodeDown takes a proxy node's link down and stops its heartbeats for
	// the hold, then brings it up.
	NodeDown Kind = "node-down"
	// Partition cuts two proxy nodes off from each other (each still
	// reaches every other node and the clients) for the hold, then heals.
	Partition Kind = "partition"
	// KillProxy kills (SIGKILL) the proxy container of one proxy pod.
	KillProxy Kind = "kill-proxy"
	// KillProber kills the prober container on one node.
	KillProber Kind = "kill-prober"
	// KillLeader kills the leading controller's container.
	KillLeader Kind = "kill-leader"
	// KillStandby kills the controller container that does not lead.
	KillStandby Kind = "kill-standby"
	// RestartAPIServer stops the API server and starts it again.
	RestartAPIServer Kind = "apiserver-restart"
	// PauseEtcd freezes etcd (SIGSTOP) for the hold, 2–5 s, and continues it.
	PauseEtcd Kind = "etcd-pause"
	// Maintenance labels a proxy node pulselb.io/maintenance, waits until
	// pulselb has moved its proxies, drains it as kubectl drain does, and
	// after the hold removes the label and uncordons it: a planned change.
	Maintenance Kind = "maintenance"
	// Upgrade applies deploy/base again with the other image tag, so that
	// every controller, prober and proxy pod is replaced: a planned change.
	Upgrade Kind = "upgrade"
	// EditService changes the churn Service's port and replica count.
	EditService Kind = "edit-service"
	// RecreateService deletes the churn Service and creates it again.
	RecreateService Kind = "recreate-service"
)

// nodeFault reports whether k cuts a node off for its hold.
func (k Kind) nodeFault() bool { return k == Blackhole || k == NodeDown }

// exclusive reports whether k takes the node slot: at most one node is
// cut off, partitioned or in maintenance at a time.
func (k Kind) exclusive() bool { return k.nodeFault() || k == Partition || k == Maintenance }

// Planned reports whether k is a planned change, during which clients
// must lose nothing.
func (k Kind) Planned() bool { return k == Maintenance || k == Upgrade }

// weights are how often each kind is drawn, out of their sum.
var weights = []struct {
	kind   Kind
	weight int
}{
	{Blackhole, 5}, {NodeDown, 2}, {Partition, 2}, {KillProxy, 3}, {KillProber, 2}, {KillLeader, 2},
	{KillStandby, 1}, {RestartAPIServer, 1}, {PauseEtcd, 1}, {Maintenance, 1}, {Upgrade, 1},
	{EditService, 2}, {RecreateService, 1},
}

// Kinds are the fault kinds, in the order of their weights.
func Kinds() []Kind {
	out := make([]Kind, len(weights))
	for i, w := range weights {
		out[i] = w.kind
	}
	return out
}

// Fault is one fault of a schedule.
type Fault struct {
	// At is when it starts, from the start of the run.
	At time.Duration
	Kind
	// Node is the proxy node of a node fault, Partition, Maintenance or
	// KillProber; Peer the other node of a Partition.
	Node, Peer string
	// Pick chooses among the candidates found when the fault runs (which
	// proxy pod): the Pick-th of them, modulo their number, in name order.
	Pick int
	// Hold is how long a node fault or Partition lasts before its heal, a
	// node stays in Maintenance once drained, or etcd stays paused.
	Hold time.Duration
}

func (f Fault) String() string {
	switch {
	case f.Kind.nodeFault():
		return fmt.Sprintf("%s %s for %s", f.Kind, f.Node, f.Hold)
	case f.Kind == Partition:
		return fmt.Sprintf("%s %s / %s for %s", f.Kind, f.Node, f.Peer, f.Hold)
	case f.Kind == Maintenance:
		return fmt.Sprintf("%s of %s, held %s", f.Kind, f.Node, f.Hold)
	case f.Kind == PauseEtcd:
		return fmt.Sprintf("%s for %s", f.Kind, f.Hold)
	case f.Kind == KillProber:
		return fmt.Sprintf("%s on %s", f.Kind, f.Node)
	case f.Kind == KillProxy:
		return fmt.Sprintf("%s #%d", f.Kind, f.Pick)
	}
	return string(f.Kind)
}

// ScheduleConfig shapes a schedule.
type ScheduleConfig struct {
	Seed     uint64
	Duration time.Duration
	// Nodes are the proxy nodes faults may hit.
	Nodes []string
	// MinGap and MaxGap bound the time between two faults' starts;
	// MinHold and MaxHold a node fault's hold.
	MinGap, MaxGap   time.Duration
	MinHold, MaxHold time.Duration
}

// leaderKillSpacing is the least time between two KillLeader faults:
// deploy/base's 15 s Lease, the standby's take-over and as long again with
// a leader, so that killed leaders do not leave the run leaderless.
const leaderKillSpacing = 45 * time.Second

// maintenanceReserve is what a Maintenance takes besides its hold:
// pulselb moving the node's proxies (deploy/base's drain delay, the DNS
// TTL plus 10 s, and the replacements' start) and the drain. The node
// slot stays taken that long; at run time the next node fault waits for
// a maintenance that takes longer.
const maintenanceReserve = 30 * time.Second

// upgradeReserve is what an Upgrade takes: the controllers, the probers
// and then every proxy rolled, each old proxy forwarding for its drain
// delay. One upgrade runs at a time, and none starts later than this
// before the end of the run.
const upgradeReserve = 75 * time.Second

// The hold of a PauseEtcd: a few seconds, below the leader Lease's renew
// deadline.
const (
	minEtcdPause = 2 * time.Second
	maxEtcdPause = 5 * time.Second
)

// Schedule draws the faults of a run from cfg.Seed: the same
// configuration gives the same schedule. Faults overlap (a fault may start
// while a node is cut off), but at most one node is cut off, partitioned
// or in maintenance at a time, so a quorum of probers always sees every
// other node; none starts later than cfg.Duration minus the longest hold,
// so every node is healed before the run ends. Two leader kills are
// leaderKillSpacing apart at least, two upgrades upgradeReserve. A fault
// that breaks one of these rules is drawn as a KillProxy instead.
func Schedule(cfg ScheduleConfig) []Fault {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	var out []Fault
	var nodeFreeAt time.Duration
	lastLeaderKill, lastUpgrade := time.Duration(-1<<62), time.Duration(-1<<62)
	for at := between(cfg.MinGap, cfg.MaxGap); at+cfg.MaxHold <= cfg.Duration; at += between(cfg.MinGap, cfg.MaxGap) {
		n := rng.IntN(total)
		var k Kind
		for _, w := range weights {
			if n < w.weight {
				k = w.kind
				break
			}
			n -= w.weight
		}
		node := rng.IntN(len(cfg.Nodes))
		f := Fault{At: at, Kind: k, Node: cfg.Nodes[node], Pick: rng.IntN(1000)}
		switch {
		case k.exclusive() && at < nodeFreeAt:
			// A node is cut off or in maintenance already: kill a proxy instead.
			f.Kind = KillProxy
		case k == Partition && len(cfg.Nodes) < 2:
			f.Kind = KillProxy
		case k == Maintenance && at+maintenanceReserve+cfg.MaxHold > cfg.Duration:
			f.Kind = KillProxy
		case k.exclusive():
			f.Hold = between(cfg.MinHold, cfg.MaxHold)
			nodeFreeAt = at + f.Hold
			if k == Partition {
				f.Peer = cfg.Nodes[(node+1+rng.IntN(len(cfg.Nodes)-1))%len(cfg.Nodes)]
			}
			if k == Maintenance {
				nodeFreeAt += maintenanceReserve
			}
		case k == PauseEtcd:
			f.Hold = between(minEtcdPause, maxEtcdPause)
		case k == Upgrade:
			if at-lastUpgrade < upgradeReserve || at+upgradeReserve > cfg.Duration {
				f.Kind = KillProxy
			} else {
				lastUpgrade = at
			}
		}
		if k == KillLeader {
			if at-lastLeaderKill < leaderKillSpacing {
				// The standby has not taken over yet: kill a proxy.
				f.Kind = KillProxy
			} else {
				lastLeaderKill = at
			}
		}
		out = append(out, f)
	}
	return out
}
