package cluster

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// Graceful termination, as a kubelet does it: a pod with a deletion
// timestamp keeps its object (Terminating), its network namespace and its
// hostPort rules while its containers shut down. They get SIGTERM, and
// SIGKILL when the pod's deletion grace period runs out; they are not
// restarted; liveness and startup probes stop while readiness probes go on
// (kubelet v1.37 pkg/kubelet/prober/worker.go), so Ready follows the
// readiness probe until the container exits. Then the network is torn
// down, the terminal phase written and the object deleted with grace 0.

// closedChan is a channel that is always closed: kill at once.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// defaultTerminationGrace is the API server's default
// terminationGracePeriodSeconds.
const defaultTerminationGrace = 30 * time.Second

// terminationGrace returns how long a deleted pod's containers have
// between SIGTERM and SIGKILL: the grace period of its deletion, else its
// spec's, else the default.
func terminationGrace(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(max(*pod.DeletionGracePeriodSeconds, 0)) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(max(*pod.Spec.TerminationGracePeriodSeconds, 0)) * time.Second
	}
	return defaultTerminationGrace
}

// beginTermination starts the pod's termination with SIGKILL due after
// grace, or brings SIGKILL forward when grace ends before the deadline
// already set (a second deletion with a shorter grace period). It returns
// true only for the call that started the termination.
func (rt *podRuntime) beginTermination(grace time.Duration) (first bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	at := time.Now().Add(grace)
	first = rt.killAt.IsZero()
	if !first && !at.Before(rt.killAt) {
		return false
	}
	if first {
		close(rt.terminating)
	}
	rt.killAt = at
	if rt.killTimer != nil {
		rt.killTimer.Stop()
	}
	rt.killTimer = time.AfterFunc(grace, func() { rt.killOnce.Do(func() { close(rt.kill) }) })
	return first
}

// isTerminating reports whether the pod's termination has begun.
func (rt *podRuntime) isTerminating() bool {
	select {
	case <-rt.terminating:
		return true
	default:
		return false
	}
}

// terminate begins (or shortens) the graceful termination of a deleted
// pod and, the first time, finishes it in the background, so that the
// kubelet's workers go on syncing other pods meanwhile.
func (k *kubelet) terminate(ctx context.Context, pod *corev1.Pod, rt *podRuntime) {
	grace := terminationGrace(pod)
	if !rt.beginTermination(grace) {
		return
	}
	klog.FromContext(ctx).V(2).Info("Terminating pod", "pod", klog.KObj(pod), "node", rt.node.name, "gracePeriod", grace)
	k.wg.Go(func() { k.finishTermination(ctx, pod.Namespace, pod.Name, rt) })
}

// finishTermination waits for the containers of a terminating pod to exit,
// then removes its network and volumes, writes its terminal status and
// deletes its object. A node taken down meanwhile does so once it is up.
func (k *kubelet) finishTermination(ctx context.Context, namespace, name string, rt *podRuntime) {
	logger := klog.FromContext(ctx).WithValues("pod", rt.key, "node", rt.node.name)
	select {
	case <-rt.done:
	case <-ctx.Done():
		return // the kubelet stops every pod left
	}
	if !rt.node.waitUp(ctx) {
		return
	}
	k.removeRuntime(ctx, rt.uid)
	rt.mu.Lock()
	rt.terminal = true
	rt.mu.Unlock()
	pods := k.client.CoreV1().Pods(namespace)
	if pod, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil && pod.UID == rt.uid {
		if err := k.updateStatus(ctx, pod, rt); err != nil {
			logger.V(2).Info("Writing terminal pod status failed", "err", err)
		}
	}
	err := pods.Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptrInt64(0),
		Preconditions:      &metav1.Preconditions{UID: &rt.uid},
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		// syncPod deletes a terminating pod that has no runtime.
		logger.V(2).Info("Deleting terminated pod failed, retrying", "err", err)
		k.queue.AddRateLimited(rt.key)
		return
	}
	logger.V(2).Info("Terminated pod")
}

// waitUp waits until the node is up (not taken down by NodeDown); false
// when ctx ended first.
func (n *simNode) waitUp(ctx context.Context) bool {
	n.mu.Lock()
	ch := n.upCh
	n.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}
