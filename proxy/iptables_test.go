package proxy

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func testRuleSet(t *testing.T) RuleSet {
	t.Helper()
	ports, err := ParsePorts("TCP:80,UDP:53")
	if err != nil {
		t.Fatal(err)
	}
	return BuildRules(netip.MustParseAddr("10.96.0.10"), ports, AllowList{Ranges: SourceRanges{netip.MustParsePrefix("192.0.2.0/24")}}, NodePortTarget{})
}

func TestEnsureIsIdempotent(t *testing.T) {
	ipt := newFakeIPTables()
	m := newRuleManager(IPv4, ipt, testRuleSet(t))
	if _, err := m.ensure(); err != nil {
		t.Fatal(err)
	}
	installed := ipt.dump()
	calls := ipt.calls
	for range 3 {
		n, err := m.ensure()
		if err != nil || n != 0 {
			t.Fatalf("ensure on intact rules = %d repairs, %v; want 0, nil", n, err)
		}
	}
	if ipt.calls != calls {
		t.Errorf("ensure on intact rules made %d changes, want none", ipt.calls-calls)
	}
	if got := ipt.dump(); !slices.Equal(got, installed) {
		t.Errorf("rules changed:\n%s", strings.Join(got, "\n"))
	}

	// A new manager, as after a restart, adopts leftover rules without
	// duplicating anything.
	m2 := newRuleManager(IPv4, ipt, testRuleSet(t))
	if _, err := m2.ensure(); err != nil {
		t.Fatal(err)
	}
	if got := ipt.dump(); !slices.Equal(got, installed) {
		t.Errorf("a second install changed the rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(installed, "\n"))
	}
}

func TestEnsureRepairs(t *testing.T) {
	tests := []struct {
		name       string
		breakRules func(chains map[Chain][]string)
	}{
		{"rule deleted", func(c map[Chain][]string) {
			k := Chain{"nat", chainPrerouting}
			c[k] = c[k][1:]
		}},
		{"chain flushed", func(c map[Chain][]string) { c[Chain{"filter", chainForward}] = nil }},
		{"rule added", func(c map[Chain][]string) {
			k := Chain{"filter", chainForward}
			c[k] = append([]string{"-j ACCEPT"}, c[k]...)
		}},
		{"rules reordered", func(c map[Chain][]string) {
			k := Chain{"filter", chainForward}
			slices.Reverse(c[k])
		}},
		{"jump deleted", func(c map[Chain][]string) { c[Chain{"nat", "PREROUTING"}] = nil }},
		{"chain deleted", func(c map[Chain][]string) {
			c[Chain{"nat", "POSTROUTING"}] = nil
			delete(c, Chain{"nat", chainPostrouting})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ipt := newFakeIPTables()
			m := newRuleManager(IPv4, ipt, testRuleSet(t))
			if _, err := m.ensure(); err != nil {
				t.Fatal(err)
			}
			want := ipt.dump()
			ipt.edit(tt.breakRules)
			n, err := m.ensure()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Error("ensure reported no repair")
			}
			if got := ipt.dump(); !slices.Equal(got, want) {
				t.Errorf("after repair:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestEnsureError(t *testing.T) {
	ipt := newFakeIPTables()
	ipt.fail["Append"] = errors.New("permission denied (you must be root)")
	_, err := newRuleManager(IPv4, ipt, testRuleSet(t)).ensure()
	if err == nil || !strings.Contains(err.Error(), "adding rule -t nat -A PULSELB-PREROUTING") ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("error %v, want one naming the rule and the cause", err)
	}
}

func TestRemoveRulesLeavesOthersAlone(t *testing.T) {
	ipt := newFakeIPTables()
	foreign := func(c map[Chain][]string) {
		c[Chain{"nat", "KUBE-SERVICES"}] = []string{"-j RETURN"}
		c[Chain{"nat", "PREROUTING"}] = append(c[Chain{"nat", "PREROUTING"}], "-j KUBE-SERVICES")
		c[Chain{"filter", "FORWARD"}] = append(c[Chain{"filter", "FORWARD"}], "-s 192.0.2.1/32 -j DROP")
	}
	ipt.edit(foreign)
	before := ipt.dump()
	m := newRuleManager(IPv4, ipt, testRuleSet(t))
	if _, err := m.ensure(); err != nil {
		t.Fatal(err)
	}
	// A crashed run left a second copy of a jump.
	ipt.edit(func(c map[Chain][]string) {
		k := Chain{"filter", "FORWARD"}
		c[k] = append(c[k], c[k][0])
	})
	if err := removeRules(ipt); err != nil {
		t.Fatal(err)
	}
	if got := ipt.dump(); !slices.Equal(got, before) {
		t.Errorf("after removal:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(before, "\n"))
	}
	// Nothing left: removing again succeeds and changes nothing.
	calls := ipt.calls
	if err := removeRules(ipt); err != nil || ipt.calls != calls {
		t.Errorf("second removal: %v, %d changes", err, ipt.calls-calls)
	}
}
