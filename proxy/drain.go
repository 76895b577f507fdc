package proxy

import (
	"context"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// Phase is where a proxy is in its life: serving until the shutdown starts,
// then through the drain delay and the drain.
type Phase string

// The phases, in order. A planned change (upgrade, drain, scale-down) takes
// the node out of the Service's status when the shutdown starts, but clients
// go on resolving the old address for the DNS record's TTL and external-dns'
// delay; PhaseDelay keeps forwarding them, PhaseDrain lets what is open end.
const (
	// PhaseServing forwards new and open connections.
	PhaseServing Phase = "serving"
	// PhaseDelay has begun the shutdown (Run's ctx is done) and still
	// forwards new connections exactly as PhaseServing does, for
	// Config.DrainDelay.
	PhaseDelay Phase = "delay"
	// PhaseDrain refuses new connections and lets open ones finish, for up
	// to Config.DrainTimeout.
	PhaseDrain Phase = "drain"
)

var phases = []Phase{PhaseServing, PhaseDelay, PhaseDrain}

// Phase returns the phase the proxy is in.
func (p *Proxy) Phase() Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.phase
}

func (p *Proxy) setPhase(ph Phase) {
	p.mu.Lock()
	p.phase = ph
	p.mu.Unlock()
	p.metrics.setPhase(ph)
}

// shutdown takes the data plane down once Run's ctx is done: it keeps
// forwarding for DrainDelay, then refuses new connections and lets open ones
// finish for up to DrainTimeout, then removes the rules or closes the
// connections left. ctx only carries the logger.
//
// With no drain delay, iptables mode removes its rules at once and has no
// drain phase, exactly as before drain delays existed.
func (p *Proxy) shutdown(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	mode := p.Mode()
	if d := p.cfg.DrainDelay; d > 0 {
		p.setPhase(PhaseDelay)
		logger.Info("Shutting down proxy after the drain delay; new connections are still forwarded",
			"drainDelay", d, "drainTimeout", p.cfg.DrainTimeout)
		p.keepUpFor(ctx, d)
	} else if mode == ModeIPTables {
		err := p.removeIPTables(ctx)
		// The relays of PROXY protocol ports, if any, still drain.
		p.stopUserspace(p.cfg.DrainTimeout)
		return err
	}
	p.setPhase(PhaseDrain)
	logger.Info("Refusing new proxy connections; open ones may finish", "drainTimeout", p.cfg.DrainTimeout)
	switch mode {
	case ModeIPTables:
		// The relays of PROXY protocol ports, if any, close their
		// listeners and drain while the rules drain.
		relays := make(chan struct{})
		go func() {
			defer close(relays)
			p.stopUserspace(p.cfg.DrainTimeout)
		}()
		p.stopNewIPTables(ctx)
		p.keepUpFor(ctx, p.cfg.DrainTimeout)
		<-relays
		return p.removeIPTables(ctx)
	default:
		p.stopUserspace(p.cfg.DrainTimeout)
		return nil
	}
}

// keepUp keeps the data plane as it is until ctx is done: in iptables mode
// it checks and repairs the rules every ResyncInterval; a userspace relay
// serves on its own.
func (p *Proxy) keepUp(ctx context.Context) {
	if p.Mode() != ModeIPTables {
		<-ctx.Done()
		return
	}
	ticker := time.NewTicker(p.cfg.ResyncInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			p.resync(ctx)
		}
	}
}

// keepUpFor is keepUp for d.
func (p *Proxy) keepUpFor(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	p.keepUp(ctx)
}

// stopNewIPTables removes the DNAT rules of every family: conntrack goes on
// translating the flows they already matched, and a new connection reaches
// the pod's own stack, where no socket listens, and is refused. The
// resync keeps the remaining rules, and retries a family that failed here.
func (p *Proxy) stopNewIPTables(ctx context.Context) {
	p.rulesMu.Lock()
	defer p.rulesMu.Unlock()
	for _, m := range p.rules {
		// The DNAT rule's counts since the last check would go with it.
		p.readCounters(ctx, m)
		if err := m.replace(m.want.established()); err != nil {
			p.metrics.RuleErrors.WithLabelValues(m.family.String()).Inc()
			klog.FromContext(ctx).Error(err, "Removing the rules for new connections failed", "family", m.family.String())
		}
	}
}

// established returns rs without the rules that forward new connections:
// PULSELB-PREROUTING is left empty. Its chain and jump stay, so the drain's
// resync checks the same chains; MASQUERADE and the FORWARD allow-list stay
// for the packets of flows conntrack has already translated.
func (rs RuleSet) established() RuleSet {
	out := rs
	out.Rules = slices.DeleteFunc(slices.Clone(rs.Rules), func(r Rule) bool {
		return r.Chain == Chain{"nat", chainPrerouting}
	})
	return out
}
