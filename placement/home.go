package placement

import (
	"cmp"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/pulselb/pulselb/api/contract"
)

// A Service's address is its identity: a proxy pod that replaces another
// (a rollout of a new template, a restart) goes where the one it replaces
// is, so that the Service keeps its addresses. Deployment proxy pods are
// created behind the scheduling gate contract.SchedulingGateHome, and the
// controller, from Homes' answer, pins each to a node (a required node
// affinity on the node's name, which a gated pod may gain) or releases it
// to the scheduler.

// Why Homes chose what it did for a gated pod; a Home's Reason.
const (
	// HomeReplaces: pinned to a node the Service is published on or has a
	// proxy on, where no pod of the same template runs and the pod's host
	// ports are free (or held only by a proxy that is terminating).
	HomeReplaces = "replacesProxy"
	// HomeBusy: kept gated, as every home still runs an older proxy on the
	// same host ports, which the rollout takes down first.
	HomeBusy = "homeBusy"
	// HomeNone: released to the scheduler, as the pod replaces no proxy
	// (a new Service, a scale-up, a failed or leaving node's proxy).
	HomeNone = "noHome"
	// HomeWaitOver: released to the scheduler after waiting for a home too
	// long (HomeWaitLimit).
	HomeWaitOver = "waitOver"
	// HomeGone: a pod pinned to a node that can no longer host it, still
	// unscheduled; it is deleted so that its workload makes another.
	HomeGone = "homeGone"
)

// HomeWaitLimit bounds how long a gated pod waits for a home held by an
// older proxy, beyond that proxy's termination grace period (its drain):
// past it, the rollout is taken to be stuck and the pod goes wherever the
// scheduler puts it.
const HomeWaitLimit = 2 * time.Minute

// Home is where one proxy pod of a Service goes.
type Home struct {
	Pod *corev1.Pod
	// Node pins the pod to this node; "" releases it to the scheduler.
	// Unused when Wait or Delete is set.
	Node string
	// Wait, when positive, keeps the pod gated: look again after Wait.
	Wait time.Duration
	// Delete says the pod is to be deleted (HomeGone).
	Delete bool
	Reason string
}

// HomeInput is what Homes looks at for one Service.
type HomeInput struct {
	// Pods are the Service's proxy pods.
	Pods []*corev1.Pod
	// Published are the nodes the Service is published on.
	Published []string
	// Eligible are the nodes that may host its proxies now
	// (Workload.EligibleNodes).
	Eligible []string
	// DeleteFirst says the workload's rollout may take an old proxy down
	// before its successor is ready (maxUnavailable of at least 1), so a
	// home held by an old proxy will free.
	DeleteFirst bool
	Now         time.Time
}

// Homes decides where each gated proxy pod of a Service goes, oldest pod
// first, and which pinned pods wait for a node that can no longer host
// them. It is pure.
//
// A pod's homes are the nodes the Service is published on, then the other
// nodes its proxies run on (or terminate on), that are eligible and have no
// pod of the same template (pod-template-hash) yet. It is pinned to the
// first home where its host ports are free, else to the first where they
// are held only by terminating proxies (it starts once they are gone: a
// rollout of the same ports in place, or a restarted proxy). When an older
// proxy that is not terminating holds them on every home and the rollout
// takes old proxies down first, it waits, gated, for at most its
// termination grace period plus HomeWaitLimit. Otherwise the scheduler
// places it.
func Homes(in HomeInput) []Home {
	eligible := map[string]bool{}
	for _, n := range in.Eligible {
		eligible[n] = true
	}
	type onNode struct {
		hashes           map[string]bool
		live, terminated map[contract.PortKey]string // host port → the holder's template hash
	}
	nodes := map[string]*onNode{}
	at := func(n string) *onNode {
		if nodes[n] == nil {
			nodes[n] = &onNode{hashes: map[string]bool{}, live: map[contract.PortKey]string{}, terminated: map[contract.PortKey]string{}}
		}
		return nodes[n]
	}
	var out []Home
	var gated []*corev1.Pod
	var podNodes []string
	for _, p := range in.Pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if Gated(p) {
			if p.DeletionTimestamp == nil {
				gated = append(gated, p)
			}
			continue
		}
		n := p.Spec.NodeName
		if n == "" {
			n = PinnedNode(p)
			if n != "" && p.DeletionTimestamp == nil && !eligible[n] {
				out = append(out, Home{Pod: p, Delete: true, Reason: HomeGone})
				continue
			}
		}
		if n == "" {
			continue
		}
		podNodes = append(podNodes, n)
		on, hash := at(n), p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		for _, pk := range HostPorts(p) {
			if p.DeletionTimestamp != nil {
				on.terminated[pk] = hash
			} else {
				on.live[pk] = hash
			}
		}
		if p.DeletionTimestamp == nil {
			on.hashes[hash] = true
		}
	}
	var homes []string
	for _, n := range append(slices.Sorted(slices.Values(in.Published)), slices.Sorted(slices.Values(podNodes))...) {
		if eligible[n] && !slices.Contains(homes, n) {
			homes = append(homes, n)
		}
	}

	slices.SortFunc(gated, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range gated {
		hash, ports := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey], HostPorts(p)
		free, freeing, busy := "", "", false
		for _, n := range homes {
			on := at(n)
			if on.hashes[hash] {
				continue
			}
			live, terminated := false, false
			for _, pk := range ports {
				if h, ok := on.live[pk]; ok {
					live = true
					busy = busy || h != hash
				}
				_, held := on.terminated[pk]
				terminated = terminated || held
			}
			switch {
			case !live && !terminated && free == "":
				free = n
			case !live && terminated && freeing == "":
				freeing = n
			}
		}
		home := cmp.Or(free, freeing)
		switch {
		case home != "":
			on := at(home)
			on.hashes[hash] = true
			for _, pk := range ports {
				on.live[pk] = hash
			}
			out = append(out, Home{Pod: p, Node: home, Reason: HomeReplaces})
		case busy && in.DeleteFirst:
			limit := HomeWaitLimit
			if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
				limit += time.Duration(*g) * time.Second
			}
			if wait := p.CreationTimestamp.Add(limit).Sub(in.Now); wait > 0 {
				out = append(out, Home{Pod: p, Wait: wait, Reason: HomeBusy})
				continue
			}
			out = append(out, Home{Pod: p, Reason: HomeWaitOver})
		default:
			out = append(out, Home{Pod: p, Reason: HomeNone})
		}
	}
	return out
}

// Gated reports whether proxy pod p still waits for its home.
func Gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == contract.SchedulingGateHome })
}

// PinnedNode returns the node a proxy pod was pinned to (Pin), or "".
func PinnedNode(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == nodeNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// nodeNameField is the node field a pin selects on, as the DaemonSet
// controller's pins do.
const nodeNameField = "metadata.name"

// Pin returns gated pod p released to the scheduler and, when node is not
// "", required to run there: the gate goes, and every required node
// selector term gains the node's name, which the API server lets a gated
// pod gain. p is not changed.
func Pin(p *corev1.Pod, node string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.SchedulingGates = slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool {
		return g.Name == contract.SchedulingGateHome
	})
	if node == "" {
		return p
	}
	req := corev1.NodeSelectorRequirement{Key: nodeNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
	return p
}

// HostPorts returns the host ports proxy pod p holds.
func HostPorts(p *corev1.Pod) []contract.PortKey {
	var out []contract.PortKey
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.HostPort == 0 {
				continue
			}
			proto := cp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out = append(out, contract.PortKey{Protocol: proto, Port: cp.HostPort})
		}
	}
	return out
}

// ReplacedInPlace returns the published nodes whose proxy is being
// replaced in place by one of other host ports (a Service whose ports
// changed, 80 to 81): such a node runs a Ready proxy of the Service on none
// of ports, whose successor can start next to it. Those nodes stay
// published while that proxy runs, even though it does not serve ports and
// its successor may not yet (its verdicts are not held against the node),
// so that the Service keeps its addresses through the change; the
// successor's readiness gate still waits for its probes.
func ReplacedInPlace(pods []*corev1.Pod, published, eligible []string, ports []contract.PortKey) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		n := p.Spec.NodeName
		if n == "" || !slices.Contains(published, n) || !slices.Contains(eligible, n) || !contract.PodReady(p) {
			continue
		}
		held := HostPorts(p)
		if len(held) == 0 || slices.ContainsFunc(held, func(pk contract.PortKey) bool { return slices.Contains(ports, pk) }) {
			continue
		}
		out[n] = true
	}
	return out
}
