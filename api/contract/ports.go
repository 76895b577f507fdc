package contract

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Served reports whether pulselb serves Service port p: forwards it on its
// proxies, probes it, counts it in the verdicts and publishes it (in the
// ingress ports and the SRV records). It is the one rule, and every part
// of pulselb that turns a Service's ports into anything asks it: TCP (the
// API server's default when the protocol is empty) and UDP ports are
// served; SCTP ports are not, as the proxy forwards TCP and UDP only, and a
// port that is not forwarded must not be probed either, or it would be
// Down on every node and take the Service's addresses with it.
func Served(p corev1.ServicePort) bool { return UnservedReason(p) == "" }

// UnservedReason says why p is not Served, or returns "" when it is.
// Placement reports it as a Problem (ConfigValid False and an InvalidSpec
// Event); everything else leaves such a port out silently.
func UnservedReason(p corev1.ServicePort) string {
	switch proto := PortKeyOf(p).Protocol; proto {
	case corev1.ProtocolTCP, corev1.ProtocolUDP:
	default:
		return fmt.Sprintf("pulselb forwards TCP and UDP only, so this %s port is neither forwarded nor probed", proto)
	}
	if p.Port <= 0 || p.Port > 65535 {
		// The API server never lets such a port through.
		return "not a port number"
	}
	return ""
}

// ServedPorts returns the ports of svc that are Served, in the order of
// spec.ports.
func ServedPorts(svc *corev1.Service) []corev1.ServicePort {
	var out []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		if Served(p) {
			out = append(out, p)
		}
	}
	return out
}
