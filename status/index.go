package status

import (
	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
)

// Keeping Reports up to date report by report. At 1,000 probers, indexing
// every report again each round cost more than judging; a prober writes
// its report only when a result changes, so a round has a handful of new
// reports, and Put says which targets' observations they changed: the only
// targets whose verdict they can change (Engine.Rejudge).

// Put indexes report r (named after its prober node) in place of what its
// prober reported before, as fresh or stale as that was (a new prober's is
// stale until SetFresh), and returns the keys of the targets whose
// observation by that prober changed:
// contract.TargetKey for Service ports, contract.BeaconKey for beacons.
// When the report turns external or internal, every target it observes
// counts as changed. (Whether every result is Down, which JudgeExternal
// reads, changes only with an observation.)
func (r *Reports) Put(report *v1alpha1.ProbeReport) []string {
	if r.byNode == nil {
		r.byNode = map[string]indexedReport{}
	}
	prev, had := r.byNode[report.Name]
	next := indexReport(report, prev.fresh)
	r.byNode[report.Name] = next
	if !had {
		return observed(next)
	}
	if prev.external != next.external {
		return append(observed(prev), observed(next)...)
	}
	var changed []string
	for k, o := range next.results {
		if !sameObservation(prev.results[k], o) {
			changed = append(changed, k)
		}
	}
	for k := range prev.results {
		if _, ok := next.results[k]; !ok {
			changed = append(changed, k)
		}
	}
	for n, o := range next.beacons {
		if !sameObservation(prev.beacons[n], o) {
			changed = append(changed, contract.BeaconKey(n))
		}
	}
	for n := range prev.beacons {
		if _, ok := next.beacons[n]; !ok {
			changed = append(changed, contract.BeaconKey(n))
		}
	}
	return changed
}

// Remove forgets node's report and returns the keys of the targets it
// observed, as Put does.
func (r *Reports) Remove(node string) []string {
	prev, ok := r.byNode[node]
	if !ok {
		return nil
	}
	delete(r.byNode, node)
	return observed(prev)
}

// SetFresh marks node's report fresh or stale, and reports whether that
// changed it; false for a node without a report.
func (r *Reports) SetFresh(node string, fresh bool) bool {
	ir, ok := r.byNode[node]
	if !ok || ir.fresh == fresh {
		return false
	}
	ir.fresh = fresh
	r.byNode[node] = ir
	return true
}

// observed returns the keys of the targets ir observes.
func observed(ir indexedReport) []string {
	out := make([]string, 0, len(ir.results)+len(ir.beacons))
	for k := range ir.results {
		out = append(out, k)
	}
	for n := range ir.beacons {
		out = append(out, contract.BeaconKey(n))
	}
	return out
}

// sameObservation reports whether a and b say the same to every reader of
// Reports (Judge, JudgeExternal, a vantage's Down vote): the state, the
// start of the failures, the outcome and the message.
func sameObservation(a, b *v1alpha1.Observation) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.State == b.State && a.Outcome == b.Outcome && a.Message == b.Message &&
		a.FailingSince.Equal(b.FailingSince)
}
