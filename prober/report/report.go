// Package report turns what the probe scheduler knows into the status of a
// v1alpha1 ProbeReport. The prober agent and standalone mode both build
// their reports with it, so the quorum that reads them judges both alike.
// It is a package of its own so that the prober engine needs no API types.
package report

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
)

// MaxMessage is the longest message an observation carries, the CRD's
// limit.
const MaxMessage = 256

// Target is what a probed target is in a report: a node's beacon, or one
// port of a Service on a node.
type Target struct {
	// Beacon marks a node's beacon; only Node is used then.
	Beacon bool
	// Service is namespace/name (standalone: the service's name).
	Service string
	Port    int32
	// PortProtocol is the port's protocol, such as TCP.
	PortProtocol string
	// Protocol is the probe's protocol, such as https.
	Protocol probespec.Protocol
	// Node is the node (standalone: the host) the target is on.
	Node string
}

// Status returns the status of a report written at now by a prober whose
// heartbeat is heartbeat. It has one result or beacon per target of
// snap that targets describes and whose state is concluded (Up or Down),
// results sorted by target key and beacons by node, and their counts.
func Status(now time.Time, heartbeat time.Duration, snap []prober.TargetStatus, targets map[string]Target) v1alpha1.ProbeReportStatus {
	st := v1alpha1.ProbeReportStatus{HeartbeatTime: metav1.NewTime(now), HeartbeatSeconds: contract.HeartbeatSeconds(heartbeat)}
	for _, s := range snap {
		t, ok := targets[s.Key]
		if !ok || (s.State != prober.StateUp && s.State != prober.StateDown) {
			continue
		}
		obs := Observation(s, t.Node)
		down := int32(0)
		if obs.State == v1alpha1.StateDown {
			down = 1
		}
		if t.Beacon {
			st.Beacons = append(st.Beacons, v1alpha1.BeaconResult{Observation: obs})
			st.BeaconCount++
			st.BeaconsDown += down
			continue
		}
		st.Results = append(st.Results, v1alpha1.ProbeResult{Service: t.Service, Port: t.Port, PortProtocol: t.PortProtocol,
			Protocol: string(t.Protocol), Observation: obs})
		st.Targets++
		st.Down += down
	}
	slices.SortFunc(st.Results, func(x, y v1alpha1.ProbeResult) int {
		if c := strings.Compare(contract.TargetKey(x.Service, x.PortProtocol, x.Port, x.Node), contract.TargetKey(y.Service, y.PortProtocol, y.Port, y.Node)); c != 0 {
			return c
		}
		return strings.Compare(x.Address, y.Address) // a dual-stack port: one result per family
	})
	slices.SortFunc(st.Beacons, func(x, y v1alpha1.BeaconResult) int { return strings.Compare(x.Node, y.Node) })
	return st
}

// Observation turns a concluded target status (Up or Down) into the
// observation a report carries for it; node is the target's node. Its
// message is cut to the CRD's limit.
func Observation(s prober.TargetStatus, node string) v1alpha1.Observation {
	obs := v1alpha1.Observation{Node: node, Address: s.Addr.String(), State: v1alpha1.StateUp,
		Outcome: s.Last.Outcome.String(), Since: metav1.NewTime(s.Since), Message: truncate(s.Last.Message(), MaxMessage)}
	if s.State == prober.StateDown {
		obs.State = v1alpha1.StateDown
	}
	if !s.LastChange.IsZero() {
		obs.LastChange = ptr.To(metav1.NewTime(s.LastChange))
	}
	if !s.FailingSince.IsZero() {
		obs.FailingSince = ptr.To(metav1.NewTime(s.FailingSince))
	}
	if s.RTT > 0 {
		obs.Latency = &metav1.Duration{Duration: s.RTT}
	}
	if !s.CertNotAfter.IsZero() {
		obs.CertNotAfter = CertTime(s.CertNotAfter)
	}
	return obs
}

// CertTime is a certificate's NotAfter as a report carries it: in UTC and
// whole seconds, as X.509 encodes it and the API server stores it, so the
// value read back equals the one written and a report shows a change only
// when the certificate does.
func CertTime(t time.Time) *metav1.Time {
	return &metav1.Time{Time: t.UTC().Truncate(time.Second)}
}

// truncate cuts s to at most n bytes, ending in "..." when cut, without
// splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Changed reports whether a report of status b says something that one of
// status a does not: which targets it concludes about, their states and
// since when, certificate expiries, and for a Down target why (outcome,
// message, first failure), which verdicts and Events quote. Not what moves
// with every probe: write times, latencies, and the last probe of an Up
// target, which a single failed probe (not enough to conclude Down)
// changes and the next success changes back. A prober with a Lease writes
// its report only when this holds; what it leaves out goes with the next
// write.
func Changed(a, b v1alpha1.ProbeReportStatus) bool {
	return !equality.Semantic.DeepEqual(withoutChurn(a), withoutChurn(b))
}

// What a report says differently, for Change: its set of targets, a
// target's state, or anything else Changed sees (a Down target's reason,
// since when, a certificate's expiry).
const (
	ChangeTargets = "targets"
	ChangeState   = "state"
	ChangeDetail  = "detail"
)

// Change names the first of ChangeTargets, ChangeState and ChangeDetail
// that holds from a to b, or returns "" when Changed(a, b) is false.
func Change(a, b v1alpha1.ProbeReportStatus) string {
	if !Changed(a, b) {
		return ""
	}
	states := func(st v1alpha1.ProbeReportStatus) map[string]v1alpha1.State {
		m := make(map[string]v1alpha1.State, len(st.Results)+len(st.Beacons))
		for _, r := range st.Results {
			m[contract.TargetKey(r.Service, r.PortProtocol, r.Port, r.Node)] = r.State
		}
		for _, r := range st.Beacons {
			m[contract.BeaconKey(r.Node)] = r.State
		}
		return m
	}
	sa, sb := states(a), states(b)
	change := ChangeDetail
	if len(sa) != len(sb) {
		return ChangeTargets
	}
	for k, s := range sa {
		t, ok := sb[k]
		if !ok {
			return ChangeTargets
		}
		if s != t {
			change = ChangeState
		}
	}
	return change
}

// withoutChurn returns st without what Changed ignores, sharing nothing
// Changed's caller could see modified.
func withoutChurn(st v1alpha1.ProbeReportStatus) v1alpha1.ProbeReportStatus {
	st.HeartbeatTime = metav1.Time{}
	st.Results = slices.Clone(st.Results)
	for i := range st.Results {
		st.Results[i].Observation = observationWithoutChurn(st.Results[i].Observation)
	}
	st.Beacons = slices.Clone(st.Beacons)
	for i := range st.Beacons {
		st.Beacons[i].Observation = observationWithoutChurn(st.Beacons[i].Observation)
	}
	return st
}

func observationWithoutChurn(o v1alpha1.Observation) v1alpha1.Observation {
	o.Latency = nil
	if o.State == v1alpha1.StateUp {
		o.Outcome, o.Message, o.FailingSince = "", "", nil
	}
	return o
}
