package contract

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/prober"
)

// AnnotationProxyProtocol makes the proxies send a PROXY protocol header
// with the client's address in front of every connection to the backend:
// "v1" or "v2" for every TCP port of the Service, or, with
// AnnotationProxyProtocolPrefix and a port name or number, for one port
// ("none" there exempts a port from the Service-level value).
const (
	AnnotationProxyProtocol       = Prefix + "proxy-protocol"
	AnnotationProxyProtocolPrefix = Prefix + "proxy-protocol."
)

// ProxyProtocolNone is the per-port value that sends no header.
const ProxyProtocolNone = "none"

// udpProxyProtocolReason says why a UDP port cannot have the annotation.
const udpProxyProtocolReason = "the PROXY protocol is for TCP ports only: its header goes in front of a connection's byte stream, " +
	"and a UDP datagram has no stream for it (UDP backends such as DNS servers read none)"

// ppChoice is a port's header version and the annotation that chose it.
type ppChoice struct {
	version prober.ProxyProtocol
	key     string
}

// parseProxyProtocol reads proxy-protocol and proxy-protocol.<port>: the
// header version of every served TCP port that sends one.
func parseProxyProtocol(svc *corev1.Service, a map[string]string) (map[PortKey]ppChoice, []Problem) {
	var problems []Problem
	bad := func(key, reason, def string) {
		problems = append(problems, Problem{Key: key, Value: a[key], Reason: reason, Default: def})
	}
	served := ServedPorts(svc)
	all := prober.ProxyNone
	if v, ok := a[AnnotationProxyProtocol]; ok {
		pp, err := prober.ParseProxyProtocol(v)
		switch {
		case err != nil:
			bad(AnnotationProxyProtocol, err.Error(), "no header")
		case !hasTCP(served):
			bad(AnnotationProxyProtocol, "the Service has no TCP port, and "+udpProxyProtocolReason, "no header")
		default:
			all = pp
		}
	}
	out := map[PortKey]ppChoice{}
	if all != prober.ProxyNone {
		for _, p := range served {
			if k := PortKeyOf(p); k.Protocol == corev1.ProtocolTCP {
				out[k] = ppChoice{all, AnnotationProxyProtocol}
			}
		}
	}
	ports := map[string]corev1.ServicePort{}
	for _, p := range svc.Spec.Ports {
		ports[strconv.Itoa(int(p.Port))] = p
		if p.Name != "" {
			ports[p.Name] = p
		}
	}
	var keys []string
	for k := range a {
		if strings.HasPrefix(k, AnnotationProxyProtocolPrefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	def := "the Service-level " + AnnotationProxyProtocol + " (" + all.String() + ")"
	for _, key := range keys {
		v, name := a[key], strings.TrimPrefix(key, AnnotationProxyProtocolPrefix)
		port, ok := ports[name]
		if !ok {
			bad(key, fmt.Sprintf("the Service has no port named or numbered %q", name), "nothing (ignored)")
			continue
		}
		if reason := UnservedReason(port); reason != "" {
			bad(key, reason, "nothing (ignored)")
			continue
		}
		k := PortKeyOf(port)
		if k.Protocol != corev1.ProtocolTCP {
			bad(key, udpProxyProtocolReason, "no header")
			continue
		}
		if v == ProxyProtocolNone {
			delete(out, k)
			continue
		}
		pp, err := prober.ParseProxyProtocol(v)
		if err != nil {
			bad(key, "want v1, v2 or none", def)
			continue
		}
		out[k] = ppChoice{pp, key}
	}
	if len(out) == 0 {
		return nil, problems
	}
	return out, problems
}

func hasTCP(ports []corev1.ServicePort) bool {
	for _, p := range ports {
		if PortKeyOf(p).Protocol == corev1.ProtocolTCP {
			return true
		}
	}
	return false
}

// withProxyProtocol makes the probe of a port whose proxies send a PROXY
// protocol header send one too: the backend behind such a port drops a
// bare connection, so a probe without it would find every node down. A
// spec that sets proxy-protocol= itself keeps its own. It returns a
// Problem when the probe's protocol cannot send a header.
func withProxyProtocol(p Probe, pp prober.ProxyProtocol, key string) (Probe, *Problem) {
	if pp == prober.ProxyNone || p.Spec.ProxyProtocol != prober.ProxyNone {
		return p, nil
	}
	if !prober.TakesProxyProtocol(p.Spec.Protocol) {
		return p, &Problem{Key: key, Value: pp.String(),
			Reason:  fmt.Sprintf("the port's %s probe cannot send a PROXY protocol header, so it probes the backend with a bare connection, which a backend that requires the header drops", p.Spec.Protocol),
			Default: "the header on the proxies' connections; the probe without one"}
	}
	p.Spec.ProxyProtocol = pp
	p.Text = p.Spec.String()
	return p, nil
}

// DataPaths says which way each served port of svc takes through its
// proxies when any port sends a PROXY protocol header, for the Service's
// pulselb.io/ConfigValid condition: such ports always go through the
// proxy's userspace relay, which writes the header; the others go through
// iptables DNAT rules (or the relay, when a proxy runs in userspace mode).
// It returns "" when no port sends a header: every port then takes the
// proxy's one mode.
func (s Settings) DataPaths(svc *corev1.Service) string {
	if len(s.ProxyProtocol) == 0 {
		return ""
	}
	var relayed, ruled []string
	for _, p := range ServedPorts(svc) {
		k := PortKeyOf(p)
		name := fmt.Sprintf("%s:%d", k.Protocol, k.Port)
		if v, ok := s.ProxyProtocol[k]; ok {
			relayed = append(relayed, name+" with a PROXY protocol "+v.String()+" header")
		} else {
			ruled = append(ruled, name)
		}
	}
	out := "the userspace relay carries " + strings.Join(relayed, ", ")
	if len(ruled) > 0 {
		out += "; iptables rules carry " + strings.Join(ruled, ", ") + " (the relay, when a proxy runs in userspace mode)"
	}
	return out
}
