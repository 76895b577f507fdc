package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// State is a prober's conclusion about a target after hysteresis.
// +kubebuilder:validation:Enum=Up;Down
type State string

// States a report carries; targets still Unknown are left out.
const (
	StateUp   State = "Up"
	StateDown State = "Down"
)

// ProbeReport is what the prober on one node found about the targets and
// node beacons assigned to it. Its name is the prober's node name; an
// admission policy lets a prober write only its own node's report. An
// external vantage (`pulselb prober --external`, outside the cluster)
// writes one too, named external-<vantage name> and marked
// status.external, which the admission policy lets only that vantage's
// identity write.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=pr,categories=pulselb
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.targets`
// +kubebuilder:printcolumn:name="Down",type=integer,JSONPath=`.status.down`
// +kubebuilder:printcolumn:name="Beacons",type=integer,JSONPath=`.status.beaconCount`
// +kubebuilder:printcolumn:name="Beacons Down",type=integer,JSONPath=`.status.beaconsDown`
// +kubebuilder:printcolumn:name="External",type=boolean,JSONPath=`.status.external`,priority=1
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ProbeReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is written by the prober; there is no spec.
	// +optional
	Status ProbeReportStatus `json:"status,omitempty"`
}

// ProbeReportStatus is one prober's findings.
type ProbeReportStatus struct {
	// HeartbeatTime is when the prober last wrote the report. A prober
	// with a Lease (pulselb-prober-<node>) writes its report only when it
	// changes and is fresh while its Lease is current; a prober without
	// one rewrites the report every heartbeat interval. Either way a report
	// counts toward verdicts only while its Lease is current or its
	// HeartbeatTime is at most three heartbeat intervals old.
	// +optional
	HeartbeatTime metav1.Time `json:"heartbeatTime,omitempty"`
	// HeartbeatSeconds is the prober's heartbeat interval: how often it
	// renews its Lease, or without one rewrites its report.
	// +optional
	// +kubebuilder:validation:Minimum=1
	HeartbeatSeconds int32 `json:"heartbeatSeconds,omitempty"`
	// External marks the report of an external vantage, a prober outside
	// the cluster that probes the Services' published addresses. Its
	// results judge the path from outside (pulselb.io/external-vantages),
	// never the in-cluster verdicts. Only an external vantage's identity
	// may set it, and it must (admission policy).
	// +optional
	External bool `json:"external,omitempty"`
	// Targets and Down count the results and those Down, for kubectl.
	// +optional
	Targets int32 `json:"targets,omitempty"`
	// +optional
	Down int32 `json:"down,omitempty"`
	// BeaconCount and BeaconsDown count the beacons and those Down.
	// +optional
	BeaconCount int32 `json:"beaconCount,omitempty"`
	// +optional
	BeaconsDown int32 `json:"beaconsDown,omitempty"`
	// Results are the Service port targets assigned to this prober that
	// have a state, sorted by service, node, protocol and port.
	// +optional
	// +listType=atomic
	Results []ProbeResult `json:"results,omitempty"`
	// Beacons are the node beacons assigned to this prober that have a
	// state, sorted by node.
	// +optional
	// +listType=atomic
	Beacons []BeaconResult `json:"beacons,omitempty"`
}

// Observation is what a prober concluded about one target.
type Observation struct {
	// Node is the node the target is on.
	Node string `json:"node"`
	// Address is the probed address, ip:port.
	Address string `json:"address"`
	State   State  `json:"state"`
	// Outcome is the typed outcome of the latest probe, such as L4OK or L7STS.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// Since is when the prober started probing the target.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
	// LastChange is when State last changed.
	// +optional
	LastChange *metav1.Time `json:"lastChange,omitempty"`
	// FailingSince is the time of the first failed probe of the current
	// run of failures; absent while the latest probe succeeded. It lets
	// the controller measure failover time from the first failed probe.
	// +optional
	FailingSince *metav1.Time `json:"failingSince,omitempty"`
	// Latency is the smoothed duration of successful probes.
	// +optional
	Latency *metav1.Duration `json:"latency,omitempty"`
	// Message says why the latest probe failed, or what it saw. It never
	// holds a secret.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message,omitempty"`
	// CertNotAfter is when the leaf certificate the target served expires,
	// as seen by the latest probe that completed a TLS handshake (tls and
	// https probes), whether or not that probe passed its checks. It is
	// absent for other protocols and before the first handshake. Only the
	// expiry is reported, never the certificate itself.
	// +optional
	CertNotAfter *metav1.Time `json:"certNotAfter,omitempty"`
}

// ProbeResult is a prober's conclusion about one Service port on one node.
type ProbeResult struct {
	// Service is namespace/name.
	Service string `json:"service"`
	// Port is the Service port.
	Port int32 `json:"port"`
	// PortProtocol is the port's protocol: TCP, UDP or SCTP.
	// +kubebuilder:default=TCP
	PortProtocol string `json:"portProtocol"`
	// Protocol is the probe protocol: tcp, udp, http, https, tls, mysql or dns.
	Protocol    string `json:"protocol"`
	Observation `json:",inline"`
}

// BeaconResult is a prober's conclusion about one node's beacon, the
// hostPort the prober pod on that node listens on.
type BeaconResult struct {
	Observation `json:",inline"`
}

// ProbeReportList is a list of ProbeReports.
//
// +kubebuilder:object:root=true
type ProbeReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProbeReport `json:"items"`
}
