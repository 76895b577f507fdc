package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/pulselb/pulselb/test/deploy"
)

// ProbeResult is the part of a ProbeReport result the scenarios read.
type ProbeResult struct {
	Service  string `json:"service"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
	Node     string `json:"node"`
	// Address is the node's address the result was probed on (one per
	// IP family of a dual-stack Service).
	Address string `json:"address"`
	State   string `json:"state"`
	Outcome string `json:"outcome"`
	Message string `json:"message"`
	// CertNotAfter is read as the API server stored it: a field missing
	// from the CRD's schema would have been pruned.
	CertNotAfter *metav1.Time `json:"certNotAfter"`
}

// ProbeReport is one prober's ProbeReport, as far as the scenarios read it.
type ProbeReport struct {
	// Name is the object's name (the prober's node).
	Name   string `json:"-"`
	Status struct {
		Results []ProbeResult `json:"results"`
		Beacons []ProbeResult `json:"beacons"`
	} `json:"status"`
}

// ErrDecoding wraps a ProbeReport that does not decode.
var ErrDecoding = errors.New("decoding a ProbeReport")

// ListReports returns the ProbeReports in namespace ns.
func ListReports(ctx context.Context, dyn dynamic.Interface, ns string) ([]ProbeReport, error) {
	l, err := dyn.Resource(deploy.ProbeReports).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ProbeReports: %w", err)
	}
	var out []ProbeReport
	for _, u := range l.Items {
		b, err := json.Marshal(u.Object)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding %s: %w", ErrDecoding, u.GetName(), err)
		}
		var r ProbeReport
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrDecoding, u.GetName(), err)
		}
		r.Name = u.GetName()
		out = append(out, r)
	}
	return out, nil
}

// UpVotes counts the reports saying port of service on node is Up.
func UpVotes(reports []ProbeReport, service string, port int32, node string) int {
	n := 0
	for _, r := range reports {
		for _, res := range r.Status.Results {
			if res.Service == service && res.Port == port && res.Node == node && res.State == "Up" {
				n++
			}
		}
	}
	return n
}

// BeaconsNotUp returns, for each report, the beacons it does not find Up
// ("node-1 on node-2" reads: node-1's prober does not find node-2's beacon
// Up), and the nodes in nodes with no report or no beacon result in one.
// An empty result means every prober finds every other node up: a fault
// before has healed in every vote.
func BeaconsNotUp(reports []ProbeReport, nodes []string) []string {
	var out []string
	byName := map[string]ProbeReport{}
	for _, r := range reports {
		byName[r.Name] = r
	}
	for _, by := range nodes {
		r, ok := byName[by]
		if !ok {
			out = append(out, by+": no report")
			continue
		}
		state := map[string]string{}
		for _, b := range r.Status.Beacons {
			state[b.Node] = b.State
		}
		for _, n := range nodes {
			if n == by {
				continue
			}
			if s := state[n]; s != "Up" {
				out = append(out, fmt.Sprintf("%s on %s: %q", by, n, s))
			}
		}
	}
	return out
}
