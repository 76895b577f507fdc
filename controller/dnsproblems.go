package controller

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/dnsexport"
)

// Reasons of the Warning Events on a Service with a hostname the DNS zone
// does not serve: another Service's already (HostnameConflict), or one it
// never serves, such as a wildcard inside the zone (HostnameNotServed).
const (
	ReasonHostnameConflict  = "HostnameConflict"
	ReasonHostnameNotServed = "HostnameNotServed"
)

// DNSProblemReporter returns the dnsexport.FeedConfig.Report of a
// controller replica: it logs a Service's DNS problems on every replica,
// and while leading reports true it records the hostname conflicts as
// Warning Events, so that N replicas do not record N copies of each.
//
// The feed reports zone problems only: annotation values are parsed once,
// by contract.Parse, and the leader's reconcile turns what it could not use
// into InvalidAnnotation Events and the ConfigValid condition. A hostname
// taken by another Service, or one the zone never serves (a wildcard
// inside the zone), is found only by the zone build, so it is evented
// here; other zone problems (an answer capped) are logged.
func DNSProblemReporter(logger klog.Logger, recorder record.EventRecorder, leading func() bool) func(*corev1.Service, []error) {
	return func(svc *corev1.Service, problems []error) {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
			if !leading() {
				continue
			}
			var hostname *dnsexport.HostnameError
			switch {
			case errors.Is(p, dnsexport.ErrHostnameConflict):
				recorder.Event(svc, corev1.EventTypeWarning, ReasonHostnameConflict, p.Error())
			case errors.As(p, &hostname):
				recorder.Event(svc, corev1.EventTypeWarning, ReasonHostnameNotServed, p.Error())
			}
		}
		logger.Info("Service has DNS problems; serving the rest", "service", klog.KObj(svc), "problems", msgs)
	}
}
