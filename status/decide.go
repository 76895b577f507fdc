// Package status owns what pulselb publishes on a Service: the
// status.loadBalancer ingress list of proxy node IPs, the pulselb.io/
// address annotations, the pulselb.io/ conditions, and the Events that
// report their changes. Decide is a pure function of cached objects and
// health verdicts; callers write its Result only where it differs.
package status

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// Condition types pulselb owns on a Service.
const (
	ConditionProxiesScheduled = "pulselb.io/ProxiesScheduled"
	ConditionHealthy          = "pulselb.io/Healthy"
	ConditionConfigValid      = "pulselb.io/ConfigValid"
)

// Condition and Event reasons.
const (
	ReasonScheduled         = "Scheduled"
	ReasonPortConflict      = "PortConflict"
	ReasonNoEligibleNode    = "NoEligibleNode"
	ReasonPending           = "Pending"
	ReasonNotServable       = "NotServable"
	ReasonHealthy           = "Healthy"
	ReasonAllDown           = "AllDown"
	ReasonNoProxyReady      = "NoProxyReady"
	ReasonValid             = "Valid"
	ReasonInvalidConfig     = "InvalidConfig"
	ReasonInvalidAnnotation = "InvalidAnnotation"
)

// Health is the verdict on one node for one Service. Its zero value is
// healthy, so a nil Input.Health means "every node healthy" until the
// probe pipeline supplies verdicts.
type Health struct {
	// Down drops the node from the published list.
	Down bool
	// PortErrors holds, for ports that are down on the node, the text
	// published as ingress[].ports[].error.
	PortErrors map[contract.PortKey]string
	// Pending is set when no verdict on the node's ports is reached yet:
	// Down then means "not probed Up yet" (a node not yet published), and
	// not Down means "kept because it is already published", which says
	// nothing about the node's health; see Healthy.
	Pending bool
	// Early is set while the node's proxy has served for too short a
	// time for its probes to have found it serving: a Down verdict may
	// still be one reached before the proxy forwarded, when its probers
	// were refused by nothing listening. It keeps a Service that has no
	// address from being published as one whose backends do not answer
	// (see probedDown).
	Early bool
}

// Problem is a configuration problem to report: Reason is the Event reason
// (InvalidAnnotation, or another for spec fields), Message names the key,
// the value, why, and the default used.
type Problem struct {
	Reason  string
	Message string
}

// Input is everything Decide looks at.
type Input struct {
	Service *corev1.Service
	// Nodes by name.
	Nodes map[string]*corev1.Node
	// Pods are the Service's proxy pods.
	Pods []*corev1.Pod
	// Health holds verdicts by node name; a missing node is healthy.
	Health map[string]Health
	// LocalEndpointNodes, when not nil, limits publishing to these nodes
	// (externalTrafficPolicy Local: nodes with a ready local endpoint).
	LocalEndpointNodes map[string]bool
	AddressType        string
	AllDown            string
	// ExternalMode is the Service's external-vantages setting
	// (contract.ExternalOff, ExternalAdvisory or ExternalRequired; empty
	// is off), and External what the external vantages say about its
	// nodes (JudgeExternal).
	ExternalMode string
	External     External
	// AllowList is what the proxies report about the Service's
	// allow-list; nil when it has no source ranges.
	AllowList *AllowList
	// BehindProxies is a fault behind the proxies (its ports' Down
	// verdicts are already left out of Health); nil when there is none.
	BehindProxies *BehindProxies
	// Held are published nodes whose proxy is being replaced in place by
	// one of other ports (a port change): they stay published while their
	// old proxy runs, even terminating, so that the Service keeps its
	// addresses. Their Health must not be Down.
	Held map[string]bool
	// Problems make ConfigValid False.
	Problems []Problem
	// DataPaths, when set, says which ports the proxies relay in userspace
	// and which they forward by rule (contract.Settings.DataPaths); the
	// ConfigValid condition's message carries it.
	DataPaths string
	// Conflicts are host port conflict messages (placement.Conflict).
	Conflicts []string
	// Servable is false when no workload can be built (Problems say why).
	Servable bool
	// EligibleNodes is how many nodes may host proxies.
	EligibleNodes int
	// Now stamps conditions that change.
	Now metav1.Time
}

// Event is an Event to record on the Service.
type Event struct {
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Reason  string
	Message string
}

// Result is the published state Decide wants for a Service.
type Result struct {
	LoadBalancer corev1.LoadBalancerStatus
	// Conditions is the Service's whole condition list: others' conditions
	// unchanged, pulselb's three computed.
	Conditions []metav1.Condition
	// Annotations holds pulselb's written annotations; "" means absent.
	Annotations map[string]string
	// Nodes are the published nodes, sorted.
	Nodes  []string
	Events []Event
	// Starting counts the proxy pods on their way to ready: not yet
	// bound to a node, or bound and not ready (not probed Up yet, with the
	// readiness gate). Their addresses may follow soon.
	Starting int
}

// Decide computes what svc's status, annotations and conditions should be.
func Decide(in Input) Result {
	svc := in.Service
	scheduled, ready, draining, pinned := podNodes(in.Pods)
	running := runningNodes(in.Pods)
	for n := range in.Held {
		if draining[n] || ready[n] {
			ready[n], scheduled[n] = true, true
		}
	}

	serving := make([]string, 0, len(ready))
	for _, n := range slices.Sorted(maps.Keys(ready)) {
		if in.LocalEndpointNodes != nil && !in.LocalEndpointNodes[n] {
			continue
		}
		serving = append(serving, n)
	}
	healthy := Healthy(serving, in.Health, FailingOpen(svc, in.AllDown))
	families := familyOrder(svc)
	useExternal, useInternal := addressTypes(in.AddressType, slices.Sorted(maps.Keys(scheduled)), in.Nodes, families)
	addrsOf := func(n string) []netip.Addr {
		return nodeAddrs(in.Nodes[n], useExternal, useInternal, families)
	}
	reachable, held, extCond := externalVerdict(in.ExternalMode, in.External, healthy, func(n string) string {
		return joinAddrs(addrsOf(n)) + " (" + n + ")"
	})
	nodes, failOpen := reachable, false
	// With no proxy ready and nothing published there is nothing to fail
	// open to.
	if len(ready) > 0 || len(svc.Status.LoadBalancer.Ingress) > 0 {
		// The fallbacks, best first: proxies ready; proxies being removed
		// but still forwarding for their drain delay (a drain of every
		// proxy node at once, whose replacements are not ready yet);
		// proxies scheduled, or pinned to a node and waiting for its host
		// ports (the successor of a proxy replaced in place, as a
		// one-proxy Service's rollout does: its node keeps the address
		// from the old proxy's drain to the new one's start).
		withPinned := scheduled
		if len(pinned) > 0 {
			withPinned = maps.Clone(scheduled)
			maps.Copy(withPinned, pinned)
		}
		levels := []map[string]bool{ready, draining, withPinned}
		// Nodes labelled unhealthy (their beacon is Down: failed or cut
		// off) are no one's fallback while a level further down has
		// another: a proxy force-deleted with its failed node drains
		// there, and failing open onto it alone would publish the one
		// address that cannot answer (found by the e2e test of a
		// leader's node cut off right after an API server outage, during
		// which every node's backends were gone for 30 s).
		candidates := firstNonEmpty(levels, func(n string) bool { return !in.unhealthy(n) })
		if len(candidates) == 0 {
			candidates = firstNonEmpty(levels, func(string) bool { return true })
		}
		nodes, failOpen = Publish(reachable, candidates, in.AllDown)
	} else if backless := probedDown(in, running); len(backless) > 0 {
		// An address before backends: nothing is published yet, and every
		// running proxy was probed and found its Service not answering
		// (its readiness gate stays closed until it does). Nothing behind
		// the Service answers yet, as when a Service is created before its
		// pods; publish those proxies' nodes, as with every proxy down, so
		// that the Service has its address at once and keeps it when the
		// backends come.
		nodes, failOpen = Publish(nil, backless, in.AllDown)
	}
	var ingress []corev1.LoadBalancerIngress
	var externalIPs, internalIPs []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, n := range nodes {
		node := in.Nodes[n]
		if node == nil {
			continue
		}
		for _, a := range node.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || families[familyOf(ip)] == 0 {
				continue
			}
			ip = ip.Unmap()
			switch a.Type {
			case corev1.NodeExternalIP:
				externalIPs = append(externalIPs, ip)
				if !useExternal {
					continue
				}
			case corev1.NodeInternalIP:
				internalIPs = append(internalIPs, ip)
				if !useInternal {
					continue
				}
			default:
				continue
			}
			if seen[ip] {
				continue
			}
			seen[ip] = true
			ingress = append(ingress, corev1.LoadBalancerIngress{
				IP:     ip.String(),
				IPMode: ptr.To(corev1.LoadBalancerIPModeProxy),
				Ports:  portStatuses(svc, in.Health[n]),
			})
		}
	}
	byFamily := func(a, b netip.Addr) int {
		return cmp.Or(cmp.Compare(families[familyOf(a)], families[familyOf(b)]), a.Compare(b))
	}
	// The addresses already published keep their places, so that the
	// first one stays first while it is published: scripts, tools and
	// Kubernetes' own specs read ingress[0] as "the" address, and an
	// address that joins (a second proxy probed Up after the first, a
	// node back from a failure) must not take its place because it sorts
	// lower. New addresses follow them, sorted.
	was := map[string]int{}
	for i, in := range svc.Status.LoadBalancer.Ingress {
		if _, dup := was[in.IP]; !dup {
			was[in.IP] = i
		}
	}
	slices.SortFunc(ingress, func(a, b corev1.LoadBalancerIngress) int {
		ia, ib := netip.MustParseAddr(a.IP), netip.MustParseAddr(b.IP)
		if c := cmp.Compare(families[familyOf(ia)], families[familyOf(ib)]); c != 0 {
			return c
		}
		pa, oldA := was[a.IP]
		pb, oldB := was[b.IP]
		switch {
		case oldA && oldB:
			return cmp.Compare(pa, pb)
		case oldA != oldB:
			if oldA {
				return -1
			}
			return 1
		}
		return ia.Compare(ib)
	})
	slices.SortFunc(externalIPs, byFamily)
	slices.SortFunc(internalIPs, byFamily)
	var unreachable []netip.Addr
	for _, n := range held {
		unreachable = append(unreachable, addrsOf(n)...)
	}
	slices.SortFunc(unreachable, byFamily)

	r := Result{
		LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress},
		Nodes:        nodes,
		Starting:     starting(in.Pods),
		Annotations: map[string]string{
			contract.AnnotationExternalIPs: joinAddrs(slices.Compact(externalIPs)),
			contract.AnnotationInternalIPs: joinAddrs(slices.Compact(internalIPs)),
			contract.AnnotationNodes:       strings.Join(nodes, ","),

			contract.AnnotationExternalUnreachable: joinAddrs(slices.Compact(unreachable)),
		},
	}

	sched := scheduledCondition(in, scheduled)
	health := healthyCondition(in, len(ready), len(healthy), len(nodes), failOpen)
	valid := metav1.Condition{Type: ConditionConfigValid, Status: metav1.ConditionTrue, Reason: ReasonValid,
		Message: "every pulselb setting is valid"}
	if len(in.Problems) > 0 {
		msgs := make([]string, len(in.Problems))
		for i, p := range in.Problems {
			msgs[i] = p.Message
		}
		valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, ReasonInvalidConfig, strings.Join(msgs, "; ")
	}
	if in.DataPaths != "" {
		valid.Message += "; " + in.DataPaths
	}
	ours := []metav1.Condition{sched, health, valid}
	var ext *metav1.Condition
	if extCond != nil {
		ext = &metav1.Condition{Type: ConditionExternallyReachable, Status: metav1.ConditionFalse, Reason: extCond.reason, Message: extCond.message}
		if extCond.ok {
			ext.Status = metav1.ConditionTrue
		}
		ours = append(ours, *ext)
	}
	allow := allowListCondition(in.AllowList)
	if allow != nil {
		ours = append(ours, *allow)
	}
	behind := behindCondition(svc, in.BehindProxies)
	if behind != nil {
		ours = append(ours, *behind)
	}
	r.Conditions = mergeConditions(svc, in.Now, ours...)
	r.Events = events(in, svc.Status.Conditions, sched, valid)
	r.Events = append(r.Events, externalEvents(in.ExternalMode, svc.Status.Conditions, ext)...)
	r.Events = append(r.Events, allowListEvents(svc.Status.Conditions, allow)...)
	r.Events = append(r.Events, behindEvents(svc.Status.Conditions, behind)...)
	return r
}

// Healthy returns the candidates whose health is not Down, in order: the
// hosts to publish unless there are none (see Publish). A host missing
// from health is healthy. failingOpen says that the answer now is a
// fail-open one (Publish's failOpen): it then stays so until some
// candidate is healthy by verdict. The hosts kept only because they are
// published while no verdict on them is reached yet (Health.Pending) are
// in the answer because it failed open, not because they are healthy, and
// narrowing the answer onto them would flip it back to every host once
// they too are probed Down (70 addresses, then 7, then 70 again).
func Healthy(candidates []string, health map[string]Health, failingOpen bool) []string {
	var healthy []string
	confirmed := false
	for _, c := range candidates {
		h := health[c]
		if h.Down {
			continue
		}
		healthy = append(healthy, c)
		confirmed = confirmed || !h.Pending
	}
	if failingOpen && !confirmed {
		return nil
	}
	return healthy
}

// FailingOpen reports whether svc's published status is a fail-open one,
// as its Healthy condition records: no node healthy, every candidate
// published (all-down publish-all).
func FailingOpen(svc *corev1.Service, allDown string) bool {
	c := findCondition(svc.Status.Conditions, ConditionHealthy)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonAllDown && allDown != contract.AllDownPublishNone
}

// Publish returns the hosts to publish given the healthy ones and the
// candidates to fall back on: the healthy hosts when there are any, else,
// failing open, every candidate, unless allDown is contract.AllDownPublishNone. An
// empty list would make DNS (and external-dns) drop the name altogether,
// so publishing where proxies run is better than nothing.
func Publish(healthy, candidates []string, allDown string) (published []string, failOpen bool) {
	if len(healthy) > 0 || allDown == contract.AllDownPublishNone {
		return healthy, false
	}
	return candidates, true
}

// firstNonEmpty returns, sorted, the nodes of the first of levels that
// has some node keep accepts.
func firstNonEmpty(levels []map[string]bool, keep func(string) bool) []string {
	for _, l := range levels {
		var out []string
		for _, n := range slices.Sorted(maps.Keys(l)) {
			if keep(n) {
				out = append(out, n)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// unhealthy reports whether node n is labelled pulselb.io/unhealthy.
func (in Input) unhealthy(n string) bool {
	node := in.Nodes[n]
	if node == nil {
		return false
	}
	_, ok := node.Labels[contract.LabelUnhealthy]
	return ok
}

// podNodes returns the nodes of the pods that are scheduled (bound, not
// terminating, not finished), of those the ones also Running and Ready, the
// nodes of terminating pods whose containers still run ready (proxies that
// keep forwarding for their drain delay, whether or not their readiness
// gate opened), and the nodes unbound pods are pinned to
// (contract.PinnedNode).
func podNodes(pods []*corev1.Pod) (scheduled, ready, draining, pinned map[string]bool) {
	scheduled, ready, draining, pinned = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if p.Spec.NodeName == "" {
			if n := contract.PinnedNode(p); n != "" && p.DeletionTimestamp == nil {
				pinned[n] = true
			}
			continue
		}
		if p.DeletionTimestamp != nil {
			if contract.ContainersReady(p) || contract.PodReady(p) {
				draining[p.Spec.NodeName] = true
			}
			continue
		}
		scheduled[p.Spec.NodeName] = true
		if contract.PodReady(p) {
			ready[p.Spec.NodeName] = true
		}
	}
	return scheduled, ready, draining, pinned
}

// runningNodes returns the nodes of the scheduled pods whose containers are
// ready: proxies that forward, whether or not they were probed Up yet.
func runningNodes(pods []*corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue {
				out[p.Spec.NodeName] = true
			}
		}
	}
	return out
}

// probedDown returns, sorted, the nodes of running that probes found Down
// (a verdict, not merely pending), when every one of them is: the Service
// answers through none of its running proxies. Nodes labelled unhealthy
// or leaving are never among them, nor are any when one proxy is still
// waiting for its verdict, or has served too briefly for its verdict to
// be on what it serves (Health.Early: its probers start when its pod is
// bound, and find nothing listening until the proxy runs).
func probedDown(in Input, running map[string]bool) []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(running)) {
		h, ok := in.Health[n]
		if !ok || !h.Down || h.Pending || h.Early {
			return nil
		}
		if node := in.Nodes[n]; node == nil || contract.Leaving(node) != "" {
			continue
		}
		if in.unhealthy(n) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// starting counts the pods neither finished, terminating nor ready.
func starting(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && !contract.PodReady(p) {
			n++
		}
	}
	return n
}

// familyOrder ranks IP families by spec.ipFamilies, 1 first; 0 means the
// Service does not have the family. Without ipFamilies, IPv4 comes first.
func familyOrder(svc *corev1.Service) map[corev1.IPFamily]int {
	order := map[corev1.IPFamily]int{}
	for i, f := range svc.Spec.IPFamilies {
		if order[f] == 0 {
			order[f] = i + 1
		}
	}
	if len(order) == 0 {
		order[corev1.IPv4Protocol], order[corev1.IPv6Protocol] = 1, 2
	}
	return order
}

func familyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// addressTypes decides which node address types to publish. For auto, the
// choice looks at every node running a proxy, not only the healthy ones,
// so it does not flip when an ExternalIP node fails.
func addressTypes(addressType string, proxyNodes []string, nodes map[string]*corev1.Node, families map[corev1.IPFamily]int) (external, internal bool) {
	switch addressType {
	case contract.AddressExternal:
		return true, false
	case contract.AddressInternal:
		return false, true
	case contract.AddressBoth:
		return true, true
	}
	for _, n := range proxyNodes {
		node := nodes[n]
		if node == nil {
			continue
		}
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeExternalIP && families[familyOf(ip)] > 0 {
				return true, false
			}
		}
	}
	return false, true
}

// portStatuses returns the ports of an ingress entry with h's errors: the
// Served ports only, so that the entry lists what its address forwards. A
// port pulselb does not serve (SCTP) is left out rather than listed
// without an error, which would say that it works there, or with one,
// which would read as a port probed Down; ConfigValid says why it is not
// served.
func portStatuses(svc *corev1.Service, h Health) []corev1.PortStatus {
	var out []corev1.PortStatus
	for _, p := range contract.ServedPorts(svc) {
		k := contract.PortKeyOf(p)
		ps := corev1.PortStatus{Port: k.Port, Protocol: k.Protocol}
		if msg, ok := h.PortErrors[k]; ok {
			ps.Error = ptr.To(msg)
		}
		out = append(out, ps)
	}
	return out
}

func scheduledCondition(in Input, scheduled map[string]bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionProxiesScheduled, Status: metav1.ConditionFalse}
	switch {
	case !in.Servable:
		c.Reason, c.Message = ReasonNotServable, "no proxy workload: the Service's settings cannot be served (see "+ConditionConfigValid+")"
	case len(in.Conflicts) > 0:
		c.Reason, c.Message = ReasonPortConflict, strings.Join(in.Conflicts, "; ")
	case in.EligibleNodes == 0:
		c.Reason, c.Message = ReasonNoEligibleNode, "no node is eligible: every node is not ready, excluded, unhealthy, tainted or not selected"
	case len(scheduled) == 0:
		c.Reason, c.Message = ReasonPending, "no proxy pod is scheduled yet"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonScheduled
		c.Message = "proxy pods run on " + contract.ShortList(slices.Sorted(maps.Keys(scheduled)), 10)
	}
	return c
}

func healthyCondition(in Input, ready, healthy, published int, failOpen bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionFalse}
	switch {
	case healthy > 0:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonHealthy
		c.Message = fmt.Sprintf("%d of %d ready proxy nodes are healthy", healthy, ready)
	case ready == 0 && !failOpen:
		c.Reason, c.Message = ReasonNoProxyReady, "no proxy pod is running and ready"
	case in.AllDown == contract.AllDownPublishNone:
		c.Reason, c.Message = ReasonAllDown, "no proxy node is healthy; publishing none (all-down: publish-none)"
	default:
		c.Reason = ReasonAllDown
		c.Message = fmt.Sprintf("no proxy node is healthy; publishing all %d proxy nodes (all-down: publish-all)", published)
	}
	return c
}

// mergeConditions returns svc's conditions with pulselb's replaced. A
// condition keeps its LastTransitionTime while its status stays the same,
// so an unchanged Service yields an identical list.
func mergeConditions(svc *corev1.Service, now metav1.Time, ours ...metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	owned := map[string]bool{}
	for _, c := range ours {
		owned[c.Type] = true
	}
	for _, c := range svc.Status.Conditions {
		// pulselb's conditions not computed this time, such as
		// ExternallyReachable once external-vantages is off, go.
		if !owned[c.Type] && !ownCondition(c.Type) {
			out = append(out, c)
		}
	}
	for _, c := range ours {
		c.ObservedGeneration = svc.Generation
		c.LastTransitionTime = now
		if old := findCondition(svc.Status.Conditions, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out = append(out, c)
	}
	return out
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// events reports changes of the conditions, so a steady state records
// nothing however often it is synced.
func events(in Input, old []metav1.Condition, sched, valid metav1.Condition) []Event {
	var out []Event
	changed := func(c metav1.Condition) bool {
		o := findCondition(old, c.Type)
		return o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message
	}
	if valid.Status == metav1.ConditionFalse && changed(valid) {
		for _, p := range in.Problems {
			out = append(out, Event{Type: corev1.EventTypeWarning, Reason: p.Reason, Message: p.Message})
		}
	}
	if changed(sched) {
		switch sched.Reason {
		case ReasonPortConflict:
			for _, m := range in.Conflicts {
				out = append(out, Event{Type: corev1.EventTypeWarning, Reason: ReasonPortConflict, Message: m})
			}
		case ReasonNoEligibleNode:
			out = append(out, Event{Type: corev1.EventTypeWarning, Reason: ReasonNoEligibleNode, Message: sched.Message})
		}
	}
	return out
}

// externalEvents reports a change of the ExternallyReachable condition
// (nil: none now): ExternalPathDown when addresses become unreachable
// from outside, or the set changes; ExternalPathUp when they are reachable
// again; and, with required, when the external view becomes unusable, so
// that the status follows in-cluster verdicts.
func externalEvents(mode string, old []metav1.Condition, now *metav1.Condition) []Event {
	if now == nil {
		return nil
	}
	o := findCondition(old, ConditionExternallyReachable)
	if o != nil && o.Status == now.Status && o.Reason == now.Reason && o.Message == now.Message {
		return nil
	}
	switch now.Reason {
	case ReasonUnreachable, ReasonAllUnreachable:
		return []Event{{Type: corev1.EventTypeWarning, Reason: ReasonExternalPathDown, Message: now.Message}}
	case ReasonReachable:
		if o != nil && (o.Reason == ReasonUnreachable || o.Reason == ReasonAllUnreachable) {
			return []Event{{Type: corev1.EventTypeNormal, Reason: ReasonExternalPathUp, Message: now.Message}}
		}
	case ReasonExternalStale, ReasonExternalCutOff, ReasonNoExternalVantage:
		if mode == contract.ExternalRequired && (o == nil || o.Reason != now.Reason) {
			return []Event{{Type: corev1.EventTypeWarning, Reason: now.Reason, Message: now.Message}}
		}
	}
	return nil
}

// nodeAddrs returns the addresses of node that Decide publishes: its
// ExternalIPs with useExternal, its InternalIPs with useInternal, of the
// Service's families, each once, in the node's order.
func nodeAddrs(node *corev1.Node, useExternal, useInternal bool, families map[corev1.IPFamily]int) []netip.Addr {
	if node == nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range node.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if err != nil || families[familyOf(ip)] == 0 {
			continue
		}
		ip = ip.Unmap()
		if (a.Type == corev1.NodeExternalIP && useExternal) || (a.Type == corev1.NodeInternalIP && useInternal) {
			if !slices.Contains(out, ip) {
				out = append(out, ip)
			}
		}
	}
	return out
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}
