package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/placement"
)

// LocalEndpointGrace is how long a node that had an endpoint of an
// externalTrafficPolicy Local Service still counts as having one, for the
// placement of its proxies, after its last one went. A backend replaced on
// its node leaves it without an endpoint for a moment: a DaemonSet's rolling
// update deletes the old pod and only then creates the new one, which joins
// the EndpointSlice once it has an address, seconds later. Within the grace
// the node's proxy stays, and with it the address clients hold; a node whose
// endpoint does not come back loses its proxy when the grace is over. The
// status is not held: it publishes only nodes with a serving endpoint.
const LocalEndpointGrace = 30 * time.Second

// endpointGaps remembers, for each externalTrafficPolicy Local Service,
// the nodes seen with an endpoint and, for those that have none now, since
// when: the zero time while they have one. Only this controller's own
// observations count, and the nodes a Service is published on when it is
// first seen (they had a serving endpoint when the status was written).
type endpointGaps struct {
	mu sync.Mutex
	m  map[cache.ObjectName]map[string]time.Time
}

// hold records present, the nodes with an endpoint of the Service key at
// now, and returns the nodes without one whose last endpoint went less than
// LocalEndpointGrace ago, and how long until the first of those grace
// periods is over (zero when there is none). published seeds a Service seen
// for the first time.
func (g *endpointGaps) hold(key cache.ObjectName, present map[string]bool, published []string, now time.Time) (held map[string]bool, next time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[cache.ObjectName]map[string]time.Time{}
	}
	nodes := g.m[key]
	if nodes == nil {
		nodes = map[string]time.Time{}
		for _, n := range published {
			nodes[n] = time.Time{}
		}
		g.m[key] = nodes
	}
	for n := range present {
		nodes[n] = time.Time{}
	}
	held = map[string]bool{}
	for n, since := range nodes {
		if present[n] {
			continue
		}
		if since.IsZero() {
			since = now
			nodes[n] = now
		}
		left := since.Add(LocalEndpointGrace).Sub(now)
		if left <= 0 {
			delete(nodes, n)
			continue
		}
		held[n] = true
		if next == 0 || left < next {
			next = left
		}
	}
	return held, next
}

// forget drops what is remembered of the Service key.
func (g *endpointGaps) forget(key cache.ObjectName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, key)
}

// localNodes returns the nodes where the proxies of svc, an
// externalTrafficPolicy Local Service, belong: those with an endpoint that
// serves or is starting (endpointNodes) and, while there is such a node, those
// whose last endpoint went less than LocalEndpointGrace ago. With no
// endpoint anywhere it returns none, and nothing moves. It queues svc again
// for when the first grace period is over.
func (c *Controller) localNodes(svc *corev1.Service, present map[string]bool) map[string]bool {
	key := cache.MetaObjectToName(svc)
	held, next := c.endpointGaps.hold(key, present, publishedNodes(svc), c.now())
	if next > 0 {
		c.queue.AddAfter(key, next)
	}
	if len(present) == 0 {
		return present
	}
	out := make(map[string]bool, len(present)+len(held))
	for n := range present {
		out[n] = true
	}
	for n := range held {
		out[n] = true
	}
	return out
}

// endpointNodes returns the nodes with an endpoint of svc that serves (ready,
// or terminating and still serving), and the nodes with an endpoint that
// serves or is not terminating (still starting).
func (c *Controller) endpointNodes(svc *corev1.Service) (ready, present map[string]bool, err error) {
	slices, err := c.slices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name}))
	if err != nil {
		return nil, nil, fmt.Errorf("listing endpoint slices: %w", err)
	}
	ready, present = map[string]bool{}, map[string]bool{}
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.NodeName == nil {
				continue
			}
			// kube-proxy sends Local traffic to a node's terminating
			// endpoints that still serve when it has no ready one: such a
			// node still serves, and its proxy stays until they are gone.
			serving := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if ep.Conditions.Serving != nil {
				serving = *ep.Conditions.Serving
			}
			if serving {
				ready[*ep.NodeName] = true
			}
			if serving || ep.Conditions.Terminating == nil || !*ep.Conditions.Terminating {
				present[*ep.NodeName] = true
			}
		}
	}
	return ready, present, nil
}

// moveLocalProxies deletes the Deployment proxy pods of an
// externalTrafficPolicy Local Service that run on a node that is not among
// nodes (localNodes), while some node is. Pod affinity put them next to a
// backend, but the scheduler does not re-check affinity once a pod runs:
// without this, proxies would stay where the backends were, forwarding to
// a NodePort with no local endpoint. The ReplicaSet's replacement is
// placed next to a backend again (or waits when those nodes already run
// one). Nothing moves while no node has an endpoint, so a Service scaled to
// zero keeps its proxies.
func (c *Controller) moveLocalProxies(ctx context.Context, own []*corev1.Pod, nodes map[string]bool) error {
	if len(nodes) == 0 {
		return nil
	}
	var errs []error
	for _, p := range own {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || nodes[p.Spec.NodeName] {
			continue
		}
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &p.UID},
		})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			continue // gone, or replaced by a pod of the same name
		case err != nil:
			errs = append(errs, fmt.Errorf("deleting proxy pod %s/%s on node %s without a local endpoint: %w", p.Namespace, p.Name, p.Spec.NodeName, err))
			continue
		}
		c.metrics.writes.WithLabelValues("pods", "delete").Inc()
		klog.FromContext(ctx).Info("Deleted proxy pod on a node without a local endpoint", "pod", klog.KObj(p), "node", p.Spec.NodeName)
	}
	return errors.Join(errs...)
}

// forwardsToNodePort reports whether proxy pod p forwards to its node's
// NodePorts (externalTrafficPolicy Local) rather than to the ClusterIP.
func forwardsToNodePort(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == placement.EnvNodePortTarget {
				return true
			}
		}
	}
	return false
}
