package dnsexport

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// FromService reads what the zone needs from a Kubernetes Service: the IPs
// of status.loadBalancer.ingress (which pulselb keeps equal to the healthy
// IPs), the ports it serves (contract.ServedPorts: no SRV record names a
// port no proxy forwards), and the hostnames and TTL of its settings
// (contract.Parse: a TTL of 0 means the zone's default). Invalid
// annotation values are not used; the controller reports them, from the
// same parse, as InvalidAnnotation Events.
func FromService(svc *corev1.Service) Service {
	settings, _ := contract.Parse(svc)
	return fromService(svc, settings)
}

// fromService is FromService with svc's settings already parsed.
func fromService(svc *corev1.Service, settings contract.Settings) Service {
	out := Service{Namespace: svc.Namespace, Name: svc.Name, Hostnames: settings.Hostnames, TTL: settings.DNSTTL}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(ing.IP)
		if err != nil {
			// The API server validates ingress IPs; skip what it let through.
			continue
		}
		out.IPs = append(out.IPs, ip.Unmap())
	}
	for _, p := range contract.ServedPorts(svc) {
		out.Ports = append(out.Ports, Port{Name: p.Name, Port: uint16(p.Port), Protocol: string(p.Protocol)})
	}
	return out
}
