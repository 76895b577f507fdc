// Package conformance runs Kubernetes' own LoadBalancer e2e specs (the
// upstream e2e.test binary of the harness' Kubernetes version, unmodified,
// with the provider "skeleton") against pulselb installed from deploy/base
// on real kubelet nodes, one spec at a time, and reports each spec's
// outcome. See docs/conformance.md.
package conformance

import (
	"regexp"
	"slices"
	"strings"
)

// Spec is one upstream spec: its container and its own text, as
// `e2e.test --ginkgo.dry-run` lists them.
type Spec struct {
	// Container is the text of the Describe blocks, e.g. "[sig-network]
	// LoadBalancers [Feature:LoadBalancer]".
	Container string
	// Text is the spec's own text without its labels.
	Text string
	// Quick marks the specs that finish in a few minutes on this harness;
	// `make test` runs those, `make conformance` every spec.
	Quick bool
	// Long marks the specs that take a quarter of an hour when they pass
	// (five rolling updates of a DaemonSet with a 60 s grace period under
	// traffic); Select puts them last.
	Long bool
}

// Name is the spec's full name.
func (s Spec) Name() string { return s.Container + " " + s.Text }

// Focus is the --ginkgo.focus regular expression that selects s alone.
func (s Spec) Focus() string {
	return regexp.QuoteMeta(s.Container) + ".*" + regexp.QuoteMeta(s.Text) + `( \[|$)`
}

const (
	lb   = "[sig-network] LoadBalancers [Feature:LoadBalancer]"
	esip = "[sig-network] LoadBalancers ExternalTrafficPolicy: Local [Feature:LoadBalancer]"
)

// Specs are the 17 [Feature:LoadBalancer] specs of Kubernetes v1.37, in the
// order of test/e2e/network/loadbalancer.go.
var Specs = []Spec{
	{Container: lb, Text: "should be able to change the type and ports of a TCP service"},
	{Container: lb, Text: "should be able to change the type and ports of a UDP service"},
	{Container: lb, Text: "should only allow access from service loadbalancer source ranges"},
	{Container: lb, Text: "should have session affinity work for LoadBalancer service with Local traffic policy", Quick: true},
	{Container: lb, Text: "should be able to switch session affinity for LoadBalancer service with Local traffic policy", Quick: true},
	{Container: lb, Text: "should have session affinity work for LoadBalancer service with Cluster traffic policy", Quick: true},
	{Container: lb, Text: "should be able to switch session affinity for LoadBalancer service with Cluster traffic policy", Quick: true},
	{Container: lb, Text: "should handle load balancer cleanup finalizer for service"},
	{Container: lb, Text: "should be able to create LoadBalancer Service without NodePort and change it", Quick: true},
	{Container: lb, Text: "should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on different nodes", Quick: true},
	{Container: lb, Text: "should be able to preserve UDP traffic when server pod cycles for a LoadBalancer service on the same nodes", Quick: true},
	{Container: lb, Text: "should not have connectivity disruption during rolling update with externalTrafficPolicy=Cluster", Long: true},
	{Container: lb, Text: "should not have connectivity disruption during rolling update with externalTrafficPolicy=Local", Long: true},
	{Container: esip, Text: "should work for type=LoadBalancer"},
	{Container: esip, Text: "should only target nodes with endpoints"},
	{Container: esip, Text: "should target all nodes with endpoints"},
	{Container: esip, Text: "should work from pods"},
}

// Select returns the specs whose name matches focus (every spec when
// focus is empty) and not skip (when skip is set), and only the quick ones
// when quick is set, in the order of Specs with the long ones last.
func Select(focus, skip string, quick bool) ([]Spec, error) {
	f, err := regexp.Compile(focus)
	if err != nil {
		return nil, err
	}
	k, err := regexp.Compile(skip)
	if err != nil {
		return nil, err
	}
	var out []Spec
	for _, s := range Specs {
		if f.MatchString(s.Name()) && (skip == "" || !k.MatchString(s.Name())) && (!quick || s.Quick) {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b Spec) int {
		switch {
		case a.Long == b.Long:
			return 0
		case a.Long:
			return 1
		}
		return -1
	})
	return out, nil
}

// shortName is the spec's text without the "should " every one starts with.
func (s Spec) shortName() string { return strings.TrimPrefix(s.Text, "should ") }
