package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// tracker records when each Service first had ingress and when each proxy
// Deployment was first seen and first had all replicas ready.
type tracker struct {
	mu            sync.Mutex
	createdAt     map[string]time.Time // when Create returned
	published     map[string]time.Time
	deployCreated map[string]time.Time // when the informer first saw it
	deployReady   map[string]time.Time
	// deployCreatedAt is when Create returned, for the Deployments this
	// program creates (-floor).
	deployCreatedAt map[string]time.Time
	lastPublishedT  time.Time
}

func (tr *tracker) watch(ctx context.Context, cs kubernetes.Interface) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	bench := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(benchNamespace))
	system := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(systemNamespace))
	onService := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return
		}
		now := time.Now()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if _, seen := tr.published[svc.Name]; !seen {
			tr.published[svc.Name] = now
			tr.lastPublishedT = now
		}
	}
	onDeployment := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		now := time.Now()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if _, seen := tr.deployCreated[d.Name]; !seen {
			// The informer sees a Deployment a moment after it is
			// created; its creationTimestamp has only second precision.
			tr.deployCreated[d.Name] = now
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if _, seen := tr.deployReady[d.Name]; !seen && d.Status.ReadyReplicas >= want && d.Status.ObservedGeneration >= d.Generation {
			tr.deployReady[d.Name] = now
		}
	}
	if _, err := bench.Core().V1().Services().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onService, UpdateFunc: func(_, obj any) { onService(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching services: %w", err)
	}
	if _, err := system.Apps().V1().Deployments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDeployment, UpdateFunc: func(_, obj any) { onDeployment(obj) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watching deployments: %w", err)
	}
	bench.Start(ctx.Done())
	system.Start(ctx.Done())
	for typ, ok := range bench.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("syncing %v informer", typ)
		}
	}
	for typ, ok := range system.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			return nil, fmt.Errorf("syncing %v informer", typ)
		}
	}
	return func() {
		cancel()
		bench.Shutdown()
		system.Shutdown()
	}, nil
}

func (tr *tracker) created(name string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.createdAt[name] = at
}

func (tr *tracker) deploymentCreatedAt(name string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.deployCreatedAt[name] = at
}

// latencies returns, sorted, each Service's time from its creation to its
// first status. A status seen before Create returned counts as zero.
func (tr *tracker) latencies() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return spans(tr.createdAt, tr.published)
}

// deploymentLatencies returns, sorted, each Deployment's time from its
// Create returning to all its replicas ready (-floor).
func (tr *tracker) deploymentLatencies() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return spans(tr.deployCreatedAt, tr.deployReady)
}

// spans returns, sorted, end minus start of every name in both maps; an end
// before its start counts as zero.
func spans(start, end map[string]time.Time) []time.Duration {
	var out []time.Duration
	for name, e := range end {
		if s, ok := start[name]; ok {
			out = append(out, max(0, e.Sub(s)))
		}
	}
	slices.Sort(out)
	return out
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (tr *tracker) counts() (published, ready int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.published), len(tr.deployReady)
}

func (tr *tracker) lastPublished() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.lastPublishedT
}

// deploymentSpan returns the first Deployment's creation and the last
// one's readiness, once n Deployments are ready.
func (tr *tracker) deploymentSpan(n int) (first, last time.Time, ok bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.deployReady) < n {
		return first, last, false
	}
	for _, t := range tr.deployCreated {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	for _, t := range tr.deployReady {
		if t.After(last) {
			last = t
		}
	}
	return first, last, true
}

func newTracker() *tracker {
	return &tracker{createdAt: map[string]time.Time{}, published: map[string]time.Time{}, deployCreated: map[string]time.Time{}, deployReady: map[string]time.Time{}, deployCreatedAt: map[string]time.Time{}}
}
