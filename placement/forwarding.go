package placement

import (
	"cmp"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
)

// How a proxy pod turns on forwarding: a privileged init container
// (proxy-init) by default, or the pod's own sysctls
// (Config.ForwardingSysctls), which the kubelet sets in the pod's network
// namespace before any container starts and so needs no privileged
// container at all.
const (
	// SysctlIPv4Forward and SysctlIPv6Forward are the forwarding sysctls
	// a proxy pod sets with Config.ForwardingSysctls; proxy-init writes
	// the same two.
	SysctlIPv4Forward = "net.ipv4.ip_forward"
	SysctlIPv6Forward = "net.ipv6.conf.all.forwarding"
	// ReasonSysctlForbidden is the pod status reason of a pod the kubelet
	// refused because it does not allow one of its sysctls.
	ReasonSysctlForbidden = "SysctlForbidden"
)

// KubeletSysctlFlag is the kubelet flag that allows the forwarding sysctls
// of Config.ForwardingSysctls, for both families.
const KubeletSysctlFlag = "--allowed-unsafe-sysctls=" + SysctlIPv4Forward + "," + SysctlIPv6Forward

// initContainers returns the proxy pod's init containers: proxy-init, which
// turns forwarding on, unless the pod's sysctls do (podSecurity).
func initContainers(cfg Config, clusterIPs []string) []corev1.Container {
	if cfg.ForwardingSysctls {
		return nil
	}
	args := []string{"proxy-init"}
	if hasIPv6(clusterIPs) {
		args = append(args, "--ipv6")
	}
	return []corev1.Container{{
		Name:            ContainerProxyInit,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Args:            args,
		// The image runs as a non-root user by default; writing
		// /proc/sys needs root (and privileged).
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)},
		Resources:       resources("10m", "16Mi", "32Mi"),
	}}
}

// podSecurity returns the proxy pod's security context: with
// cfg.ForwardingSysctls, the forwarding sysctls of the families the proxy
// forwards, which the kubelet sets in the pod's network namespace before
// any container starts; else none.
func podSecurity(cfg Config, clusterIPs []string) *corev1.PodSecurityContext {
	if !cfg.ForwardingSysctls {
		return nil
	}
	sysctls := []corev1.Sysctl{{Name: SysctlIPv4Forward, Value: "1"}}
	if hasIPv6(clusterIPs) {
		sysctls = append(sysctls, corev1.Sysctl{Name: SysctlIPv6Forward, Value: "1"})
	}
	return &corev1.PodSecurityContext{Sysctls: sysctls}
}

// Refused reports whether the kubelet refused proxy pod p for its sysctls
// (ReasonSysctlForbidden), and if so on which node.
func Refused(p *corev1.Pod) (node string, ok bool) {
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodFailed || p.Status.Reason != ReasonSysctlForbidden {
		return "", false
	}
	return p.Spec.NodeName, true
}

// SysctlForbidden returns, sorted, the nodes whose kubelet refuses a
// Service's proxy pods' sysctls: those of refused (node → when the newest
// pod refused there was created) and of the refused pods among pods, where
// no newer pod of pods runs. A Deployment's refused pod stays, Failed; a
// DaemonSet's is deleted at once and replaced after a back-off, so the
// caller remembers refusals in refused. A node stays listed until a pod
// runs there, such as once its kubelet allows the sysctls or the
// controller no longer sets them.
func SysctlForbidden(refused map[string]time.Time, pods []*corev1.Pod) []string {
	newest := maps.Clone(refused)
	if newest == nil {
		newest = map[string]time.Time{}
	}
	for _, p := range pods {
		if n, ok := Refused(p); ok {
			if at, seen := newest[n]; !seen || p.CreationTimestamp.After(at) {
				newest[n] = p.CreationTimestamp.Time
			}
		}
	}
	for _, p := range pods {
		if at, ok := newest[p.Spec.NodeName]; ok && p.Status.Phase == corev1.PodRunning && !p.CreationTimestamp.Time.Before(at) {
			delete(newest, p.Spec.NodeName)
		}
	}
	return slices.Sorted(maps.Keys(newest))
}

// SysctlForbiddenMessage says that the kubelets of nodes refuse the proxy
// pods' forwarding sysctls, and how to fix it.
func SysctlForbiddenMessage(nodes []string) string {
	return "the kubelet refuses the proxy pods' forwarding sysctls on " + contract.ShortList(nodes, 10) +
		": start it with " + KubeletSysctlFlag + ", or run the controller without --proxy-sysctls (the chart's proxy.sysctls) " +
		"to turn forwarding on with the privileged proxy-init container"
}

// SysctlRetry is how long a Service's new proxy pods wait, gated, after
// one was refused for its sysctls (ReasonSysctlForbidden) before the next
// is placed: a Deployment replaces a refused pod at once, and without the
// wait its ReplicaSet and the kubelet would make and refuse pods as fast
// as they can. A DaemonSet backs off by itself.
const SysctlRetry = time.Minute

// SysctlWait returns how long the gated proxy pods of pods' Service wait
// before being placed (SysctlRetry after the newest refusal); 0 when they
// need not.
func SysctlWait(pods []*corev1.Pod, now time.Time) time.Duration {
	var newest time.Time
	for _, p := range pods {
		if _, ok := Refused(p); ok && p.CreationTimestamp.After(newest) {
			newest = p.CreationTimestamp.Time
		}
	}
	if newest.IsZero() {
		return 0
	}
	return max(newest.Add(SysctlRetry).Sub(now), 0)
}

// SysctlStale returns the refused pods (Refused) of pods but the newest:
// a Deployment's stay, Failed, and one a minute (SysctlRetry) would pile
// up while a kubelet refuses; the newest still says when the last refusal
// was, and the controller remembers the others' nodes.
func SysctlStale(pods []*corev1.Pod) []*corev1.Pod {
	var refused []*corev1.Pod
	for _, p := range pods {
		if _, ok := Refused(p); ok {
			refused = append(refused, p)
		}
	}
	slices.SortFunc(refused, func(a, b *corev1.Pod) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	if len(refused) < 2 {
		return nil
	}
	return refused[:len(refused)-1]
}
