package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
)

// Blackhole is a node a scenario has cut off from every other
// (cluster.Cluster.NodeBlackhole) until Heal: the API server still sees
// it healthy, but nobody reaches it.
type Blackhole struct {
	c *cluster.Cluster
	// Node is the node cut off.
	Node string
	// Start is when the fault began, just before the node was cut off.
	Start  time.Time
	healed bool
}

// BlackholeNode cuts node off from every other.
func BlackholeNode(ctx context.Context, c *cluster.Cluster, node string) (*Blackhole, error) {
	b := &Blackhole{c: c, Node: node, Start: time.Now()}
	if err := c.NodeBlackhole(ctx, node); err != nil {
		return nil, err
	}
	return b, nil
}

// Heal brings the node back; after the first call it does nothing.
func (b *Blackhole) Heal(ctx context.Context) error {
	if b.healed {
		return nil
	}
	b.healed = true
	return b.c.NodeHeal(ctx, b.Node)
}

// WaitGone waits up to timeout until the last status rec recorded holds
// none of ips (the node's addresses), and returns how long after Start
// each left it: when the first status without it was written. alive,
// when not nil, is checked at each poll and ends the wait with its
// error (the controller has exited, say).
func (b *Blackhole) WaitGone(ctx context.Context, rec *StatusRecorder, timeout time.Duration, alive func() error, ips ...string) ([]time.Duration, error) {
	var dead error
	what := fmt.Sprintf("%s (%s) gone from the status", strings.Join(ips, " and "), b.Node)
	err := Poll(ctx, timeout, what, func() bool {
		if alive != nil {
			if dead = alive(); dead != nil {
				return true
			}
		}
		last := rec.Last()
		return !slices.ContainsFunc(ips, func(ip string) bool { return slices.Contains(last, ip) })
	})
	if dead != nil {
		return nil, dead
	}
	if err != nil {
		return nil, err
	}
	dropped := make([]time.Duration, len(ips))
	for i, ip := range ips {
		dropped[i] = rec.FirstWithout(ip, b.Start).Sub(b.Start)
	}
	return dropped, nil
}
