package main

import (
	"context"
	"log"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/test/bench/loopnodes"
)

// proxyPodPrefix begins the names of the proxy pods the benchmark makes.
const proxyPodPrefix = "pulselb-svc-"

// remaker stands in for the ReplicaSets and kubelets the harness does not
// run. The controller deletes a proxy pod it judges broken (a port Down on
// a node whose beacon is Up), at any time, not only on a trial's victim:
// the remaker ends such a pod's grace period at once, as a kubelet would
// once the container stopped, and makes the pod again on the same node, as
// the ReplicaSet and the scheduler would. A pod of a held node (cut off by
// the trial running) is made again when release heals that node, so that a
// cut-off node does not get a Ready proxy nobody can reach.
type remaker struct {
	cs kubernetes.Interface

	mu      sync.Mutex
	held    map[string]bool
	pending map[string]deletedPod // by pod name
	remade  int
}

// deletedPod is what it takes to make a deleted proxy pod again.
type deletedPod struct {
	node   string
	labels map[string]string
}

func newRemaker(cs kubernetes.Interface) *remaker {
	return &remaker{cs: cs, held: map[string]bool{}, pending: map[string]deletedPod{}}
}

// run lists and watches the pods until ctx is done, watching again when
// a watch ends.
func (r *remaker) run(ctx context.Context) {
	pods := r.cs.CoreV1().Pods(systemNS)
	listAndWatch(ctx, func(ctx context.Context) ([]*corev1.Pod, string, error) {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		return pointers(l.Items), l.ResourceVersion, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	}, func(t watch.EventType, p *corev1.Pod, _ time.Time) {
		r.observe(ctx, t, p)
	})
}

// observe acts on one pod event: a proxy pod being deleted is removed at
// once; a removed one is made again, or kept for release when its node is
// held.
func (r *remaker) observe(ctx context.Context, t watch.EventType, p *corev1.Pod) {
	if !strings.HasPrefix(p.Name, proxyPodPrefix) {
		return
	}
	switch {
	case t == watch.Deleted:
		d := deletedPod{node: p.Spec.NodeName, labels: maps.Clone(p.Labels)}
		r.mu.Lock()
		held := r.held[d.node]
		if held {
			r.pending[p.Name] = d
		}
		r.mu.Unlock()
		if !held {
			r.make(ctx, p.Name, d)
		}
	case p.DeletionTimestamp != nil:
		err := r.cs.CoreV1().Pods(systemNS).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			log.Printf("removing the deleted proxy pod %s: %v", p.Name, err)
		}
	}
}

// make creates a deleted proxy pod again, Ready, on its node.
func (r *remaker) make(ctx context.Context, name string, d deletedPod) {
	if err := loopnodes.CreateReadyPod(ctx, r.cs, systemNS, name, d.node, d.labels); err != nil {
		if ctx.Err() == nil {
			log.Printf("making the deleted proxy pod %s again: %v", name, err)
		}
		return
	}
	r.mu.Lock()
	r.remade++
	r.mu.Unlock()
	log.Printf("made the deleted proxy pod %s again on %s", name, d.node)
}

// hold keeps node's deleted proxy pods from being made again until
// release.
func (r *remaker) hold(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[node] = true
}

// release makes node's proxy pods deleted while it was held again, and
// waits until every one of them exists.
func (r *remaker) release(ctx context.Context, node string) error {
	r.mu.Lock()
	delete(r.held, node)
	var names []string
	for name, d := range r.pending {
		if d.node == node {
			names = append(names, name)
		}
	}
	todo := map[string]deletedPod{}
	for _, name := range names {
		todo[name] = r.pending[name]
		delete(r.pending, name)
	}
	r.mu.Unlock()
	for name, d := range todo {
		r.make(ctx, name, d)
	}
	return waitFor(ctx, 30*time.Second, func() (bool, error) {
		for name := range todo {
			if _, err := r.cs.CoreV1().Pods(systemNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

// count returns how many proxy pods it made again.
func (r *remaker) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.remade
}
