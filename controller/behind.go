package controller

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
)

// A fault behind the proxies: a backend, or the path from the nodes to it,
// fails, so connections through every proxy fail alike (kube-proxy sends
// each to any endpoint, the one that cannot answer included). The proxy
// nodes' ports then go Down by quorum one after another, at random, and
// failing over between nodes that share the fault only churns the status,
// every DNS record that follows it, and restarts healthy proxies. A port's
// fault is behind the proxies when its node's beacon is Up and
//   - an endpoint of the Service runs on a node whose beacon is Down (the
//     endpoint named in the condition), and some other endpoint does not;
//     or
//   - the port also failed, within failingMemory, on another proxy node of
//     the Service whose beacon is Up, and it is not Down on every one of
//     them, and the Service has endpoints (else the all-down policy
//     decides).
// Such a port's Down verdict does not take the node out of the status nor
// restart its proxy; the Service's BackendsReachable condition says why.
// Only on nodes whose beacon no vantage reports Down: a node cut off fails
// its beacon and its ports together, and its ports' verdict must not wait
// for the beacon's quorum (a failure seen elsewhere shortly before, such as
// the previous fault's, would otherwise hold it).
// A node whose own path fails, the others' working, still fails over.
// Not for externalTrafficPolicy Local, where each proxy has its own
// endpoints.

// failingMemory is how long after a vantage last reported a port Down on a
// node it still counts as failing there: a backend that fails one
// connection in two fails a prober's fall probes in a row only now and
// then, on each proxy node in turn.
const failingMemory = 15 * time.Second

// noteFailing records when a fresh vantage last reported each port target
// Down, for behindProxies, and forgets the targets no longer judged. A
// Service whose port starts failing somewhere is synced at once, as a
// Down below quorum changes no verdict; and again once the failure would
// be forgotten, so that a hold ends. Which targets a fresh vantage reports
// Down is kept between rounds: a round that is not full (evaluate) looks
// again only at the targets in keys and those a prober in flipped probes.
func (c *Controller) noteFailing(idx status.Reports, now time.Time, full bool, keys, flipped []string) {
	h := &c.judging
	if full || h.downVotes == nil {
		h.downVotes = map[string]bool{}
		for _, t := range h.targets {
			if anyDownVote(idx, t.Target) {
				h.downVotes[t.Key] = true
			}
		}
	} else {
		recheck := func(i int) {
			t := h.targets[i]
			if anyDownVote(idx, t.Target) {
				h.downVotes[t.Key] = true
			} else {
				delete(h.downVotes, t.Key)
			}
		}
		for _, k := range keys {
			if i, ok := h.byKey[k]; ok {
				recheck(i)
			}
		}
		for _, v := range flipped {
			for _, i := range h.byVantage[v] {
				recheck(i)
			}
		}
	}

	var started, failing []cache.ObjectName
	c.mu.Lock()
	if c.failing == nil {
		c.failing = map[string]time.Time{}
	}
	beacons := map[string]bool{}
	for k := range h.downVotes {
		t := h.targets[h.byKey[k]]
		if t.Beacon {
			beacons[t.Node] = true
			continue
		}
		if last, ok := c.failing[t.Key]; !ok || now.Sub(last) > failingMemory {
			started = append(started, t.service)
		}
		c.failing[t.Key] = now
		failing = append(failing, t.service)
	}
	c.beaconsFailing = beacons
	if full {
		for k := range c.failing {
			if i, ok := h.byKey[k]; !ok || h.targets[i].Beacon {
				delete(c.failing, k)
			}
		}
	}
	c.mu.Unlock()
	for _, svc := range started {
		c.urgent.Add(svc)
	}
	for _, svc := range failing {
		c.queue.AddAfter(svc, failingMemory+time.Second)
	}
}

// servicesWithEndpointsOn returns the Services with an endpoint on node,
// whose ports may fail behind their proxies when the node fails.
func (c *Controller) servicesWithEndpointsOn(node string) []cache.ObjectName {
	eps, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []cache.ObjectName
	for _, s := range eps {
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		for _, e := range s.Endpoints {
			if e.NodeName != nil && *e.NodeName == node {
				out = append(out, cache.NewObjectName(s.Namespace, name))
				break
			}
		}
	}
	return out
}

// anyDownVote reports whether a fresh vantage of t reports it Down now.
func anyDownVote(idx status.Reports, t status.Target) bool {
	for _, v := range t.Vantages {
		if fresh, _ := idx.Vantage(v); !fresh {
			continue
		}
		if o := idx.Observation(v, t); o != nil && o.State == v1alpha1.StateDown {
			return true
		}
	}
	return false
}

// beaconFailing reports whether a fresh vantage reports node's beacon Down
// now, even below quorum: its ports' failures are then likely the node's
// own, as they begin together, and are not held (behindProxies).
func (c *Controller) beaconFailing(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beaconsFailing[node]
}

// failedRecently reports whether target key was Down by a vantage's report
// within failingMemory of now.
func (c *Controller) failedRecently(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.failing[key]
	return ok && now.Sub(t) <= failingMemory
}

// behindProxies returns the fault behind svc's proxies, with own its proxy
// pods, and the ports it holds; nil when there is none.
func (c *Controller) behindProxies(svc *corev1.Service, own []*corev1.Pod) (*status.BehindProxies, map[contract.PortKey]bool, error) {
	if c.reports == nil || svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		return nil, nil, nil
	}
	var up []string // proxy nodes whose beacon is Up
	for _, p := range own {
		n := p.Spec.NodeName
		if n == "" || p.DeletionTimestamp != nil || slices.Contains(up, n) {
			continue
		}
		if c.verdicts.Verdict(contract.BeaconKey(n)).Verdict == status.VerdictUp && !c.beaconFailing(n) {
			up = append(up, n)
		}
	}
	if len(up) == 0 {
		return nil, nil, nil
	}
	name := cache.MetaObjectToName(svc).String()
	now := c.now()
	type count struct{ down, failing int }
	counts := map[contract.PortKey]count{}
	for _, sp := range contract.ServedPorts(svc) {
		pk := contract.PortKeyOf(sp)
		var n count
		for _, node := range up {
			tk := pk.TargetKey(name, node)
			isDown := c.verdicts.Verdict(tk).Verdict == status.VerdictDown
			if isDown {
				n.down++
			}
			if isDown || c.failedRecently(tk, now) {
				n.failing++
			}
		}
		if n.down > 0 || n.failing > 0 {
			counts[pk] = n
		}
	}
	if len(counts) == 0 {
		// The common case, and cheap: the endpoints are read only for
		// a port that fails somewhere.
		return nil, nil, nil
	}
	unreachable, reachable, err := c.endpointsOnFailedNodes(svc)
	if err != nil {
		return nil, nil, err
	}
	held := map[contract.PortKey]bool{}
	var ports []string
	for _, sp := range contract.ServedPorts(svc) {
		pk := contract.PortKeyOf(sp)
		n, ok := counts[pk]
		if !ok {
			continue
		}
		down, failing := n.down, n.failing
		c.logger.V(2).Info("Port failing through the proxies", "service", name, "port", pk, "proxyNodesUp", up,
			"down", down, "failing", failing, "endpointsOnFailedNodes", unreachable, "endpointsElsewhere", reachable)
		switch {
		case len(unreachable) > 0 && reachable && failing > 0:
		default:
			continue
		}
		held[pk] = true
		ports = append(ports, fmt.Sprintf("%s/%d", pk.Protocol, pk.Port))
	}
	if len(held) == 0 {
		return nil, nil, nil
	}
	slices.Sort(ports)
	return &status.BehindProxies{Ports: ports, Endpoints: unreachable}, held, nil
}

// endpointsOnFailedNodes names svc's endpoints on nodes whose beacon is
// Down, and says whether it has any endpoint elsewhere.
func (c *Controller) endpointsOnFailedNodes(svc *corev1.Service) (names []string, elsewhere bool, err error) {
	eps, err := c.slices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
	if err != nil {
		return nil, false, fmt.Errorf("listing endpoint slices: %w", err)
	}
	for _, s := range eps {
		for _, e := range s.Endpoints {
			if e.NodeName == nil || (e.Conditions.Terminating != nil && *e.Conditions.Terminating) {
				continue
			}
			if c.verdicts.Verdict(contract.BeaconKey(*e.NodeName)).Verdict != status.VerdictDown {
				elsewhere = true
				continue
			}
			// The informer keeps no addresses (trim.Object): the pod
			// names the endpoint.
			n := "an endpoint on " + *e.NodeName
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				n = fmt.Sprintf("pod %s/%s on %s", svc.Namespace, e.TargetRef.Name, *e.NodeName)
			}
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, elsewhere, nil
}
