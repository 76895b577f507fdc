package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
)

// applyWorkload makes the Service's proxy workload want: it applies
// placement.PlanWorkload's plan, stopping at the first failed write.
func (c *Controller) applyWorkload(ctx context.Context, svc *corev1.Service, want placement.Workload) error {
	key := cache.MetaObjectToName(svc)
	current, err := c.workloadsOf(key)
	if err != nil {
		return err
	}
	// The desired name may be held by a workload not labelled for svc,
	// which the plan must see so as to leave it alone.
	switch {
	case want.Deployment != nil:
		if d, err := c.deployments.Get(want.Name); err == nil {
			current = append(current, d)
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting deployment %s/%s: %w", c.cfg.Placement.Namespace, want.Name, err)
		}
	case want.DaemonSet != nil:
		if d, err := c.daemonSets.Get(want.Name); err == nil {
			current = append(current, d)
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("getting daemonset %s/%s: %w", c.cfg.Placement.Namespace, want.Name, err)
		}
	}
	for _, a := range placement.PlanWorkload(key.AsNamespacedName(), want, current).Actions {
		if placement.RollsOut(a) {
			rolling, err := c.rollingWorkloads()
			if err != nil {
				return err
			}
			if !c.rollouts.begin(a.Object.GetName(), rolling, c.now()) {
				klog.FromContext(ctx).V(2).Info("Proxy rollout waits for others to finish", "workload", klog.KRef(c.cfg.Placement.Namespace, a.Object.GetName()),
					"rolling", len(rolling), "maxRollouts", c.rollouts.max)
				c.queue.AddAfter(key, rolloutRetry)
				continue
			}
		}
		if err := c.applyWorkloadAction(ctx, svc, want, a); err != nil {
			return err
		}
	}
	return nil
}

// applyWorkloadAction makes one write of a workload plan, or records why
// there is none.
func (c *Controller) applyWorkloadAction(ctx context.Context, svc *corev1.Service, want placement.Workload, a placement.WorkloadAction) error {
	logger := klog.FromContext(ctx)
	ns := c.cfg.Placement.Namespace
	var op, verb string // for the error; past tense, for the log and the Event
	var err error
	switch a.Verb {
	case placement.WorkloadDelete:
		return c.deleteWorkload(ctx, a)
	case placement.WorkloadNone:
		if a.Reason == placement.PlanNameTaken {
			c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonNameTaken, "%s/%s exists and does not belong to this Service; not touching it", ns, want.Name)
		}
		logger.V(2).Info("Left proxy workload alone", "kind", a.Kind(), "workload", klog.KRef(ns, want.Name), "reason", a.Reason)
		return nil
	case placement.WorkloadCreate:
		op, verb, err = "creating", "created", c.writeWorkload(ctx, a)
		if apierrors.IsAlreadyExists(err) {
			// Created by an earlier sync that the cache has not caught
			// up with yet; the next event brings it.
			return nil
		}
	case placement.WorkloadUpdate:
		op, verb, err = "updating", "updated", c.writeWorkload(ctx, a)
	}
	if err != nil {
		return fmt.Errorf("%s %s %s/%s: %w", op, strings.ToLower(a.Kind()), ns, want.Name, err)
	}
	resource := workloadResource(a.Kind())
	c.metrics.writes.WithLabelValues(resource, verb).Inc()
	if _, budget := a.Object.(*policyv1.PodDisruptionBudget); budget {
		logger.Info("Applied proxy disruption budget", "verb", verb, "budget", klog.KRef(ns, a.Object.GetName()), "reason", a.Reason)
		return nil
	}
	logger.Info("Applied proxy workload", "verb", verb, "kind", resource, "workload", klog.KRef(ns, want.Name), "replicas", want.Replicas, "reason", a.Reason)
	c.recorder.Eventf(svc, corev1.EventTypeNormal, ReasonProxyApplied, "%s %s %s/%s with %d replicas", verb, resource, ns, want.Name, want.Replicas)
	return nil
}

// writeWorkload makes a's write through the typed client of its object's
// kind.
func (c *Controller) writeWorkload(ctx context.Context, a placement.WorkloadAction) error {
	ns := c.cfg.Placement.Namespace
	switch o := a.Object.(type) {
	case *appsv1.Deployment:
		return writeWith(ctx, c.client.AppsV1().Deployments(ns), a.Verb, o)
	case *appsv1.DaemonSet:
		return writeWith(ctx, c.client.AppsV1().DaemonSets(ns), a.Verb, o)
	case *policyv1.PodDisruptionBudget:
		return writeWith(ctx, c.client.PolicyV1().PodDisruptionBudgets(ns), a.Verb, o)
	}
	return nil
}

// workloadClient is what writeWith needs of a typed clientset client.
type workloadClient[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
}

func writeWith[T placement.WorkloadObject](ctx context.Context, client workloadClient[T], verb placement.WorkloadVerb, obj T) error {
	var err error
	switch verb {
	case placement.WorkloadCreate:
		_, err = client.Create(ctx, obj, metav1.CreateOptions{})
	case placement.WorkloadUpdate:
		_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
	case placement.WorkloadDelete:
		uid := obj.GetUID()
		err = client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{
			PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
			Preconditions:     &metav1.Preconditions{UID: &uid},
		})
	}
	return err
}

// workloadResource returns the API resource of a workload kind, the label
// value of the writes metric.
func workloadResource(kind string) string {
	return strings.ToLower(kind) + "s"
}

// workloadsOf returns the cached proxy workloads labelled for key. They are
// the cache's: not to be changed.
func (c *Controller) workloadsOf(key cache.ObjectName) ([]placement.WorkloadObject, error) {
	sel := labels.SelectorFromSet(labels.Set{
		contract.LabelAppName:          contract.ProxyAppName,
		contract.LabelServiceNamespace: key.Namespace,
		contract.LabelServiceName:      key.Name,
	})
	var out []placement.WorkloadObject
	for _, idx := range c.workloadIndexes {
		objs, err := idx.ByIndex(serviceIndex, key.String())
		if err != nil {
			return nil, fmt.Errorf("listing proxy workloads: %w", err)
		}
		for _, o := range objs {
			w, ok := o.(placement.WorkloadObject)
			if ok && w.GetNamespace() == c.cfg.Placement.Namespace && sel.Matches(labels.Set(w.GetLabels())) {
				out = append(out, w)
			}
		}
	}
	return out, nil
}

func (c *Controller) listWorkloads(sel labels.Selector) ([]placement.WorkloadObject, error) {
	deps, err := c.deployments.List(sel)
	if err != nil {
		return nil, fmt.Errorf("listing deployments: %w", err)
	}
	dss, err := c.daemonSets.List(sel)
	if err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	pdbs, err := c.budgets.List(sel)
	if err != nil {
		return nil, fmt.Errorf("listing poddisruptionbudgets: %w", err)
	}
	out := make([]placement.WorkloadObject, 0, len(deps)+len(dss)+len(pdbs))
	for _, d := range deps {
		out = append(out, d)
	}
	for _, d := range dss {
		out = append(out, d)
	}
	for _, b := range pdbs {
		out = append(out, b)
	}
	return out, nil
}

// deleteWorkload applies a delete of a workload plan. A workload already
// gone counts as deleted.
func (c *Controller) deleteWorkload(ctx context.Context, a placement.WorkloadAction) error {
	logger := klog.FromContext(ctx)
	ns, name := c.cfg.Placement.Namespace, a.Object.GetName()
	err := c.writeWorkload(ctx, a)
	resource := workloadResource(a.Kind())
	switch {
	case apierrors.IsConflict(err):
		// The UID precondition failed: the workload was deleted and
		// re-created since the cache saw it. The new one's event brings
		// its Service back, to be planned on what it is.
		logger.V(2).Info("Not deleting re-created proxy workload", "kind", a.Kind(), "workload", klog.KRef(ns, name), "reason", a.Reason)
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("deleting %s %s/%s: %w", resource, ns, name, err)
	}
	if _, ok := a.Object.(*appsv1.Deployment); ok {
		// Its ReplicaSets are the garbage collector's, and the reaper's
		// if they outstay reapGrace.
		if svc, ok := contract.ServiceOf(a.Object.GetLabels()); ok {
			c.reaper.mourn(a.Object.GetUID(), svc, name, c.now())
		}
	}
	c.metrics.writes.WithLabelValues(resource, "delete").Inc()
	logger.Info("Deleted proxy workload", "kind", a.Kind(), "workload", klog.KRef(ns, name), "reason", a.Reason)
	return nil
}

// deleteWorkloads deletes every proxy workload of key, going on after a
// failure so that one stuck workload does not keep the others.
func (c *Controller) deleteWorkloads(ctx context.Context, key cache.ObjectName) error {
	current, err := c.workloadsOf(key)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range placement.PlanWorkload(key.AsNamespacedName(), placement.Workload{}, current).Actions {
		errs = append(errs, c.deleteWorkload(ctx, a))
	}
	return errors.Join(errs...)
}

// collectOrphans deletes proxy workloads whose Service no longer exists or
// is no longer served: left behind when a Service was deleted or changed
// while no controller ran.
func (c *Controller) collectOrphans(ctx context.Context) error {
	all, err := c.listWorkloads(everything)
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range all {
		if w.GetLabels()[contract.LabelManagedBy] != contract.ManagedBy {
			continue
		}
		key, ok := contract.ServiceOf(w.GetLabels())
		if !ok {
			continue
		}
		svc, err := c.services.Services(key.Namespace).Get(key.Name)
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		if err == nil && c.cfg.Services.Active(svc) {
			continue
		}
		for _, a := range placement.PlanWorkload(key, placement.Workload{}, []placement.WorkloadObject{w}).Actions {
			klog.FromContext(ctx).Info("Collecting orphaned proxy workload", "service", key, "kind", a.Kind(), "workload", w.GetName())
			errs = append(errs, c.deleteWorkload(ctx, a))
		}
	}
	return errors.Join(errs...)
}
