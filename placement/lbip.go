package placement

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// loadBalancerIPNode returns the node whose address is the Service's
// spec.loadBalancerIP (deprecated, but still set by charts), and the value
// of its hostname label, to run the Service's one proxy there: pulselb
// publishes node addresses, so that is the only way to honour the field.
// It returns a Problem when the address is set and no node has it, and
// nothing when it is not set.
func loadBalancerIPNode(svc *corev1.Service, nodes []*corev1.Node) (node, hostname string, problem *contract.Problem) {
	want := svc.Spec.LoadBalancerIP
	if want == "" {
		return "", "", nil
	}
	ip, err := netip.ParseAddr(want)
	if err != nil {
		return "", "", &contract.Problem{Key: "spec.loadBalancerIP", Value: want, Reason: "not an IP address",
			Default: "the proxy nodes' own addresses"}
	}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if got, err := netip.ParseAddr(a.Address); err != nil || got.Unmap() != ip.Unmap() {
				continue
			}
			h := n.Labels[corev1.LabelHostname]
			if h == "" {
				return "", "", &contract.Problem{Key: "spec.loadBalancerIP", Value: want,
					Reason:  fmt.Sprintf("the address of node %s, which has no %s label to place a proxy by", n.Name, corev1.LabelHostname),
					Default: "the proxy nodes' own addresses"}
			}
			return n.Name, h, nil
		}
	}
	return "", "", &contract.Problem{Key: "spec.loadBalancerIP", Value: want,
		Reason:  "no node has this address, and pulselb publishes node addresses",
		Default: "the proxy nodes' own addresses"}
}
