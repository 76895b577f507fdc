// Package contract owns pulselb's API contract with a user's Services:
// the pulselb.io/ annotation keys and their value vocabulary, the one
// parser that turns a Service into typed Settings (with a Problem for
// every value it could not use), which Services pulselb serves, the labels
// on proxy and prober workloads and on nodes, the hostname rule, the keys
// that name probe targets and node beacons, which probers probe a target
// (Vantages), and a prober's heartbeat. The controller, placement, status,
// dnsexport and the prober agent all read a Service through it, so what
// one of them accepts is what the others serve. Like everything in api/,
// it imports nothing of pulselb's outside api/.
package contract

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Class is the spec.loadBalancerClass pulselb serves.
const Class = "pulselb.io/node-proxy"

// Selection says which Services pulselb serves: LoadBalancer Services of
// Class, and those without a class unless ClassOnly (--class-only).
type Selection struct {
	ClassOnly bool
}

// Serves reports whether svc is pulselb's: type LoadBalancer with Class,
// or with no class unless s.ClassOnly. A Service of another class is never
// touched. A Service being deleted is still served, so that the controller
// removes its proxies; Active leaves it out.
func (s Selection) Serves(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return !s.ClassOnly
	}
	return *svc.Spec.LoadBalancerClass == Class
}

// Active reports whether svc is served (Serves) and not being deleted: the
// one filter for what is probed, published in DNS, shown and restarted.
func (s Selection) Active(svc *corev1.Service) bool {
	return svc.DeletionTimestamp == nil && s.Serves(svc)
}

// PortKey names a Service port by protocol and number.
type PortKey struct {
	Protocol corev1.Protocol
	Port     int32
}

// PortKeyOf returns p's key; a port without a protocol is TCP, as the API
// server defaults it.
func PortKeyOf(p corev1.ServicePort) PortKey {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return PortKey{Protocol: proto, Port: p.Port}
}

// TargetKey names a Service port on a node, the unit of vantage assignment
// and of verdicts: "namespace/name:PROTOCOL/port@node". Every prober and
// the controller compute the same key; standalone mode names its own
// targets the same way with its service and host names.
func TargetKey(service, portProtocol string, port int32, node string) string {
	if portProtocol == "" {
		portProtocol = string(corev1.ProtocolTCP)
	}
	return service + ":" + portProtocol + "/" + strconv.Itoa(int(port)) + "@" + node
}

// BeaconKey names the beacon of node.
func BeaconKey(node string) string { return "beacon@" + node }

// TargetKey names port k of service on node (see the function TargetKey).
func (k PortKey) TargetKey(service, node string) string {
	return TargetKey(service, string(k.Protocol), k.Port, node)
}
