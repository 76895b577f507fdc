package contract

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The one target list. The controller judges the targets and the prober
// agents probe them, so both must list the same ones: a target one probes
// and the other does not judge is wasted, and one judged but never probed
// stays Unknown. Targets decides every detail once, and says why each
// proxy or port it leaves out is left out (Excluded).

// TargetInput is what the targets are listed from: the informer caches'
// objects, and how to read a Service and its settings.
type TargetInput struct {
	// Selection says which Services are probed: the Active ones.
	Selection Selection
	// Service returns a Service by name, false when there is none.
	Service func(types.NamespacedName) (*corev1.Service, bool)
	// Settings returns a Service's settings: ParseCache.Parse, so that a
	// Service is parsed once per change, not once per listing.
	Settings func(*corev1.Service) Settings
	// Nodes are every node; Probers the prober pods; Proxies the proxy
	// pods, of every Service.
	Nodes            []*corev1.Node
	Probers, Proxies []*corev1.Pod
	// Vantages is how many probers probe each target, Memo where their
	// assignment is remembered between listings (nil: not remembered).
	Vantages int
	Memo     *VantageMemo
}

// Targets are the beacons and Service ports to probe and judge.
type Targets struct {
	// Candidates are the probers that may be vantages (Candidates).
	Candidates []Vantage
	// Beacons are the node beacons, one per node with a prober pod
	// (BeaconNodes) and an address.
	Beacons []BeaconTarget
	// Ports are the Service ports, one per Service, port and node,
	// whatever the number of proxy pods serving it there.
	Ports []PortTarget
	// Excluded are the proxy pods and ports left out, each with why.
	Excluded []Excluded
}

// BeaconTarget is a node's beacon.
type BeaconTarget struct {
	Key, Node, Zone string
	// Addr is the node's address (NodeAddress).
	Addr     netip.Addr
	Vantages []string
}

// PortTarget is one port of a Service on one node that runs a proxy of it.
type PortTarget struct {
	// Key is TargetKey: one verdict per port and node, whatever the
	// families it is probed in.
	Key     string
	Service *corev1.Service
	// Probe is how the port is probed (Settings.Probes).
	Probe      Probe
	Node, Zone string
	// Addrs are the node's addresses the port is probed on: one per
	// family the Service has (spec.ipFamilies, in its order) that the node
	// has an address of, else the node's address (NodeAddress). Each is
	// probed as a target of its own (AddrKey); a vantage reports each, and
	// the worse of them counts for Key.
	Addrs []netip.Addr
	// Pods are the proxy pods serving the port on Node.
	Pods     []*corev1.Pod
	Vantages []string
}

// AddrKey returns the key the prober's scheduler gives the probe of
// t.Addrs[i]: Key for the first family, Key|address for the next.
func (t PortTarget) AddrKey(i int) string {
	if i == 0 {
		return t.Key
	}
	return t.Key + "|" + t.Addrs[i].String()
}

// Excluded is a proxy pod, or one port of it, that Targets leaves out.
type Excluded struct {
	// Pod is the proxy pod, "namespace/name".
	Pod string
	// Service is the Service the pod belongs to, zero when its labels
	// name none.
	Service types.NamespacedName
	Node    string
	// Port is the port left out, zero when the whole pod is.
	Port   PortKey
	Reason ExcludedReason
}

// ExcludedReason says why a proxy pod or port is not a target.
type ExcludedReason string

// Why Targets leaves a proxy pod or port out.
const (
	// ExcludedNotScheduled: the pod has no node yet.
	ExcludedNotScheduled ExcludedReason = "notScheduled"
	// ExcludedPodDeleting: the pod is terminating; it left the status at
	// once and forwards only for its drain delay.
	ExcludedPodDeleting ExcludedReason = "podDeleting"
	// ExcludedNoService: its labels name no Service, or one that does not
	// exist (any more).
	ExcludedNoService ExcludedReason = "noService"
	// ExcludedNotServed: its Service is not one pulselb serves (class,
	// type, --class-only).
	ExcludedNotServed ExcludedReason = "notServed"
	// ExcludedServiceDeleting: its Service is being deleted; its sync
	// removes the workload, and nothing of it is published any more.
	ExcludedServiceDeleting ExcludedReason = "serviceDeleting"
	// ExcludedNoAddress: its node has no address to probe it on.
	ExcludedNoAddress ExcludedReason = "nodeWithoutAddress"
	// ExcludedPortNotHeld: the pod does not hold the port as a host port
	// (a proxy from before a port change, which its rollout replaces).
	ExcludedPortNotHeld ExcludedReason = "portNotHeld"
	// ExcludedPortOutOfRange: the port is not one a socket can be
	// opened on (1-65535).
	ExcludedPortOutOfRange ExcludedReason = "portOutOfRange"
)

// ListTargets returns the targets of in: the beacon of every node with a
// prober pod, ready or not (BeaconNodes), that has an address, and every served port (Settings.Probes)
// of every Active Service on each node running one of its proxy pods that
// holds the port, with their vantages. It reads nothing but in.
func ListTargets(in TargetInput) Targets {
	ready := make(map[string]bool, len(in.Nodes))
	zone := make(map[string]string, len(in.Nodes))
	byName := make(map[string]*corev1.Node, len(in.Nodes))
	for _, n := range in.Nodes {
		byName[n.Name] = n
		zone[n.Name] = n.Labels[corev1.LabelTopologyZone]
		ready[n.Name] = NodeReady(n)
	}
	var out Targets
	out.Candidates = Candidates(in.Probers, ready, zone)
	memo := in.Memo
	if memo == nil {
		memo = &VantageMemo{}
	}
	vantages := memo.For(out.Candidates, in.Vantages)
	addr := func(node string) netip.Addr {
		if n := byName[node]; n != nil {
			return NodeAddress(n, "")
		}
		return netip.Addr{}
	}
	for _, v := range BeaconNodes(in.Probers, ready, zone) {
		// A node has an address unless its status is being written: no
		// prober can reach its beacon then.
		if a := addr(v.Node); a.IsValid() {
			key := BeaconKey(v.Node)
			out.Beacons = append(out.Beacons, BeaconTarget{Key: key, Node: v.Node, Zone: v.Zone, Addr: a, Vantages: vantages(key, v.Node, v.Zone)})
		}
	}

	seen := map[string]int{}
	settings := map[types.NamespacedName]Settings{}
	for _, p := range in.Proxies {
		ex := Excluded{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName}
		name, named := ServiceOf(p.Labels)
		ex.Service = name
		var svc *corev1.Service
		if named {
			svc, named = in.Service(name)
		}
		switch {
		case p.Spec.NodeName == "":
			ex.Reason = ExcludedNotScheduled
		case p.DeletionTimestamp != nil:
			ex.Reason = ExcludedPodDeleting
		case !named:
			ex.Reason = ExcludedNoService
		case !in.Selection.Serves(svc):
			ex.Reason = ExcludedNotServed
		case !in.Selection.Active(svc):
			ex.Reason = ExcludedServiceDeleting
		case !addr(p.Spec.NodeName).IsValid():
			ex.Reason = ExcludedNoAddress
		}
		if ex.Reason != "" {
			out.Excluded = append(out.Excluded, ex)
			continue
		}
		s, ok := settings[name]
		if !ok {
			s = in.Settings(svc)
			settings[name] = s
		}
		node := p.Spec.NodeName
		held := HostPorts(p)
		for _, pr := range s.Probes {
			ex.Port = pr.Port
			switch {
			case pr.Port.Port <= 0 || pr.Port.Port > 65535:
				ex.Reason = ExcludedPortOutOfRange
			case len(held) > 0 && !slices.Contains(held, pr.Port):
				ex.Reason = ExcludedPortNotHeld
			default:
				ex.Reason = ""
			}
			if ex.Reason != "" {
				out.Excluded = append(out.Excluded, ex)
				continue
			}
			key := pr.Port.TargetKey(name.String(), node)
			if i, ok := seen[key]; ok {
				out.Ports[i].Pods = append(out.Ports[i].Pods, p)
				continue
			}
			seen[key] = len(out.Ports)
			out.Ports = append(out.Ports, PortTarget{Key: key, Service: svc, Probe: pr, Node: node, Zone: zone[node],
				Addrs: FamilyAddrs(byName[node], svc.Spec.IPFamilies), Pods: []*corev1.Pod{p},
				Vantages: vantages(key, node, zone[node])})
		}
	}
	return out
}

// HostPorts returns the host ports proxy pod p holds, as its template
// does for each served port of its Service when it was made.
func HostPorts(p *corev1.Pod) []PortKey {
	var out []PortKey
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.HostPort == 0 {
				continue
			}
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out = append(out, PortKey{Protocol: proto, Port: cp.HostPort})
		}
	}
	return out
}

// NodeAddress is the address probers use for node n within family (any
// when family is empty): its first InternalIP, else its first ExternalIP;
// the zero Addr when it has none.
func NodeAddress(n *corev1.Node, family corev1.IPFamily) netip.Addr {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || a.Type != t {
				continue
			}
			ip = ip.Unmap()
			if family == "" || (family == corev1.IPv4Protocol) == ip.Is4() {
				return ip
			}
		}
	}
	return netip.Addr{}
}

// FamilyAddrs returns the addresses a Service port on node n is probed
// on: n's address in each of families, in their order (those n has), or
// n's address (NodeAddress) when families is empty (a Service written
// before dual-stack) or n has none of them.
func FamilyAddrs(n *corev1.Node, families []corev1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, f := range families {
		if ip := NodeAddress(n, f); ip.IsValid() {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		out = []netip.Addr{NodeAddress(n, "")}
	}
	return out
}
