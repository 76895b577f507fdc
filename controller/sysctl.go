package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// sysctlProblems reports, with forwarding by pod sysctls
// (placement.Config.ForwardingSysctls), the nodes whose kubelet refuses
// them: a SysctlForbidden Warning Event and the ConfigValid condition, both
// naming the kubelet flag that allows them.
func (c *Controller) sysctlProblems(own []*corev1.Pod) []status.Problem {
	if !c.cfg.Placement.ForwardingSysctls {
		return nil
	}
	nodes := placement.SysctlForbidden(own)
	if len(nodes) == 0 {
		return nil
	}
	return []status.Problem{{Reason: placement.ReasonSysctlForbidden, Message: placement.SysctlForbiddenMessage(nodes)}}
}

// placeHomesUnlessRefused places the Service's gated proxy pods
// (placeHomes), unless a kubelet refused one for its sysctls within
// placement.SysctlRetry: then they stay gated until then.
func (c *Controller) placeHomesUnlessRefused(ctx context.Context, svc *corev1.Service, want placement.Workload, own []*corev1.Pod, nodes []*corev1.Node, endpoints map[string]bool) error {
	if c.cfg.Placement.ForwardingSysctls {
		if wait := placement.SysctlWait(own, c.now()); wait > 0 {
			klog.FromContext(ctx).V(2).Info("Proxy pods wait after a kubelet refused their sysctls", "recheck", wait)
			c.queue.AddAfter(cache.MetaObjectToName(svc), wait)
			return nil
		}
	}
	return c.placeHomes(ctx, svc, want, own, nodes, endpoints)
}
