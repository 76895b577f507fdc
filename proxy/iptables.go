package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/coreos/go-iptables/iptables"
)

// IPTables is the part of github.com/coreos/go-iptables the proxy uses, so
// rule handling is tested against a fake that records rules. An
// *iptables.IPTables satisfies it.
type IPTables interface {
	ChainExists(table, chain string) (bool, error)
	NewChain(table, chain string) error
	ClearChain(table, chain string) error
	DeleteChain(table, chain string) error
	Append(table, chain string, rulespec ...string) error
	Insert(table, chain string, pos int, rulespec ...string) error
	Exists(table, chain string, rulespec ...string) (bool, error)
	Delete(table, chain string, rulespec ...string) error
	List(table, chain string) ([]string, error)
	StructuredStats(table, chain string) ([]iptables.Stat, error)
}

// NewIPTables returns the real iptables (or ip6tables) of this network
// namespace. It fails when the binary is missing, which auto mode treats as
// "use userspace".
func NewIPTables(f Family) (IPTables, error) {
	proto := iptables.ProtocolIPv4
	if f == IPv6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Timeout(10))
	if err != nil {
		return nil, fmt.Errorf("finding %s iptables: %w", f, err)
	}
	return ipt, nil
}

// ruleManager keeps one family's RuleSet installed.
type ruleManager struct {
	family Family
	ipt    IPTables
	want   RuleSet
	// installed is each own chain as iptables listed it right after pulselb
	// filled it. iptables normalises rule specs ("-d 10.0.0.1" lists as
	// "-d 10.0.0.1/32 "), so comparing a listing with an earlier listing
	// finds a deleted, added or reordered rule without parsing rules.
	installed map[Chain][]string
	// lastCounts are each own chain's counters at the last read, for
	// counters to return differences.
	lastCounts map[Chain][]iptables.Stat
}

func newRuleManager(f Family, ipt IPTables, want RuleSet) *ruleManager {
	return &ruleManager{family: f, ipt: ipt, want: want, installed: map[Chain][]string{}, lastCounts: map[Chain][]iptables.Stat{}}
}

// ensure makes the installed rules equal to the wanted ones, changing only
// what differs. It returns how many chains or jumps it had to repair; the
// first call installs everything and reports what it changed too.
func (m *ruleManager) ensure() (repaired int, err error) {
	for _, c := range m.want.Chains {
		ok, err := m.ipt.ChainExists(c.Table, c.Name)
		if err != nil {
			return repaired, fmt.Errorf("checking chain %s/%s: %w", c.Table, c.Name, err)
		}
		if !ok {
			if err := m.ipt.NewChain(c.Table, c.Name); err != nil {
				return repaired, fmt.Errorf("creating chain %s/%s: %w", c.Table, c.Name, err)
			}
		}
		got, err := m.ipt.List(c.Table, c.Name)
		if err != nil {
			return repaired, fmt.Errorf("listing chain %s/%s: %w", c.Table, c.Name, err)
		}
		if before, ok := m.installed[c]; ok && slices.Equal(got, before) {
			continue
		}
		if err := m.fill(c); err != nil {
			return repaired, err
		}
		repaired++
	}
	for _, j := range m.want.Jumps {
		ok, err := m.ipt.Exists(j.Table, j.Name, j.Spec...)
		if err != nil {
			return repaired, fmt.Errorf("checking jump %s: %w", j, err)
		}
		if ok {
			continue
		}
		// First, so that a DROP or ACCEPT rule someone else appended to the
		// built-in chain does not shadow pulselb's rules.
		if err := m.ipt.Insert(j.Table, j.Name, 1, j.Spec...); err != nil {
			return repaired, fmt.Errorf("inserting jump %s: %w", j, err)
		}
		repaired++
	}
	return repaired, nil
}

// replace makes want the wanted rules and refills only the own chains whose
// rules it changes: a chain being refilled is briefly empty, which the other
// chains' flows need not see.
func (m *ruleManager) replace(want RuleSet) error {
	old := m.want
	m.want = want
	for _, c := range want.Chains {
		if slices.EqualFunc(old.specs(c), want.specs(c), slices.Equal[[]string]) {
			continue
		}
		if err := m.fill(c); err != nil {
			return err
		}
	}
	return nil
}

// fill replaces one own chain's rules with the wanted ones without a
// moment in which the chain is empty: the wanted rules are appended after
// whatever is there, then the rules that were there are deleted by
// position, last first. While it runs, a packet meets the old rules first
// and the new ones after: a source allowed by both lists is never dropped,
// and the filter is never open to all, as a flush and refill would leave it
// (FORWARD's policy accepts).
func (m *ruleManager) fill(c Chain) error {
	delete(m.installed, c)
	delete(m.lastCounts, c) // new rules count from zero
	before, err := m.ipt.List(c.Table, c.Name)
	if err != nil {
		return fmt.Errorf("listing chain %s/%s: %w", c.Table, c.Name, err)
	}
	old := len(before) - 1 // the first line declares the chain
	for _, r := range m.want.Rules {
		if r.Chain != c {
			continue
		}
		if err := m.ipt.Append(r.Table, r.Name, r.Spec...); err != nil {
			return fmt.Errorf("adding rule %s: %w", r, err)
		}
	}
	for i := old; i >= 1; i-- {
		if err := m.ipt.Delete(c.Table, c.Name, strconv.Itoa(i)); err != nil {
			return fmt.Errorf("deleting old rule %d of %s/%s: %w", i, c.Table, c.Name, err)
		}
	}
	got, err := m.ipt.List(c.Table, c.Name)
	if err != nil {
		return fmt.Errorf("listing chain %s/%s: %w", c.Table, c.Name, err)
	}
	m.installed[c] = got
	return nil
}

// removeRules deletes pulselb's jumps and chains from ipt: every jump copy
// (a crashed run may have left one), then the own chains. It touches no other
// rule or chain, and succeeds when there is nothing to remove.
func removeRules(ipt IPTables) error {
	var errs []error
	for _, j := range jumps {
		// Bounded: a jump can only be there a few times, once per crashed run.
		for range 16 {
			ok, err := ipt.Exists(j.Table, j.Name, j.Spec...)
			if err != nil {
				// A missing own chain makes the jump itself invalid to
				// check; then there is no jump to remove either.
				if exists, cerr := ipt.ChainExists(j.Table, jumpTarget(j)); cerr == nil && !exists {
					break
				}
				errs = append(errs, fmt.Errorf("checking jump %s: %w", j, err))
				break
			}
			if !ok {
				break
			}
			if err := ipt.Delete(j.Table, j.Name, j.Spec...); err != nil {
				errs = append(errs, fmt.Errorf("deleting jump %s: %w", j, err))
				break
			}
		}
	}
	for _, c := range ownChains {
		ok, err := ipt.ChainExists(c.Table, c.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("checking chain %s/%s: %w", c.Table, c.Name, err))
			continue
		}
		if !ok {
			continue
		}
		if err := ipt.ClearChain(c.Table, c.Name); err != nil {
			errs = append(errs, fmt.Errorf("flushing chain %s/%s: %w", c.Table, c.Name, err))
			continue
		}
		if err := ipt.DeleteChain(c.Table, c.Name); err != nil {
			errs = append(errs, fmt.Errorf("deleting chain %s/%s: %w", c.Table, c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// jumpTarget returns the chain a jump rule leads to: the word after "-j".
func jumpTarget(j Rule) string {
	if i := slices.Index(j.Spec, "-j"); i >= 0 && i+1 < len(j.Spec) {
		return j.Spec[i+1]
	}
	return ""
}
