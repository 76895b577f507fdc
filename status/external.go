package status

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

// ConditionExternallyReachable says whether external vantages reach the
// Service's addresses; it is on Services whose external-vantages is
// advisory or required, once an external vantage reports (required: at
// once).
const ConditionExternallyReachable = "pulselb.io/ExternallyReachable"

// Reasons of ConditionExternallyReachable and of its Events.
const (
	ReasonReachable         = "Reachable"
	ReasonUnreachable       = "Unreachable"
	ReasonAllUnreachable    = "AllUnreachable"
	ReasonNoExternalVantage = "NoExternalVantage"
	ReasonExternalStale     = "ExternalVantagesStale"
	ReasonExternalCutOff    = "ExternalVantagesCutOff"
	// ReasonExternalPathDown and ReasonExternalPathUp are the Events of a
	// change of what external vantages reach.
	ReasonExternalPathDown = "ExternalPathDown"
	ReasonExternalPathUp   = "ExternalPathUp"
)

// External is what the external vantages say about one Service's nodes.
type External struct {
	// Vantages counts the external vantages with a report, Fresh those
	// whose report is fresh, and CutOff the fresh ones that say every
	// address they probe is Down: such a vantage has probably lost its own
	// way out (its uplink, a firewall), so it is not listened to.
	Vantages, Fresh, CutOff int
	// Down holds, by node, why the usable vantages (fresh, not cut off)
	// cannot reach the node: a majority of them say Down for one of its
	// ports (for every port with publish-when any-port).
	Down map[string]string
}

// Usable counts the vantages whose word counts: fresh and not cut off.
func (e External) Usable() int { return e.Fresh - e.CutOff }

// ExternalVantages returns the names of the external vantages' reports,
// sorted.
func (r Reports) ExternalVantages() []string {
	var out []string
	for name, ir := range r.byNode {
		if ir.external {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// JudgeExternal judges what the external vantages in r say about service
// (namespace/name) on each of nodes, over its ports. A node is Down when,
// for one of its ports (for every port with publishWhen any-port), more
// than half of the usable vantages say Down. A vantage that has not
// probed a port yet votes neither way, so an address is never held out
// for want of data; with a single usable vantage its word suffices, as
// the Service asked for it (required) or is only told (advisory).
func JudgeExternal(r Reports, service string, ports []contract.PortKey, nodes []string, publishWhen string) External {
	var e External
	var usable []string
	for _, v := range r.ExternalVantages() {
		e.Vantages++
		ir := r.byNode[v]
		if !ir.fresh {
			continue
		}
		e.Fresh++
		if ir.allDown {
			e.CutOff++
			continue
		}
		usable = append(usable, v)
	}
	if len(usable) == 0 {
		return e
	}
	for _, n := range nodes {
		var why []string
		down := 0
		for _, p := range ports {
			key := p.TargetKey(service, n)
			votes, msg := 0, ""
			for _, v := range usable {
				obs := r.byNode[v].results[key]
				if obs == nil || obs.State != v1alpha1.StateDown {
					continue
				}
				votes++
				if msg == "" {
					msg = strings.TrimSpace(strings.TrimSpace(obs.Outcome) + " " + obs.Message)
				}
			}
			if 2*votes <= len(usable) {
				continue
			}
			down++
			s := fmt.Sprintf("%s/%d unreachable from %d of %d external vantages", p.Protocol, p.Port, votes, len(usable))
			if msg != "" {
				s += ": " + msg
			}
			why = append(why, s)
		}
		if down == 0 || (publishWhen == contract.PublishAnyPort && down < len(ports)) {
			continue
		}
		if e.Down == nil {
			e.Down = map[string]string{}
		}
		e.Down[n] = strings.Join(why, "; ")
	}
	return e
}

// externalVerdict applies the external view to healthy, the nodes healthy
// by in-cluster verdicts: it returns the nodes to keep, those held out
// because external vantages cannot reach them, and the condition to set
// (nil: none, and any old one removed).
func externalVerdict(mode string, e External, healthy []string, addrs func(node string) string) (keep, held []string, cond *condition) {
	keep = healthy
	if (mode != contract.ExternalAdvisory && mode != contract.ExternalRequired) || (mode == contract.ExternalAdvisory && e.Vantages == 0) {
		return keep, nil, nil
	}
	fallback := "publishing by in-cluster verdicts"
	if mode == contract.ExternalAdvisory {
		fallback = "advisory: the status follows in-cluster verdicts"
	}
	switch {
	case e.Vantages == 0:
		return keep, nil, &condition{false, ReasonNoExternalVantage, "no external vantage reports; " + fallback}
	case e.Fresh == 0:
		return keep, nil, &condition{false, ReasonExternalStale, fmt.Sprintf("none of %d external vantages reported recently; %s", e.Vantages, fallback)}
	case e.Usable() == 0:
		return keep, nil, &condition{false, ReasonExternalCutOff, fmt.Sprintf(
			"every fresh external vantage (%d) says every address is down, so they are probably cut off themselves; %s", e.Fresh, fallback)}
	}
	var unreachable []string
	for _, n := range healthy {
		if why, ok := e.Down[n]; ok {
			held = append(held, n)
			unreachable = append(unreachable, addrs(n)+": "+why)
		}
	}
	if len(held) == 0 {
		return keep, nil, &condition{true, ReasonReachable, fmt.Sprintf("every healthy address is reachable from the %d usable external vantages", e.Usable())}
	}
	list := contract.ShortList(unreachable, 5)
	if mode == contract.ExternalAdvisory {
		return keep, nil, &condition{false, ReasonUnreachable, "unreachable from outside, still published (advisory): " + list}
	}
	if len(held) == len(healthy) {
		return keep, nil, &condition{false, ReasonAllUnreachable, "no healthy address is reachable from outside; " + fallback + " (fail open): " + list}
	}
	keep = slices.DeleteFunc(slices.Clone(healthy), func(n string) bool { return slices.Contains(held, n) })
	return keep, held, &condition{false, ReasonUnreachable, "held out of status, unreachable from outside: " + list}
}

// condition is a pulselb condition's status, reason and message.
type condition struct {
	ok              bool
	reason, message string
}

// CutOff reports whether the external vantage named name has a report
// with results that are all Down: fresh or not, it then cannot tell a
// broken path from its own.
func (r Reports) CutOff(name string) bool {
	ir, ok := r.byNode[name]
	return ok && ir.external && ir.allDown
}
