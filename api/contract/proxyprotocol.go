package contract

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/probespec"
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

// parseProxyProtocol reads proxy-protocol and proxy-protocol.<port>: the
// header version of every served TCP port that sends one.
func parseProxyProtocol(svc *corev1.Service, a map[string]string) (map[PortKey]probespec.ProxyProtocol, []Problem) {
	var problems []Problem
	bad := func(key, reason, def string) {
		problems = append(problems, Problem{Key: key, Value: a[key], Reason: reason, Default: def})
	}
	served := ServedPorts(svc)
	all := probespec.ProxyNone
	if v, ok := a[AnnotationProxyProtocol]; ok {
		pp, err := probespec.ParseProxyProtocol(v)
		switch {
		case err != nil:
			bad(AnnotationProxyProtocol, err.Error(), "no header")
		case !hasTCP(served):
			bad(AnnotationProxyProtocol, "the Service has no TCP port, and "+udpProxyProtocolReason, "no header")
		default:
			all = pp
		}
	}
	out := map[PortKey]probespec.ProxyProtocol{}
	if all != probespec.ProxyNone {
		for _, p := range served {
			if k := PortKeyOf(p); k.Protocol == corev1.ProtocolTCP {
				out[k] = all
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
		pp, err := probespec.ParseProxyProtocol(v)
		if err != nil {
			bad(key, "want v1, v2 or none", def)
			continue
		}
		out[k] = pp
	}
	if len(out) == 0 {
		return nil, problems
	}
	return out, problems
}

// probeKey names the annotation port's probe came from: probe.<name>,
// probe.<number>, or the Service-level probe.
func probeKey(svc *corev1.Service, a map[string]string, port PortKey) string {
	for _, p := range svc.Spec.Ports {
		if PortKeyOf(p) != port {
			continue
		}
		for _, k := range []string{p.Name, strconv.Itoa(int(p.Port))} {
			if _, ok := a[AnnotationProbePrefix+k]; ok && k != "" {
				return AnnotationProbePrefix + k
			}
		}
	}
	return AnnotationProbe
}

func hasTCP(ports []corev1.ServicePort) bool {
	for _, p := range ports {
		if PortKeyOf(p).Protocol == corev1.ProtocolTCP {
			return true
		}
	}
	return false
}

// withoutOwnHeader keeps the probe of a port whose proxies send a PROXY
// protocol header from sending one of its own. The probers probe a
// Service's ports through its proxies, whose relay writes the header on
// the probe's connection like on any other (with the prober's address), so
// the backend that requires it is probed as it is used; a header of the
// probe's own would reach the backend as a second one, read as the start of
// the request. A spec that asks for it is a Problem and loses the option.
func withoutOwnHeader(p Probe, key string) (Probe, *Problem) {
	if p.Spec.ProxyProtocol == probespec.ProxyNone {
		return p, nil
	}
	problem := &Problem{Key: key, Value: p.Text,
		Reason: "the proxies already send a PROXY protocol header on every connection to this port, the probes' included " +
			"(proxy-protocol); the probe's own proxy-protocol= would reach the backend as a second header",
		Default: "the probe without its own header"}
	p.Spec.ProxyProtocol = probespec.ProxyNone
	p.Text = p.Spec.String()
	return p, problem
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
