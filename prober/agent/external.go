package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/report"
)

// externalTargets returns an external vantage's targets: for every served
// Service whose external-vantages is not off, each of its published
// addresses (status ingress IPs, then the addresses held out as
// unreachable from outside, which must be probed to come back) on each of
// its ports, with its probe specs. A target is keyed by the node the
// address belongs to, like an in-cluster prober's, so the controller
// judges both alike; a node with several published addresses is probed on
// the first, and an address of no node is skipped.
func (a *Agent) externalTargets(ctx context.Context) ([]prober.Target, map[string]report.Target, error) {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodeOf := map[netip.Addr]string{}
	for _, n := range nodes {
		for _, addr := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(addr.Address); err == nil && (addr.Type == corev1.NodeExternalIP || addr.Type == corev1.NodeInternalIP) {
				nodeOf[ip.Unmap()] = n.Name
			}
		}
	}
	services, err := a.services.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing services: %w", err)
	}
	var out []prober.Target
	meta := map[string]report.Target{}
	for _, svc := range services {
		if !a.cfg.Services.Active(svc) {
			continue
		}
		settings, _ := a.parsed.Parse(svc) // the controller reports the problems
		if settings.ExternalVantages == contract.ExternalOff {
			continue
		}
		name := svc.Namespace + "/" + svc.Name
		for node, ip := range publishedAddrs(svc, nodeOf) {
			for _, pr := range settings.Probes {
				port := pr.Port
				key := contract.TargetKey(name, string(port.Protocol), port.Port, node)
				if port.Port <= 0 || port.Port > 65535 {
					continue
				}
				p, err := a.prober(key, pr.Text, svc.Namespace, ip)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, prober.Target{Key: key, Addr: netip.AddrPortFrom(ip, uint16(port.Port)), Protocol: pr.Spec.Protocol, Prober: p,
					Interval: pr.Interval, Timeout: pr.Timeout, Rise: pr.Rise, Fall: pr.Fall})
				meta[key] = report.Target{Service: name, Port: port.Port, PortProtocol: string(port.Protocol), Protocol: pr.Spec.Protocol, Node: node}
			}
		}
	}
	return out, meta, nil
}

// publishedAddrs returns, by node, the first address of svc's that belongs
// to the node: its status ingress IPs in order, then those of its
// pulselb.io/external-unreachable annotation.
func publishedAddrs(svc *corev1.Service, nodeOf map[netip.Addr]string) map[string]netip.Addr {
	var addrs []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		addrs = append(addrs, in.IP)
	}
	if v := svc.Annotations[contract.AnnotationExternalUnreachable]; v != "" {
		addrs = append(addrs, strings.Split(v, ",")...)
	}
	out := map[string]netip.Addr{}
	for _, s := range addrs {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		ip = ip.Unmap()
		node, ok := nodeOf[ip]
		if !ok {
			continue
		}
		if _, seen := out[node]; !seen {
			out[node] = ip
		}
	}
	return out
}
