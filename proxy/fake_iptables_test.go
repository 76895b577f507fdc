package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
)

// fakeIPTables records chains and rules as iptables would, so rule handling
// is tested without root. Rules are stored as joined specs; the built-in
// chains of the nat and filter tables exist from the start.
type fakeIPTables struct {
	mu     sync.Mutex
	chains map[Chain][]string
	// fail makes the named operation ("NewChain", "Append", ...) fail.
	fail map[string]error
	// calls counts every mutating call, to show that a check changed nothing.
	calls int
	// counters are the packet and byte counters of each chain's rules, by
	// position; flushing a chain zeroes them, like the kernel.
	counters map[Chain][]iptables.Stat
	// observe, when set, is called with the lock held after every
	// ClearChain, Append and Delete.
	observe func(op string, c Chain)
	// failAppendMatching makes an Append whose spec contains it fail.
	failAppendMatching string
}

// set changes the fake's hooks under its lock.
func (f *fakeIPTables) set(fn func(f *fakeIPTables)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// chain returns the rules of c.
func (f *fakeIPTables) chain(c Chain) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.chains[c])
}

func newFakeIPTables() *fakeIPTables {
	f := &fakeIPTables{chains: map[Chain][]string{}, fail: map[string]error{}}
	for _, c := range []Chain{{"nat", "PREROUTING"}, {"nat", "INPUT"}, {"nat", "OUTPUT"}, {"nat", "POSTROUTING"},
		{"filter", "INPUT"}, {"filter", "FORWARD"}, {"filter", "OUTPUT"}} {
		f.chains[c] = nil
	}
	return f
}

func (f *fakeIPTables) op(name string) error {
	if err := f.fail[name]; err != nil {
		return fmt.Errorf("fake %s: %w", name, err)
	}
	return nil
}

func (f *fakeIPTables) mutate(name string) error {
	f.calls++
	return f.op(name)
}

func builtin(chain string) bool {
	return chain == strings.ToUpper(chain) && !strings.Contains(chain, "-")
}

func (f *fakeIPTables) ChainExists(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.chains[Chain{table, chain}]
	return ok, f.op("ChainExists")
}

func (f *fakeIPTables) NewChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("NewChain"); err != nil {
		return err
	}
	if _, ok := f.chains[Chain{table, chain}]; ok {
		return fmt.Errorf("chain %s/%s exists", table, chain)
	}
	f.chains[Chain{table, chain}] = nil
	return nil
}

func (f *fakeIPTables) ClearChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("ClearChain"); err != nil {
		return err
	}
	// Like go-iptables, ClearChain creates a missing chain.
	f.chains[Chain{table, chain}] = nil
	delete(f.counters, Chain{table, chain})
	if f.observe != nil {
		f.observe("ClearChain", Chain{table, chain})
	}
	return nil
}

func (f *fakeIPTables) DeleteChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("DeleteChain"); err != nil {
		return err
	}
	c := Chain{table, chain}
	if len(f.chains[c]) > 0 {
		return fmt.Errorf("chain %s/%s not empty", table, chain)
	}
	for _, rules := range f.chains {
		for _, r := range rules {
			if strings.HasSuffix(r, "-j "+chain) {
				return fmt.Errorf("chain %s/%s is referenced", table, chain)
			}
		}
	}
	delete(f.chains, c)
	return nil
}

func (f *fakeIPTables) checkTarget(table string, spec []string) error {
	if i := slices.Index(spec, "-j"); i >= 0 && i+1 < len(spec) && !builtin(spec[i+1]) {
		if _, ok := f.chains[Chain{table, spec[i+1]}]; !ok {
			return fmt.Errorf("no chain/target %s", spec[i+1])
		}
	}
	return nil
}

func (f *fakeIPTables) Append(table, chain string, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("Append"); err != nil {
		return err
	}
	if f.failAppendMatching != "" && strings.Contains(strings.Join(spec, " "), f.failAppendMatching) {
		return fmt.Errorf("fake Append: refused %s", f.failAppendMatching)
	}
	if err := f.checkTarget(table, spec); err != nil {
		return err
	}
	c := Chain{table, chain}
	f.chains[c] = append(f.chains[c], strings.Join(spec, " "))
	if f.observe != nil {
		f.observe("Append", c)
	}
	return nil
}

func (f *fakeIPTables) Insert(table, chain string, pos int, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("Insert"); err != nil {
		return err
	}
	if err := f.checkTarget(table, spec); err != nil {
		return err
	}
	c := Chain{table, chain}
	f.chains[c] = slices.Insert(f.chains[c], pos-1, strings.Join(spec, " "))
	return nil
}

func (f *fakeIPTables) Exists(table, chain string, spec ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.op("Exists"); err != nil {
		return false, err
	}
	if err := f.checkTarget(table, spec); err != nil {
		return false, err
	}
	return slices.Contains(f.chains[Chain{table, chain}], strings.Join(spec, " ")), nil
}

func (f *fakeIPTables) Delete(table, chain string, spec ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mutate("Delete"); err != nil {
		return err
	}
	c := Chain{table, chain}
	i := slices.Index(f.chains[c], strings.Join(spec, " "))
	if n, err := strconv.Atoi(strings.Join(spec, " ")); err == nil {
		// iptables -D CHAIN N deletes the Nth rule.
		i = n - 1
		if n < 1 || n > len(f.chains[c]) {
			i = -1
		}
	}
	if i < 0 {
		return fmt.Errorf("no such rule in %s/%s", table, chain)
	}
	f.chains[c] = slices.Delete(f.chains[c], i, i+1)
	if i < len(f.counters[c]) {
		// A rule's counters go with it.
		f.counters[c] = slices.Delete(f.counters[c], i, i+1)
	}
	if f.observe != nil {
		f.observe("Delete", c)
	}
	return nil
}

func (f *fakeIPTables) List(table, chain string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.op("List"); err != nil {
		return nil, err
	}
	rules, ok := f.chains[Chain{table, chain}]
	if !ok {
		return nil, fmt.Errorf("no chain %s/%s", table, chain)
	}
	head := "-N " + chain
	if builtin(chain) {
		head = "-P " + chain + " ACCEPT"
	}
	out := []string{head}
	for _, r := range rules {
		out = append(out, "-A "+chain+" "+r)
	}
	return out, nil
}

// dump returns every rule as "table/chain: spec", sorted, for comparisons.
func (f *fakeIPTables) dump() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for c, rules := range f.chains {
		if !builtin(c.Name) {
			out = append(out, c.Table+"/"+c.Name+":")
		}
		for _, r := range rules {
			out = append(out, c.Table+"/"+c.Name+": "+r)
		}
	}
	slices.Sort(out)
	return out
}

// edit runs fn on the chains under the lock, as a human with iptables would.
func (f *fakeIPTables) edit(fn func(chains map[Chain][]string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f.chains)
}

func (f *fakeIPTables) StructuredStats(table, chain string) ([]iptables.Stat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.op("StructuredStats"); err != nil {
		return nil, err
	}
	c := Chain{table, chain}
	rules, ok := f.chains[c]
	if !ok {
		return nil, fmt.Errorf("no chain %s/%s", table, chain)
	}
	out := make([]iptables.Stat, len(rules))
	copy(out, f.counters[c])
	return out, nil
}

// count adds packets and bytes to the counters of rule i of chain c.
func (f *fakeIPTables) count(c Chain, i int, packets, bytes uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.counters == nil {
		f.counters = map[Chain][]iptables.Stat{}
	}
	for len(f.counters[c]) <= i {
		f.counters[c] = append(f.counters[c], iptables.Stat{})
	}
	f.counters[c][i].Packets += packets
	f.counters[c][i].Bytes += bytes
}
