package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// DrainOptions tune Drain.
type DrainOptions struct {
	// Timeout bounds the whole drain, evictions and waiting for the pods
	// to be gone (kubectl drain --timeout); default 2 minutes.
	Timeout time.Duration
	// RetryDelay is the wait before an eviction refused with 429 (a
	// PodDisruptionBudget) is tried again; default 5 s, as kubectl drain.
	RetryDelay time.Duration
}

// DrainResult is what a drain did.
type DrainResult struct {
	// Evicted lists the evicted pods as namespace/name, sorted.
	Evicted []string
	// Refused counts evictions refused with 429 (TooManyRequests) before
	// they succeeded: how often a PodDisruptionBudget held.
	Refused int
}

// Cordon marks a node unschedulable, or schedulable again with false.
func (c *Cluster) Cordon(ctx context.Context, node string, unschedulable bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, unschedulable)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("cordoning node %s (%t): %w", node, unschedulable, err)
	}
	return nil
}

// Drain cordons a node and evicts every pod on it that no DaemonSet owns,
// as `kubectl drain --ignore-daemonsets --delete-emptydir-data` does:
// through the Eviction API (policy/v1), so PodDisruptionBudgets hold, each
// pod in parallel, retrying an eviction refused with 429 after RetryDelay,
// then waiting until every evicted pod is gone. Evicted pods terminate
// gracefully (their own grace period). It fails at the timeout, naming the
// pods still there.
func (c *Cluster) Drain(ctx context.Context, node string, opts DrainOptions) (DrainResult, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("node", node)
	if err := c.Cordon(ctx, node, true); err != nil {
		return DrainResult{}, err
	}
	l, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return DrainResult{}, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	var (
		mu     sync.Mutex
		res    DrainResult
		errs   []error
		wg     sync.WaitGroup
		failed = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
		}
	)
	for _, p := range l.Items {
		if !drainable(&p) {
			continue
		}
		wg.Go(func() {
			key := p.Namespace + "/" + p.Name
			refused, err := c.evict(ctx, &p, opts.RetryDelay)
			mu.Lock()
			res.Refused += refused
			mu.Unlock()
			if err != nil {
				failed(err)
				return
			}
			logger.V(2).Info("Evicted pod", "pod", key, "refused", refused)
			if err := c.waitPodGone(ctx, &p); err != nil {
				failed(err)
				return
			}
			mu.Lock()
			res.Evicted = append(res.Evicted, key)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(res.Evicted)
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("draining node %s: %w", node, err)
	}
	return res, nil
}

// drainable reports whether kubectl drain --ignore-daemonsets evicts p:
// not a DaemonSet's pod, not a static (mirror) pod, not finished.
func drainable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "DaemonSet" {
		return false
	}
	return true
}

// evict asks the Eviction API to evict p until it agrees, retrying a 429
// after retryDelay. It returns how many times it was refused.
func (c *Cluster) evict(ctx context.Context, p *corev1.Pod, retryDelay time.Duration) (int, error) {
	refused := 0
	for {
		err := c.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
		})
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return refused, nil // evicted, or already gone or replaced
		case apierrors.IsTooManyRequests(err):
			refused++
		default:
			return refused, fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		select {
		case <-ctx.Done():
			return refused, fmt.Errorf("evicting pod %s/%s: refused %d times (%w): %w", p.Namespace, p.Name, refused, err, ctx.Err())
		case <-time.After(retryDelay):
		}
	}
}

// waitPodGone waits until p's object is deleted (or replaced by a pod of
// the same name).
func (c *Cluster) waitPodGone(ctx context.Context, p *corev1.Pod) error {
	err := poll(ctx, time.Hour, 200*time.Millisecond, func() (bool, error) {
		cur, err := c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && cur.UID != p.UID, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for evicted pod %s/%s to be gone: %w", p.Namespace, p.Name, err)
	}
	return nil
}
