package dnsexport

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotations read from a Service.
const (
	AnnotationHostname            = "pulselb.io/hostname"
	AnnotationExternalDNSHostname = "external-dns.kubernetes.io/hostname"
	// AnnotationExternalDNSAlphaHostname is external-dns' older spelling.
	AnnotationExternalDNSAlphaHostname = "external-dns.alpha.kubernetes.io/hostname"
	AnnotationTTL                      = "pulselb.io/dns-ttl"
)

// MaxTTL is the largest pulselb.io/dns-ttl accepted (one day): the records
// follow health, so a long TTL defeats their purpose.
const MaxTTL = 86400

// ErrInvalidAnnotation is wrapped by every *AnnotationError.
var ErrInvalidAnnotation = errors.New("invalid annotation")

// AnnotationError says which annotation value was not used, and why; the
// controller turns it into an InvalidAnnotation Event.
type AnnotationError struct {
	Key, Value, Reason string
}

// Error implements error.
func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q: %s", e.Key, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidAnnotation) true.
func (e *AnnotationError) Is(target error) bool { return target == ErrInvalidAnnotation }

// FromService reads what the zone needs from a Kubernetes Service: the IPs
// of status.loadBalancer.ingress (which pulselb keeps equal to the healthy
// IPs), the ports, the hostnames of the hostname annotations
// (comma-separated), and the TTL of pulselb.io/dns-ttl (0 when unset, for
// the zone's default). An invalid annotation value is skipped (the TTL
// falls back to the default) and reported as an *AnnotationError; the
// rest is still used.
func FromService(svc *corev1.Service) (Service, []error) {
	out := Service{Namespace: svc.Namespace, Name: svc.Name}
	var errs []error
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
	for _, p := range svc.Spec.Ports {
		if p.Port <= 0 || p.Port > 65535 {
			continue
		}
		out.Ports = append(out.Ports, Port{Name: p.Name, Port: uint16(p.Port), Protocol: string(p.Protocol)})
	}
	seen := map[string]bool{}
	for _, key := range []string{AnnotationHostname, AnnotationExternalDNSHostname, AnnotationExternalDNSAlphaHostname} {
		value, ok := svc.Annotations[key]
		if !ok {
			continue
		}
		for _, h := range strings.Split(value, ",") {
			h = strings.TrimSpace(h)
			if h == "" {
				continue
			}
			name, err := canonicalName(h)
			if err != nil {
				errs = append(errs, &AnnotationError{Key: key, Value: value, Reason: fmt.Sprintf("%q: %v", h, err)})
				continue
			}
			name = strings.TrimSuffix(name, ".")
			if !seen[name] {
				seen[name] = true
				out.Hostnames = append(out.Hostnames, name)
			}
		}
	}
	if value, ok := svc.Annotations[AnnotationTTL]; ok {
		ttl, err := parseTTL(value)
		if err != nil {
			errs = append(errs, &AnnotationError{Key: AnnotationTTL, Value: value, Reason: err.Error() + "; using the default"})
		} else {
			out.TTL = ttl
		}
	}
	return out, errs
}

// parseTTL accepts whole seconds, with or without an "s" suffix.
func parseTTL(v string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), "s"), 10, 32)
	switch {
	case err != nil:
		return 0, errors.New("not a whole number of seconds")
	case n == 0:
		return 0, errors.New("must be at least 1")
	case n > MaxTTL:
		return 0, fmt.Errorf("must be at most %d", MaxTTL)
	}
	return uint32(n), nil
}
