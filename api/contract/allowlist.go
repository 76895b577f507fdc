package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The allow-list of a Service's proxies travels on its proxy workload (the
// Deployment or DaemonSet object, not its pod template), so that a change
// reaches every running proxy in place, without a rollout: the controller
// writes these annotations, and each proxy watches its own workload.
const (
	// AnnotationSourceRanges on a proxy workload is the Service's
	// loadBalancerSourceRanges, masked and comma-separated; absent or
	// empty means every client.
	AnnotationSourceRanges = Prefix + "source-ranges"
	// AnnotationProbeSources on a proxy workload lists the addresses
	// pulselb's probers probe from (their pod and node addresses),
	// comma-separated. Set only with AnnotationSourceRanges: the proxies
	// let these through whatever the ranges, so the Service is still
	// probed.
	AnnotationProbeSources = Prefix + "probe-sources"
	// AnnotationAllowListHash on a proxy workload is AllowListHash of the
	// two annotations above; each proxy reports the hash it applies.
	AnnotationAllowListHash = Prefix + "allow-list-hash"
)

// AnnotationBetaSourceRanges is the older way to set source ranges, which
// kube-proxy honours when spec.loadBalancerSourceRanges is empty.
const AnnotationBetaSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

// SourceRanges returns the clients svc allows: spec.loadBalancerSourceRanges,
// or when it is empty the annotation AnnotationBetaSourceRanges, as
// kube-proxy reads them; masked ("10.1.2.3/8" is 10.0.0.0/8), in the
// Service's order. An empty result allows every client. The API server
// validates both, so a value that does not parse is unusual: it is left out
// with a Problem, and when nothing is left the Service allows no client
// (never every client because of a typo).
func SourceRanges(svc *corev1.Service) ([]netip.Prefix, []Problem) {
	key, raw := "spec.loadBalancerSourceRanges", svc.Spec.LoadBalancerSourceRanges
	if len(raw) == 0 {
		if v := strings.TrimSpace(svc.Annotations[AnnotationBetaSourceRanges]); v != "" {
			key, raw = AnnotationBetaSourceRanges, strings.Split(v, ",")
		}
	}
	var out []netip.Prefix
	var problems []Problem
	for _, r := range raw {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		p, err := netip.ParsePrefix(r)
		if err != nil {
			problems = append(problems, Problem{Key: key, Value: r, Reason: "not a CIDR", Default: "left out of the allow-list"})
			continue
		}
		out = append(out, p.Masked())
	}
	if len(out) == 0 && len(problems) > 0 {
		// Nobody: the host route of an address no client has, in each family.
		out = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/32"), netip.MustParsePrefix("::/128")}
	}
	return out, problems
}

// AllowListHash identifies an allow-list: "all" when ranges is empty (every
// client), else 16 hex digits of the sha256 of its sorted ranges and
// sorted prober addresses. The controller and the proxy compute it alike,
// so an operator compares what a workload asks for with what each proxy
// applies.
func AllowListHash(ranges []netip.Prefix, probers []netip.Addr) string {
	if len(ranges) == 0 {
		return "all"
	}
	rs := make([]string, len(ranges))
	for i, p := range ranges {
		rs[i] = p.Masked().String()
	}
	ps := make([]string, len(probers))
	for i, a := range probers {
		ps[i] = a.Unmap().String()
	}
	slices.Sort(rs)
	slices.Sort(ps)
	sum := sha256.Sum256([]byte(strings.Join(rs, ",") + ";" + strings.Join(ps, ",")))
	return hex.EncodeToString(sum[:])[:16]
}

// AllowListAnnotations returns the annotations of a proxy workload for
// ranges and probers: none when ranges is empty (every client, no need to
// name the probers), else the three above.
func AllowListAnnotations(ranges []netip.Prefix, probers []netip.Addr) map[string]string {
	if len(ranges) == 0 {
		return nil
	}
	return map[string]string{
		AnnotationSourceRanges:  joinStrings(ranges),
		AnnotationProbeSources:  joinStrings(probers),
		AnnotationAllowListHash: AllowListHash(ranges, probers),
	}
}

// ParseAllowList reads the allow-list from a proxy workload's annotations:
// the ranges (empty: every client) and the probers' addresses. An error
// names the annotation and the value that does not parse.
func ParseAllowList(annotations map[string]string) ([]netip.Prefix, []netip.Addr, error) {
	var ranges []netip.Prefix
	for _, s := range splitList(annotations[AnnotationSourceRanges]) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, nil, fmt.Errorf("annotation %s: %q is not a CIDR", AnnotationSourceRanges, s)
		}
		ranges = append(ranges, p.Masked())
	}
	var probers []netip.Addr
	for _, s := range splitList(annotations[AnnotationProbeSources]) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, nil, fmt.Errorf("annotation %s: %q is not an IP address", AnnotationProbeSources, s)
		}
		probers = append(probers, a.Unmap())
	}
	return ranges, probers, nil
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func joinStrings[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// ProbeSourceAddrs returns the addresses pulselb's probers probe from, given
// the prober pods: each pod's own addresses (a CNI that routes pod
// addresses between nodes keeps them as the source) and its node's (one
// that masquerades traffic leaving the node, as the bridge plugin's ipMasq
// does, puts the node's address there). Pods that have finished are left
// out. Sorted and without repeats, so the list, and the workload
// annotations made from it, change only when a prober's address does.
func ProbeSourceAddrs(probers []*corev1.Pod) []netip.Addr {
	seen := map[netip.Addr]bool{}
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			seen[a.Unmap()] = true
		}
	}
	for _, p := range probers {
		if p.Labels[LabelAppName] != ProberAppName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		add(p.Status.PodIP)
		for _, ip := range p.Status.PodIPs {
			add(ip.IP)
		}
		add(p.Status.HostIP)
		for _, ip := range p.Status.HostIPs {
			add(ip.IP)
		}
	}
	out := make([]netip.Addr, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// PodConditionAllowList is the condition each proxy sets on its own pod
// (and may set on no other, the admission policy pulselb-proxy-own-pod
// says): True with Message the AllowListHash it applies, or False with
// the reason it refuses every client (the list could not be read or
// installed). Its LastTransitionTime is the last change of either.
const PodConditionAllowList = Prefix + "allow-list"

// Reasons of PodConditionAllowList.
const (
	ReasonAllowListApplied  = "Applied"
	ReasonAllowListRejected = "Rejected"
)
