package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// placementConfig returns the placement configuration for svc: the
// controller's, with the probers' addresses when svc restricts its clients,
// whose proxies must let the probers through (contract.ProbeSourceAddrs).
func (c *Controller) placementConfig(svc *corev1.Service) (placement.Config, error) {
	cfg := c.cfg.Placement
	if ranges, _ := contract.SourceRanges(svc); len(ranges) == 0 {
		return cfg, nil
	}
	probers, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProberAppName}))
	if err != nil {
		return cfg, fmt.Errorf("listing prober pods: %w", err)
	}
	cfg.ProbeSources = contract.ProbeSourceAddrs(probers)
	return cfg, nil
}

// proberAddressesChanged enqueues every served Service with source ranges
// when a prober pod's addresses (or whether it counts) changed: their
// proxies' allow-lists name the probers.
func (c *Controller) proberAddressesChanged(oldObj, newObj any) {
	var before, after []netip.Addr
	if p, ok := unwrap(oldObj).(*corev1.Pod); ok {
		before = contract.ProbeSourceAddrs([]*corev1.Pod{p})
	}
	if p, ok := unwrap(newObj).(*corev1.Pod); ok {
		after = contract.ProbeSourceAddrs([]*corev1.Pod{p})
	}
	if slices.Equal(before, after) {
		return
	}
	services, err := c.services.List(everything)
	if err != nil {
		return
	}
	for _, svc := range services {
		if ranges, _ := contract.SourceRanges(svc); len(ranges) > 0 && c.wants(svc) {
			c.queue.Add(cache.MetaObjectToName(svc))
		}
	}
}

// probeAdmission returns, for a Service's targets, whether the prober on a
// node gets through the allow-list on svc's proxy workload; nil when every
// prober does (no ranges). A prober the proxies would refuse (a prober
// that started after the list was written, until the controller adds it)
// cannot see the target at all: its votes on the Service's targets are not
// counted, so a refused probe is never a Down vote.
func (c *Controller) probeAdmission(svc *corev1.Service, proberAddrs map[string][]netip.Addr) func(node string) bool {
	name := placement.Name(svc.Namespace, svc.Name)
	var annotations map[string]string
	if d, err := c.deployments.Get(name); err == nil {
		annotations = d.Annotations
	} else if ds, err := c.daemonSets.Get(name); err == nil {
		annotations = ds.Annotations
	}
	ranges, probers, err := contract.ParseAllowList(annotations)
	if err == nil && len(ranges) == 0 {
		return nil
	}
	return func(node string) bool {
		if err != nil {
			// Such a list closes every proxy; nobody gets through.
			return false
		}
		for _, a := range proberAddrs[node] {
			if slices.Contains(probers, a) || slices.ContainsFunc(ranges, func(p netip.Prefix) bool { return p.Contains(a) }) {
				return true
			}
		}
		return false
	}
}

// proberAddrsByNode returns the probe source addresses of each node's
// prober pod.
func proberAddrsByNode(probers []*corev1.Pod) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, p := range probers {
		if p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = append(out[p.Spec.NodeName], contract.ProbeSourceAddrs([]*corev1.Pod{p})...)
		}
	}
	return out
}

// allowListGrace is how long after the controller gives a proxy workload a
// new allow-list its proxies may go on reporting the old one (or, for a
// proxy too old to report one, nothing) before the Service says they do
// not apply it. Proxies apply a list within milliseconds of the write.
const allowListGrace = 10 * time.Second

// allowListState returns what svc's proxies report about the allow-list
// its workload carries (nil when it has none), and when a proxy may still
// catch up, how long until it is late.
func (c *Controller) allowListState(svc *corev1.Service, want placement.Workload, own []*corev1.Pod) (*status.AllowList, time.Duration) {
	var annotations map[string]string
	switch {
	case want.Deployment != nil:
		annotations = want.Deployment.Annotations
	case want.DaemonSet != nil:
		annotations = want.DaemonSet.Annotations
	}
	hash := annotations[contract.AnnotationAllowListHash]
	key := cache.MetaObjectToName(svc)
	now := c.now()
	c.mu.Lock()
	if hash == "" {
		delete(c.allowLists, key)
		c.mu.Unlock()
		return nil, 0
	}
	since := c.allowLists[key]
	if since.hash != hash {
		since = allowListSince{hash: hash, at: now}
		c.allowLists[key] = since
	}
	c.mu.Unlock()
	late := now.Sub(since.at) >= allowListGrace
	st := &status.AllowList{Hash: hash}
	var wait time.Duration
	for _, p := range own {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		st.Proxies++
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == contract.PodConditionAllowList {
				cond = &p.Status.Conditions[i]
			}
		}
		who := fmt.Sprintf("proxy %s on node %s", p.Name, p.Spec.NodeName)
		switch {
		case cond != nil && cond.Status == corev1.ConditionFalse:
			st.Failing = append(st.Failing, who+" refuses every client: "+cond.Message)
		case cond != nil && cond.Message == hash:
		case !late:
			wait = allowListGrace - now.Sub(since.at)
		case cond == nil:
			st.Failing = append(st.Failing, who+" does not report its allow-list (a proxy older than the allow-list, which keeps the ranges it started with)")
		default:
			st.Failing = append(st.Failing, who+" applies allow-list "+cond.Message)
		}
	}
	return st, wait
}

// allowListSince is when the controller first wanted a Service's current
// allow-list hash.
type allowListSince struct {
	hash string
	at   time.Time
}
