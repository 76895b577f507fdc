// Package v1alpha1 holds pulselb's one custom resource, ProbeReport: what
// one prober node found about the targets and node beacons it is assigned.
// The controller reads every report and decides verdicts by quorum.
//
// +kubebuilder:object:generate=true
// +groupName=pulselb.io
package v1alpha1
