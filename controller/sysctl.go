package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// refusals remembers, by Service, the nodes whose kubelet refused a proxy
// pod for its sysctls (placement.Refused) and when the newest such pod was
// created. A DaemonSet deletes a refused pod at once, often before a sync
// reads it from the cache; the pod handlers see it (note), and the
// Service's sync forgets a node once a newer pod runs there (forbidden).
type refusals struct {
	mu sync.Mutex
	m  map[cache.ObjectName]map[string]time.Time
}

// note remembers p when the kubelet refused it for its sysctls.
func (r *refusals) note(p *corev1.Pod) {
	node, ok := placement.Refused(p)
	if !ok {
		return
	}
	key, ok := contract.ServiceOf(p.Labels)
	if !ok {
		return
	}
	name := cache.NewObjectName(key.Namespace, key.Name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[cache.ObjectName]map[string]time.Time{}
	}
	if r.m[name] == nil {
		r.m[name] = map[string]time.Time{}
	}
	if at, seen := r.m[name][node]; !seen || p.CreationTimestamp.After(at) {
		r.m[name][node] = p.CreationTimestamp.Time
	}
}

// forbidden returns, sorted, the nodes whose kubelet refuses the sysctls of
// svc's proxy pods own (placement.SysctlForbidden), among nodes, and
// forgets the others.
func (r *refusals) forbidden(svc cache.ObjectName, own []*corev1.Pod, nodes []*corev1.Node) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := placement.SysctlForbidden(r.m[svc], own)
	out = slices.DeleteFunc(out, func(n string) bool {
		return !slices.ContainsFunc(nodes, func(node *corev1.Node) bool { return node.Name == n })
	})
	for n := range r.m[svc] {
		if !slices.Contains(out, n) {
			delete(r.m[svc], n)
		}
	}
	if len(r.m[svc]) == 0 {
		delete(r.m, svc)
	}
	return out
}

// forget drops what is remembered of svc.
func (r *refusals) forget(svc cache.ObjectName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, svc)
}

// sysctlProblems reports, with forwarding by pod sysctls
// (placement.Config.ForwardingSysctls), the nodes whose kubelet refuses
// them: a SysctlForbidden Warning Event and the ConfigValid condition, both
// naming the kubelet flag that allows them.
func (c *Controller) sysctlProblems(svc *corev1.Service, own []*corev1.Pod, nodes []*corev1.Node) []status.Problem {
	if !c.cfg.Placement.ForwardingSysctls {
		return nil
	}
	forbidden := c.refusals.forbidden(cache.MetaObjectToName(svc), own, nodes)
	if len(forbidden) == 0 {
		return nil
	}
	return []status.Problem{{Reason: placement.ReasonSysctlForbidden, Message: placement.SysctlForbiddenMessage(forbidden)}}
}

// placeHomesUnlessRefused places the Service's gated proxy pods
// (placeHomes), unless a kubelet refused one for its sysctls within
// placement.SysctlRetry: then they stay gated until then. It deletes the
// refused pods but the newest (placement.SysctlStale).
func (c *Controller) placeHomesUnlessRefused(ctx context.Context, svc *corev1.Service, want placement.Workload, own []*corev1.Pod, nodes []*corev1.Node, endpoints map[string]bool) error {
	if c.cfg.Placement.ForwardingSysctls {
		for _, p := range placement.SysctlStale(own) {
			err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("deleting proxy pod %s/%s refused for its sysctls: %w", p.Namespace, p.Name, err)
			}
			c.metrics.writes.WithLabelValues("pods", "delete").Inc()
		}
		if wait := placement.SysctlWait(own, c.now()); wait > 0 {
			klog.FromContext(ctx).V(2).Info("Proxy pods wait after a kubelet refused their sysctls", "recheck", wait)
			c.queue.AddAfter(cache.MetaObjectToName(svc), wait)
			return nil
		}
	}
	return c.placeHomes(ctx, svc, want, own, nodes, endpoints)
}
