package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
)

// A proxy Deployment's ReplicaSets are the garbage collector's to delete
// once pulselb deletes the Deployment. The fault soak found one it never
// deleted: the ReplicaSet of a Service deleted and re-created, its
// controller reference naming the old Deployment's UID, kept three proxies
// of the old template running for forty minutes, holding the new
// proxies' host ports (docs/soak.md). The reaper sees to pulselb's own: a
// proxy ReplicaSet whose Deployment is gone and that is still there
// reapGrace later is scaled to zero, so that the ReplicaSet controller
// stops its proxies gracefully, each draining as in any scale-down, and
// is deleted once it has none.

// Reaper timing: how long the garbage collector has before the reaper
// acts, and how often the leader looks.
const (
	reapGrace  = 15 * time.Second
	reapPeriod = 5 * time.Second
)

// ghost is a proxy Deployment that is gone, or taken to be.
type ghost struct {
	service types.NamespacedName
	name    string
	since   time.Time
	// confirmed is set once a read from the API server found no
	// Deployment of that name and UID.
	confirmed bool
}

// reaper holds the ghosts the leader has yet to see the ReplicaSets of
// gone.
type reaper struct {
	mu     sync.Mutex
	ghosts map[types.UID]*ghost
}

// mourn records that the Deployment uid of svc, named name, is gone as of
// at (kept at its first report).
func (r *reaper) mourn(uid types.UID, svc types.NamespacedName, name string, at time.Time) {
	if uid == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ghosts == nil {
		r.ghosts = map[types.UID]*ghost{}
	}
	if _, ok := r.ghosts[uid]; !ok {
		r.ghosts[uid] = &ghost{service: svc, name: name, since: at}
	}
}

// due returns the ghosts mourned at least reapGrace before now.
func (r *reaper) due(now time.Time) map[types.UID]ghost {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID]ghost{}
	for uid, g := range r.ghosts {
		if now.Sub(g.since) >= reapGrace {
			out[uid] = *g
		}
	}
	return out
}

func (r *reaper) confirm(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.ghosts[uid]; ok {
		g.confirmed = true
	}
}

func (r *reaper) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ghosts, uid)
}

// reset forgets every ghost: a new term finds them again (findGhosts).
func (r *reaper) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ghosts = nil
}

// proxyReplicaSets returns the selector of the ReplicaSets of pulselb's
// proxy Deployments (their pods' labels), of svc's alone when svc is set.
func proxyReplicaSets(svc *types.NamespacedName) labels.Selector {
	set := labels.Set{contract.LabelAppName: contract.ProxyAppName, contract.LabelManagedBy: contract.ManagedBy}
	if svc != nil {
		set[contract.LabelServiceNamespace] = svc.Namespace
		set[contract.LabelServiceName] = svc.Name
	}
	return labels.SelectorFromSet(set)
}

// deploymentOf returns the controlling Deployment reference of rs, if a
// Deployment controls it.
func deploymentOf(rs *appsv1.ReplicaSet) (*metav1.OwnerReference, bool) {
	ref := metav1.GetControllerOf(rs)
	if ref == nil || ref.Kind != "Deployment" {
		return nil, false
	}
	return ref, true
}

// findGhosts mourns, at the start of a term, the Deployments named by the
// controller references of proxy ReplicaSets that the cache does not hold:
// left by a term that ended before it reaped them, or by a Deployment
// deleted while no controller ran. One list of the proxy ReplicaSets.
func (c *Controller) findGhosts(ctx context.Context) error {
	c.reaper.reset()
	ns := c.cfg.Placement.Namespace
	list, err := c.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: proxyReplicaSets(nil).String()})
	if err != nil {
		return fmt.Errorf("listing proxy replicasets: %w", err)
	}
	for i := range list.Items {
		rs := &list.Items[i]
		ref, ok := deploymentOf(rs)
		if !ok {
			continue
		}
		if d, err := c.deployments.Get(ref.Name); err == nil && d.UID == ref.UID {
			continue
		}
		svc, ok := contract.ServiceOf(rs.Labels)
		if !ok {
			continue
		}
		// Its age counts toward the grace: one left long ago is reaped at
		// the first sweep.
		c.reaper.mourn(ref.UID, svc, ref.Name, rs.CreationTimestamp.Time)
	}
	return nil
}

// reap runs a sweep every reapPeriod until ctx is done.
func (c *Controller) reap(ctx context.Context) {
	t := time.NewTicker(reapPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.sweepGhosts(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Reaping proxy ReplicaSets of deleted Deployments failed; retrying", "in", reapPeriod)
		}
	}
}

// sweepGhosts takes each due ghost's ReplicaSets one step further: scaled
// to zero, then deleted once they run no pod. A ghost whose ReplicaSets
// are all gone is forgotten; so is one whose Deployment turns out to be
// there after all.
func (c *Controller) sweepGhosts(ctx context.Context) error {
	var errs []error
	for uid, g := range c.reaper.due(c.now()) {
		if err := c.sweepGhost(ctx, uid, g); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) sweepGhost(ctx context.Context, uid types.UID, g ghost) error {
	ns := c.cfg.Placement.Namespace
	apps := c.client.AppsV1()
	list, err := apps.ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: proxyReplicaSets(&g.service).String()})
	if err != nil {
		return fmt.Errorf("listing the replicasets of %s: %w", g.service, err)
	}
	var left []*appsv1.ReplicaSet
	for i := range list.Items {
		if ref, ok := deploymentOf(&list.Items[i]); ok && ref.UID == uid {
			left = append(left, &list.Items[i])
		}
	}
	if len(left) == 0 {
		c.reaper.forget(uid)
		return nil
	}
	if !g.confirmed {
		// The cache may lag: ask the API server whether the Deployment is
		// there (list by name: the Role grants no get).
		deps, err := apps.Deployments(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", g.name).String()})
		if err != nil {
			return fmt.Errorf("looking for deployment %s/%s: %w", ns, g.name, err)
		}
		for _, d := range deps.Items {
			if d.UID == uid {
				c.reaper.forget(uid)
				return nil
			}
		}
		c.reaper.confirm(uid)
	}
	logger := klog.FromContext(ctx)
	var errs []error
	for _, rs := range left {
		switch {
		case rs.DeletionTimestamp != nil:
			// Being deleted already.
		case rs.Spec.Replicas == nil || *rs.Spec.Replicas > 0:
			patch := []byte(`{"spec":{"replicas":0}}`)
			if _, err := apps.ReplicaSets(ns).Patch(ctx, rs.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("scaling replicaset %s/%s to zero: %w", ns, rs.Name, err))
				continue
			}
			c.metrics.writes.WithLabelValues("replicasets", "patch").Inc()
			logger.Info("Scaling to zero a proxy ReplicaSet whose Deployment is gone", "service", g.service, "replicaset", klog.KObj(rs),
				"deployment", g.name, "uid", uid, "pods", rs.Status.Replicas)
		case rs.Status.Replicas == 0:
			rsUID := rs.UID
			err := apps.ReplicaSets(ns).Delete(ctx, rs.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rsUID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting replicaset %s/%s: %w", ns, rs.Name, err))
				continue
			}
			c.metrics.writes.WithLabelValues("replicasets", "delete").Inc()
			logger.Info("Deleted a proxy ReplicaSet whose Deployment is gone", "service", g.service, "replicaset", klog.KObj(rs), "deployment", g.name, "uid", uid)
		}
	}
	return errors.Join(errs...)
}
