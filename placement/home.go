package placement

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
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
// controller, from Homes' answer, pins each to a node (a node selector on
// its hostname label, which a gated pod may gain) or releases it to the
// scheduler.

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
	// HomeRolloutBlocked: released to the scheduler, as every home runs an
	// older proxy that the rollout cannot take down: no more of the
	// Service's proxies are (or are about to be) available than the
	// rollout must keep, and a gated pod is never available.
	HomeRolloutBlocked = "rolloutBlocked"
	// HomeNoEndpoint: kept gated, as the Service's traffic policy is
	// Local and no node with an endpoint can take the pod.
	HomeNoEndpoint = "noEndpointNode"
	// HomeGone: a pod pinned to a node that can no longer host it, still
	// unscheduled; it is deleted so that its workload makes another.
	HomeGone = "homeGone"
)

// HomeWaitLimit bounds how long a gated pod waits for a home held by an
// older proxy, beyond that proxy's termination grace period (its drain):
// past it, the rollout is taken to be stuck and the pod goes wherever the
// scheduler puts it.
const HomeWaitLimit = 2 * time.Minute

// homeEndpointRecheck is how soon a pod waiting for a node with an endpoint
// is looked at again when nothing else brings its Service back.
const homeEndpointRecheck = 30 * time.Second

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
	// Others are other pods in view (other Services' proxies, probers;
	// any may be one of Pods, which are skipped): a node where one holds
	// a pod's host port is no home for it.
	Others []*corev1.Pod
	// Published are the nodes the Service is published on.
	Published []string
	// Eligible are the nodes that may host its proxies now
	// (Workload.EligibleNodes).
	Eligible []string
	// Endpoints, for externalTrafficPolicy Local, are the nodes with an
	// endpoint of the Service (serving, or starting, or gone a moment ago:
	// the controller's LocalEndpointGrace); nil otherwise. While there are
	// some, a proxy goes only next to one.
	Endpoints map[string]bool
	// Replicas and MaxUnavailable are the workload's replica count and its
	// rollout's maxUnavailable (0: an old proxy is taken down only after
	// its successor is ready). They say whether a home held by an old proxy
	// will free (rolloutFrees).
	Replicas, MaxUnavailable int
	Now                      time.Time
}

// Homes decides where each gated proxy pod of a Service goes, oldest pod
// first, and which pinned pods wait for a node that can no longer host
// them. It is pure.
//
// A pod's homes are the nodes the Service is published on, then the other
// nodes its proxies run on (or terminate on), that are eligible and have no
// pod of the same template (pod-template-hash) yet, nor another pod holding
// one of its host ports. With externalTrafficPolicy Local and endpoints
// somewhere, only nodes with an endpoint are homes, any of them, and a pod
// with none waits gated. It is pinned to the
// first home where its host ports are free, else to the first where they
// are held only by terminating proxies (it starts once they are gone: a
// rollout of the same ports in place, or a restarted proxy). When an older
// proxy that is not terminating holds them on every home and the rollout
// will take one down (rolloutFrees), it waits, gated, for at most its
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
			n = contract.PinnedNode(p)
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
		for _, pk := range contract.HostPorts(p) {
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
	own := map[*corev1.Pod]bool{}
	for _, p := range in.Pods {
		own[p] = true
	}
	taken := map[string]map[contract.PortKey]bool{}
	for _, p := range in.Others {
		if own[p] || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.DeletionTimestamp != nil {
			for _, pk := range contract.HostPorts(p) {
				at(p.Spec.NodeName).terminated[pk] = ""
			}
			continue
		}
		if taken[p.Spec.NodeName] == nil {
			taken[p.Spec.NodeName] = map[contract.PortKey]bool{}
		}
		for _, pk := range contract.HostPorts(p) {
			taken[p.Spec.NodeName][pk] = true
		}
	}
	candidates := append(slices.Sorted(slices.Values(in.Published)), slices.Sorted(slices.Values(podNodes))...)
	local := len(in.Endpoints) > 0
	if local {
		// After the nodes it is on, any node with an endpoint: a proxy
		// elsewhere would forward to a NodePort without one.
		candidates = append(candidates, slices.Sorted(maps.Keys(in.Endpoints))...)
	}
	var homes []string
	for _, n := range candidates {
		if eligible[n] && (!local || in.Endpoints[n]) && !slices.Contains(homes, n) {
			homes = append(homes, n)
		}
	}

	// started counts the pods that are or may become available: those not
	// gated nor terminating, and each gated pod once placed here.
	started := 0
	for _, p := range in.Pods {
		if !Gated(p) && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			started++
		}
	}
	slices.SortFunc(gated, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	for _, p := range gated {
		hash, ports := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey], contract.HostPorts(p)
		free, freeing, busy := "", "", false
		for _, n := range homes {
			on := at(n)
			if on.hashes[hash] || slices.ContainsFunc(ports, func(pk contract.PortKey) bool { return taken[n][pk] }) {
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
			started++
		case local:
			// Every node with an endpoint has a proxy, or none can
			// take one: wait, gated, for the endpoints to change (as a
			// pod would wait Pending for its pod affinity).
			out = append(out, Home{Pod: p, Reason: HomeNoEndpoint, Wait: homeEndpointRecheck})
		case busy && rolloutFrees(started, in.Replicas, in.MaxUnavailable):
			limit := HomeWaitLimit
			if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
				limit += time.Duration(*g) * time.Second
			}
			if wait := p.CreationTimestamp.Add(limit).Sub(in.Now); wait > 0 {
				out = append(out, Home{Pod: p, Wait: wait, Reason: HomeBusy})
				continue
			}
			out = append(out, Home{Pod: p, Reason: HomeWaitOver})
			started++
		case busy && in.MaxUnavailable > 0:
			out = append(out, Home{Pod: p, Reason: HomeRolloutBlocked})
			started++
		default:
			out = append(out, Home{Pod: p, Reason: HomeNone})
			started++
		}
	}
	return out
}

// rolloutFrees reports whether a Deployment's rolling update, with
// replicas and maxUnavailable, will take one of its old pods down while a
// new one waits gated, given started, the pods that are or may become
// available (not gated, not terminating). The Deployment controller scales
// an old ReplicaSet down only while more pods are available than replicas
// minus maxUnavailable, and a gated pod never becomes available: with no
// more started pods than that, the rollout waits for the gated pod and the
// gated pod for the rollout, until HomeWaitLimit. A started pod that is not
// ready yet is counted as available: once it is, the rollout goes on.
func rolloutFrees(started, replicas, maxUnavailable int) bool {
	return maxUnavailable > 0 && started > replicas-maxUnavailable
}

// Gated reports whether proxy pod p still waits for its home.
func Gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == contract.SchedulingGateHome })
}

// PinPatch returns the strategic merge patch that releases a gated proxy
// pod to the scheduler and, when node is not "", requires it to run there:
// the gate goes, and the pod gains a node selector on the node's hostname
// label (which the API server lets a gated pod gain) and the annotation
// contract.AnnotationHome naming the node.
func PinPatch(node, hostname string) ([]byte, error) {
	patch := map[string]any{"spec": map[string]any{
		"schedulingGates": []any{map[string]any{"$patch": "delete", "name": contract.SchedulingGateHome}},
	}}
	if node != "" {
		patch["metadata"] = map[string]any{"annotations": map[string]string{contract.AnnotationHome: node}}
		patch["spec"].(map[string]any)["nodeSelector"] = map[string]string{corev1.LabelHostname: hostname}
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("encoding the placement of a proxy pod: %w", err)
	}
	return b, nil
}

// AsPlaced returns a copy of gated proxy pod p as PinPatch(node, …) leaves
// it: ungated and, when node is not "", pinned to node. A sync that runs
// before the cache shows a placement hands Homes the pod as placed, so that
// no other gated pod is given its home.
func AsPlaced(p *corev1.Pod, node string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.SchedulingGates = slices.DeleteFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == contract.SchedulingGateHome })
	if node != "" {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[contract.AnnotationHome] = node
	}
	return p
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
		held := contract.HostPorts(p)
		if len(held) == 0 || slices.ContainsFunc(held, func(pk contract.PortKey) bool { return slices.Contains(ports, pk) }) {
			continue
		}
		out[n] = true
	}
	return out
}
