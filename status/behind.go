package status

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionBackendsReachable says whether a Service's ports fail behind
// its proxies: the same port failing through several proxy nodes whose
// beacons are Up, or while an endpoint runs on a node judged failed. Such a
// fault is not a proxy node's, and failing over between nodes that share
// it would only churn the status; the condition says why the addresses
// stay. It appears with the first such fault and stays afterwards.
const ConditionBackendsReachable = "pulselb.io/BackendsReachable"

// Reasons of ConditionBackendsReachable and of its Events.
const (
	ReasonBackendsReachable = "BackendsReachable"
	ReasonFaultBehind       = "FaultBehindProxies"
)

// BehindProxies is a fault behind a Service's proxies.
type BehindProxies struct {
	// Ports are the ports failing behind the proxies, such as "TCP/80",
	// sorted.
	Ports []string
	// Endpoints name the endpoints on nodes judged failed, such as
	// "pod shop/web-7d9f-abcde on node-4", sorted; empty when no endpoint
	// is known to be unreachable.
	Endpoints []string
}

// behindCondition returns the BackendsReachable condition: False while b
// says a fault is behind the proxies, True once it is over; nil for a
// Service that never had one.
func behindCondition(svc *corev1.Service, b *BehindProxies) *metav1.Condition {
	if b == nil {
		if findCondition(svc.Status.Conditions, ConditionBackendsReachable) == nil {
			return nil
		}
		return &metav1.Condition{Type: ConditionBackendsReachable, Status: metav1.ConditionTrue, Reason: ReasonBackendsReachable,
			Message: "no port fails behind the proxies"}
	}
	verb := " fails"
	if len(b.Ports) > 1 {
		verb = " fail"
	}
	msg := strings.Join(b.Ports, ", ") + verb + " through the proxies on nodes that are up, so the fault is behind the proxies " +
		"(a backend or the path to it) and the proxies' addresses stay published"
	if len(b.Endpoints) > 0 {
		msg += "; endpoints on failed nodes: " + strings.Join(b.Endpoints, ", ")
	}
	return &metav1.Condition{Type: ConditionBackendsReachable, Status: metav1.ConditionFalse, Reason: ReasonFaultBehind, Message: msg}
}

// behindEvents warns when a fault behind the proxies begins or what it
// names changes, and says when it is over.
func behindEvents(old []metav1.Condition, now *metav1.Condition) []Event {
	if now == nil {
		return nil
	}
	o := findCondition(old, ConditionBackendsReachable)
	switch {
	case now.Status == metav1.ConditionFalse && (o == nil || o.Status != now.Status || o.Message != now.Message):
		return []Event{{Type: corev1.EventTypeWarning, Reason: ReasonFaultBehind, Message: now.Message}}
	case now.Status == metav1.ConditionTrue && o != nil && o.Status == metav1.ConditionFalse:
		return []Event{{Type: corev1.EventTypeNormal, Reason: ReasonBackendsReachable, Message: "the ports fail behind the proxies no more"}}
	}
	return nil
}
