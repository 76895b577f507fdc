// Package dashboard serves pulselb's read-only health view: an HTML page at
// "/", the same data as JSON at /api/v1/state, and live updates as
// server-sent events. The controller and standalone mode both feed it a
// State; it never reads secrets and shows nothing a State does not carry.
package dashboard

import "time"

// State is everything the dashboard shows, and the JSON document served at
// /api/v1/state. Producers build a fresh State and hand it to
// Dashboard.Update; the dashboard never changes one it was given.
type State struct {
	// Role is "controller" or "standalone".
	Role string `json:"role"`
	// Instance names the process serving the page: the controller pod or
	// the standalone instance's name.
	Instance string `json:"instance,omitempty"`
	// GeneratedAt is when the producer built this State.
	GeneratedAt time.Time `json:"generatedAt"`
	// Vantages are the probing nodes or instances, sorted; the columns of
	// the vantage × target matrix.
	Vantages []string `json:"vantages"`
	// ExternalVantages are the external vantages (probing the published
	// addresses from outside the cluster), sorted; their own columns of the
	// matrix, after Vantages.
	ExternalVantages []string `json:"externalVantages,omitempty"`
	// Services are sorted by Name.
	Services []Service `json:"services"`
	// Transitions are the most recent target and node state changes,
	// newest first; producers keep at most MaxTransitions.
	Transitions []Transition `json:"transitions"`
}

// MaxTransitions bounds State.Transitions.
const MaxTransitions = 200

// Service is one load-balanced service.
type Service struct {
	// Name is "namespace/name" in a cluster, the configured name standalone.
	Name string `json:"name"`
	// DNSNames are the names the DNS server answers for it.
	DNSNames []string `json:"dnsNames,omitempty"`
	// Published are the addresses currently published (status ingress, DNS
	// answer), in their published order.
	Published []string `json:"published"`
	// PublishedNodes are the nodes or hosts whose addresses are published,
	// sorted. The history matches a failover to the targets of the nodes
	// that left it; without it, to those of the addresses that left.
	PublishedNodes []string `json:"publishedNodes,omitempty"`
	// Healthy is false when no address is healthy; AllDown says which
	// policy was applied then ("publish-all" or "publish-none").
	Healthy bool   `json:"healthy"`
	AllDown string `json:"allDown,omitempty"`
	// Targets are sorted by Node, Address, then Port.
	Targets []Target `json:"targets"`
}

// Target is one probed address:port of a service on one node or host.
type Target struct {
	Node     string `json:"node"`
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // TCP or UDP
	// Probe is the canonical probe spec (probespec.Spec.String); specs carry no
	// secret values, only Secret names.
	Probe string `json:"probe"`
	// State is the verdict: "Up", "Down" or "Unknown".
	State string    `json:"state"`
	Since time.Time `json:"since,omitzero"`
	// Reason explains the verdict, such as "down by 2 of 3 probers:
	// L4CON connection refused".
	Reason string `json:"reason,omitempty"`
	// Flapping is true while a Down verdict is held by flap damping
	// although a majority of probers says Up.
	Flapping bool `json:"flapping,omitempty"`
	// FailingSince is the first failed probe of the failures that made
	// the verdict Down (the earliest among the Down votes); zero unless
	// Down. A failover's duration is measured from it.
	FailingSince time.Time `json:"failingSince,omitzero"`
	// Vantages are the results of each assigned vantage, sorted by Vantage.
	Vantages []VantageResult `json:"vantages"`
	// CertNotAfter is the earliest expiry of the served leaf certificate
	// seen by a TLS or HTTPS probe.
	CertNotAfter time.Time `json:"certNotAfter,omitzero"`
}

// VantageResult is one vantage's view of a target.
type VantageResult struct {
	Vantage string `json:"vantage"`
	// External marks an external vantage's result: it probed the published
	// address from outside the cluster, and takes no part in the verdict.
	External bool `json:"external,omitempty"`
	// State is "Up", "Down" or "Unknown".
	State string `json:"state"`
	// Outcome is the last probe's typed outcome, such as L7OK or L4TOUT.
	Outcome string `json:"outcome,omitempty"`
	// LatencySeconds is the last probe's total time.
	LatencySeconds float64   `json:"latencySeconds"`
	Message        string    `json:"message,omitempty"`
	LastChange     time.Time `json:"lastChange,omitzero"`
	// Stale is true when the vantage's report is too old to count.
	Stale bool `json:"stale,omitempty"`
}

// Transition is one state change of a target's verdict, or of a node.
type Transition struct {
	Time    time.Time `json:"time"`
	Service string    `json:"service,omitempty"` // empty for a node transition
	Node    string    `json:"node"`
	Address string    `json:"address,omitempty"`
	Port    int       `json:"port,omitempty"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason,omitempty"`
}
