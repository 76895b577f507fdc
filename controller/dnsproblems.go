package controller

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/dnsexport"
)

// ReasonHostnameConflict is the reason of the Warning Event on a Service
// whose hostname the DNS zone already serves for another Service.
const ReasonHostnameConflict = "HostnameConflict"

// DNSProblemReporter returns the dnsexport.FeedConfig.Report of a
// controller replica: it logs a Service's DNS problems on every replica,
// and while leading reports true it records the hostname conflicts as
// Warning Events, so that N replicas do not record N copies of each.
//
// The feed reports zone problems only: annotation values are parsed once,
// by contract.Parse, and the leader's reconcile turns what it could not use
// into InvalidAnnotation Events and the ConfigValid condition. A hostname
// taken by another Service is found only by the zone build, so it is
// evented here; other zone problems (a wildcard name that is not served)
// are logged.
func DNSProblemReporter(logger klog.Logger, recorder record.EventRecorder, leading func() bool) func(*corev1.Service, []error) {
	return func(svc *corev1.Service, problems []error) {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
			if leading() && errors.Is(p, dnsexport.ErrHostnameConflict) {
				recorder.Event(svc, corev1.EventTypeWarning, ReasonHostnameConflict, p.Error())
			}
		}
		logger.Info("Service has DNS problems; serving the rest", "service", klog.KObj(svc), "problems", msgs)
	}
}
