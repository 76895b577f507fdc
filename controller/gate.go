package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// Reasons of the probed readiness gate condition.
const (
	reasonProbedUp     = "ProbedUp"
	reasonNotProbed    = "HealthChecksOff"
	gateMessageProbed  = "the probers found every port of the Service served on this node"
	gateMessageNoCheck = "the controller judges no health (--probe-reports=false)"
)

// gateWaiting returns the proxy pods of own whose probed readiness gate is
// still closed: the gate is in their spec, they are scheduled, running and
// not terminating, and the condition is not True yet.
func gateWaiting(own []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range own {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning ||
			!slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == contract.PodConditionProbed }) {
			continue
		}
		if slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == contract.PodConditionProbed && c.Status == corev1.ConditionTrue
		}) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// openGates sets the probed readiness gate of svc's proxy pods whose node
// is now found serving by the rule that adds a node to the status: its
// beacon not Down, its ports Up by quorum (or with no vantage to probe
// them). Until then a pod is not Ready, so a rollout does not replace an old
// proxy with it. A gate once open stays open: a later failure is the
// verdicts' and the restart rule's to act on, not a rollout's.
func (c *Controller) openGates(ctx context.Context, svc *corev1.Service, own []*corev1.Pod, publishWhen string) error {
	waiting := gateWaiting(own)
	if len(waiting) == 0 {
		return nil
	}
	name := cache.MetaObjectToName(svc).String()
	for _, p := range waiting {
		reason, msg := reasonNotProbed, gateMessageNoCheck
		if c.reports != nil {
			if status.NodeHealth(c.nodeVerdicts(svc, name, p.Spec.NodeName, false), publishWhen).Down {
				continue
			}
			reason, msg = reasonProbedUp, gateMessageProbed
		}
		cond := map[string]any{"type": contract.PodConditionProbed, "status": corev1.ConditionTrue, "reason": reason,
			"message": msg, "lastTransitionTime": metav1.NewTime(c.now())}
		body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
		if err != nil {
			return fmt.Errorf("encoding pod condition patch: %w", err)
		}
		_, err = c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("opening the readiness gate of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		c.metrics.writes.WithLabelValues("pods/status", "patch").Inc()
		klog.FromContext(ctx).Info("Opened proxy pod's readiness gate", "pod", klog.KObj(p), "node", p.Spec.NodeName, "reason", reason)
	}
	return nil
}

// placeHomes removes the scheduling gate of svc's gated proxy pods, each
// pinned to the node of the proxy it replaces (or, for
// externalTrafficPolicy Local, to a node in endpoints) or left to the
// scheduler (placement.Homes), and deletes pods pinned to a node that can no longer
// host them. A pod whose home is still held by an older proxy stays gated;
// the Service is looked at again when it may stop waiting.
func (c *Controller) placeHomes(ctx context.Context, svc *corev1.Service, want placement.Workload, own []*corev1.Pod, nodes []*corev1.Node, endpoints map[string]bool) error {
	if want.Deployment == nil || !slices.ContainsFunc(own, func(p *corev1.Pod) bool { return placement.Gated(p) || contract.PinnedNode(p) != "" }) {
		return nil
	}
	logger := klog.FromContext(ctx)
	replicas, maxUnavailable := int(ptr.Deref(want.Deployment.Spec.Replicas, 1)), 0
	if ru := want.Deployment.Spec.Strategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		var err error
		if maxUnavailable, err = intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, replicas, false); err != nil {
			return fmt.Errorf("reading the rollout strategy of %s: %w", want.Deployment.Name, err)
		}
	}
	var others []*corev1.Pod
	if slices.ContainsFunc(own, placement.Gated) {
		var err error
		if others, err = c.pods.List(everything); err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
	}
	// The pods an earlier sync placed, as placed, though the cache may
	// still show them gated: their homes are taken.
	view := slices.Clone(own)
	for i, p := range own {
		if node, ok := c.placed.recently(p.UID, c.now()); ok && placement.Gated(p) {
			view[i] = placement.AsPlaced(p, node)
		}
	}
	homes := placement.Homes(placement.HomeInput{
		Pods:           view,
		Others:         others,
		Published:      publishedNodes(svc),
		Eligible:       want.EligibleNodes,
		Replicas:       replicas,
		MaxUnavailable: maxUnavailable,
		Endpoints:      endpoints,
		Now:            c.now(),
	})
	byName := make(map[string]*corev1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	var errs []error
	for _, h := range homes {
		p := h.Pod
		if _, ok := c.placed.recently(p.UID, c.now()); ok {
			continue // placed by an earlier sync the cache has not caught up with
		}
		switch {
		case h.Wait > 0:
			logger.V(2).Info("Proxy pod waits for its home", "pod", klog.KObj(p), "reason", h.Reason, "recheck", h.Wait)
			c.queue.AddAfter(cache.MetaObjectToName(svc), h.Wait)
			continue
		case h.Delete:
			err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting proxy pod %s/%s pinned to node %s: %w", p.Namespace, p.Name, contract.PinnedNode(p), err))
				continue
			}
			c.metrics.writes.WithLabelValues("pods", "delete").Inc()
			logger.Info("Deleted proxy pod pinned to a node that cannot host it", "pod", klog.KObj(p), "node", contract.PinnedNode(p), "reason", h.Reason)
			continue
		}
		node, hostname := h.Node, ""
		if n := byName[node]; n != nil {
			hostname = n.Labels[corev1.LabelHostname]
		}
		if hostname == "" {
			node = "" // no label to pin it with: the scheduler's choice
		}
		patch, err := placement.PinPatch(node, hostname)
		if err != nil {
			return err
		}
		_, err = c.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue // gone: its event brings the Service back
		case err != nil:
			errs = append(errs, fmt.Errorf("placing proxy pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		c.placed.add(p.UID, node, c.now())
		c.metrics.writes.WithLabelValues("pods", "patch").Inc()
		logger.Info("Placed proxy pod", "pod", klog.KObj(p), "node", node, "reason", h.Reason)
	}
	return errors.Join(errs...)
}

// publishedNodes returns the nodes svc is published on, from the annotation
// pulselb writes with its status.
func publishedNodes(svc *corev1.Service) []string {
	var out []string
	for _, n := range strings.Split(svc.Annotations[contract.AnnotationNodes], ",") {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// placedSeen is how long a placed pod is not placed again while the cache
// still shows it gated.
const placedSeen = 10 * time.Second

// placedPods remembers the proxy pods a sync placed and where, so that the
// next sync, from a cache that has not seen the patch yet, neither places
// them again nor gives their homes to another pod. It is safe for
// concurrent use by the sync workers.
type placedPods struct {
	mu sync.Mutex
	at map[types.UID]placedAt
}

// placedAt is when a pod was placed, and on which node ("": released to
// the scheduler).
type placedAt struct {
	at   time.Time
	node string
}

// add records that pod uid was placed on node at now.
func (p *placedPods) add(uid types.UID, node string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[types.UID]placedAt{}
	}
	for u, pa := range p.at {
		if now.Sub(pa.at) > placedSeen {
			delete(p.at, u)
		}
	}
	p.at[uid] = placedAt{at: now, node: node}
}

// recently returns the node pod uid was placed on, if it was placed less
// than placedSeen before now.
func (p *placedPods) recently(uid types.UID, now time.Time) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pa, ok := p.at[uid]
	if !ok || now.Sub(pa.at) > placedSeen {
		return "", false
	}
	return pa.node, true
}
