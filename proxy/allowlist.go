package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
)

// AllowList is who may use a proxy: the clients inside Ranges (every client
// when Ranges is empty, as in Kubernetes) and, when Ranges is not empty,
// pulselb's own probers at Probers, so that a Service with
// loadBalancerSourceRanges is still probed. A Closed list allows nobody: a
// proxy that does not know the Service's current list, or could not take
// it, refuses new clients rather than serve with an old one.
type AllowList struct {
	Ranges  SourceRanges
	Probers []netip.Addr
	Closed  bool
}

// ClosedAllowList allows nobody.
var ClosedAllowList = AllowList{Closed: true}

// restricted reports whether some clients are refused.
func (a AllowList) restricted() bool { return a.Closed || len(a.Ranges) > 0 }

// Allows reports whether a client at addr may use the proxy.
func (a AllowList) Allows(addr netip.Addr) bool {
	switch {
	case a.Closed:
		return false
	case len(a.Ranges) == 0:
		return true
	}
	addr = addr.Unmap()
	return a.Ranges.Allows(addr) || slices.Contains(a.Probers, addr)
}

// family returns the sources allowed in family f when the list is
// restricted: its ranges of f, then its probers of f as host prefixes.
func (a AllowList) family(f Family) []netip.Prefix {
	if a.Closed {
		return nil
	}
	out := a.Ranges.family(f)
	for _, p := range a.Probers {
		if familyOf(p) == f {
			out = append(out, netip.PrefixFrom(p, p.BitLen()))
		}
	}
	return out
}

// String returns the list for logs: "all", "none (closed)", or the ranges
// and the probers' count.
func (a AllowList) String() string {
	switch {
	case a.Closed:
		return "none (closed)"
	case len(a.Ranges) == 0:
		return "all"
	}
	return fmt.Sprintf("%s and %d probers", a.Ranges, len(a.Probers))
}

// Hash identifies the list: "closed", else contract.AllowListHash ("all"
// or 16 hex digits), which the controller writes on the workload as
// contract.AnnotationAllowListHash, so an operator can see from
// pulselb_proxy_allow_list_info that every proxy applies the list wanted.
func (a AllowList) Hash() string {
	if a.Closed {
		return "closed"
	}
	return contract.AllowListHash(a.Ranges, a.Probers)
}

// AllowListFrom reads the allow-list from a proxy workload's annotations
// (contract.ParseAllowList).
func AllowListFrom(annotations map[string]string) (AllowList, error) {
	ranges, probers, err := contract.ParseAllowList(annotations)
	if err != nil {
		return AllowList{}, err
	}
	return AllowList{Ranges: ranges, Probers: probers}, nil
}

// AllowListNow returns the list the proxy applies.
func (p *Proxy) AllowListNow() AllowList {
	return *p.allow.Load()
}

// SetAllowList makes a the proxy's allow-list, at once and in place: in
// iptables mode the FORWARD allow-list is rewritten without a moment in
// which it is open (new rules are appended before the old ones go), in
// userspace mode the relays check every new client against a. Connections
// and sessions of clients a no longer allows are cut in both modes: iptables
// filters every packet, not only the first, and the relays close them. An
// error leaves the proxy closed (it refuses every new client) and unhealthy
// until a later list is applied.
func (p *Proxy) SetAllowList(ctx context.Context, a AllowList) error {
	prev := p.AllowListNow()
	err := p.apply(ctx, a)
	if err != nil {
		p.metrics.setAllowList(ClosedAllowList, "rejected")
		p.setAllowErr(err)
		klog.FromContext(ctx).Error(err, "Applying the allow-list failed; refusing every new client", "wanted", a.String())
		return err
	}
	p.metrics.setAllowList(a, "applied")
	p.setAllowErr(nil)
	if prev.Hash() != a.Hash() {
		klog.FromContext(ctx).Info("Applied allow-list", "sources", a.String(), "hash", a.Hash())
	}
	return nil
}

// RejectAllowList closes the proxy because the current list could not be
// read or understood (err says why): it refuses every new client and is
// unhealthy until SetAllowList succeeds.
func (p *Proxy) RejectAllowList(ctx context.Context, err error) {
	if cerr := p.apply(ctx, ClosedAllowList); cerr != nil {
		err = fmt.Errorf("%w; closing the proxy: %w", err, cerr)
	}
	p.metrics.setAllowList(ClosedAllowList, "rejected")
	p.setAllowErr(err)
	klog.FromContext(ctx).Error(err, "Refusing every new client until the allow-list is known")
}

// apply puts a in force, or the closed list when a cannot be installed,
// and cuts what the list in force no longer allows.
func (p *Proxy) apply(ctx context.Context, a AllowList) error {
	p.rulesMu.Lock()
	defer p.rulesMu.Unlock()
	p.allow.Store(&a)
	err := p.applyRules()
	if err != nil {
		p.allow.Store(&ClosedAllowList)
		if cerr := p.applyRules(); cerr != nil {
			err = fmt.Errorf("%w; closing the proxy failed too: %w", err, cerr)
		}
		a = ClosedAllowList
	}
	for _, r := range p.tcp {
		r.cutDisallowed(ctx, a)
	}
	for _, r := range p.udp {
		r.cutDisallowed(ctx, a)
	}
	return err
}

// applyRules rewrites every family's rules for the current allow-list, in
// the shape of the current phase. The caller holds rulesMu.
func (p *Proxy) applyRules() error {
	var errs []error
	for _, m := range p.rules {
		want := p.ruleSet(m.family)
		if p.Phase() == PhaseDrain {
			want = want.established()
		}
		if err := m.replace(want); err != nil {
			p.metrics.RuleErrors.WithLabelValues(m.family.String()).Inc()
			errs = append(errs, fmt.Errorf("%s rules: %w", m.family, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("installing the allow-list: %w", errors.Join(errs...))
	}
	return nil
}

// ruleSet returns the rules of family f for the current allow-list.
func (p *Proxy) ruleSet(f Family) RuleSet {
	for _, cip := range p.cfg.ClusterIPs {
		if familyOf(cip) == f {
			return BuildRules(cip, p.ruledPorts(), p.AllowListNow(), p.target(f))
		}
	}
	return RuleSet{}
}

// allows reports whether the list in a allows addr; a relay made without a
// list (in tests) allows everyone.
func allows(a *atomic.Pointer[AllowList], addr netip.Addr) bool {
	if a == nil {
		return true
	}
	return a.Load().Allows(addr)
}

// AllowListErr returns why the proxy is closed against the list it was
// given, or nil when it applies that list.
func (p *Proxy) AllowListErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allowErr
}
