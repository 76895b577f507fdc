package soak

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/scenario"
)

// podAddresses follows, from a watch of every pod, which kind of pod
// last held each pod address: the nodes reuse addresses, a removed proxy
// pod's for a controller, say, whose connections are no leak.
type podAddresses struct {
	store cache.Store
	mu    sync.Mutex
	// proxy: address → its last holder seen was a proxy pod of a soak
	// Service.
	proxy map[string]bool
}

// watchPodAddresses follows every pod's addresses until ctx ends.
func watchPodAddresses(ctx context.Context, c *cluster.Cluster) (*podAddresses, error) {
	f := informers.NewSharedInformerFactory(c.Client, 0)
	inf := f.Core().V1().Pods().Informer()
	a := &podAddresses{store: inf.GetStore(), proxy: map[string]bool{}}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.saw,
		UpdateFunc: func(_, obj any) { a.saw(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("watching pods: %w", ctx.Err())
	}
	return a, nil
}

func (a *podAddresses) saw(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.HostNetwork {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ip := range p.Status.PodIPs {
		a.proxy[ip.IP] = p.Labels[labelServiceNS] == Namespace
	}
}

// proberPods selects the prober pods.
var proberPods = func() labels.Selector {
	sel, err := labels.Parse(scenario.ProberSelector)
	if err != nil {
		panic(err)
	}
	return sel
}()

// readyProbers returns the nodes with a ready prober pod, not
// terminating.
func (a *podAddresses) readyProbers() map[string]bool {
	out := map[string]bool{}
	for _, obj := range a.store.List() {
		if p, ok := obj.(*corev1.Pod); ok && proberPods.Matches(labels.Set(p.Labels)) && p.DeletionTimestamp == nil && contract.PodReady(p) {
			out[p.Spec.NodeName] = true
		}
	}
	return out
}

// removedProxies returns the addresses whose last holder was a soak proxy
// pod and that no pod holds now.
func (a *podAddresses) removedProxies() map[string]bool {
	a.mu.Lock()
	out := maps.Clone(a.proxy)
	a.mu.Unlock()
	maps.DeleteFunc(out, func(_ string, proxy bool) bool { return !proxy })
	for _, obj := range a.store.List() {
		if p, ok := obj.(*corev1.Pod); ok && !p.Spec.HostNetwork {
			for _, ip := range p.Status.PodIPs {
				delete(out, ip.IP)
			}
		}
	}
	return out
}

// leftConntrack lists the nodes' conntrack entries DNATed to removed
// proxy pods (see leakedConntrack).
func (s *state) leftConntrack(ctx context.Context) []string {
	removed := s.addrs.removedProxies()
	if len(removed) == 0 {
		return nil
	}
	var left []string
	for _, n := range s.e.c.Nodes() {
		out, err := s.e.c.Exec(ctx, n, "conntrack", "-L", "-f", "ipv4")
		if err != nil {
			left = append(left, fmt.Sprintf("conntrack -L on %s: %v", n, err))
			continue
		}
		leaked := leakedConntrack(n, string(out), removed)
		if len(leaked) > maxListedEntries {
			leaked = append(leaked[:maxListedEntries], fmt.Sprintf("on %s, %d more entries DNATed to removed proxy addresses", n, len(leaked)-maxListedEntries))
		}
		left = append(left, leaked...)
	}
	return left
}

// maxListedEntries bounds the conntrack entries a failure lists per node:
// a client's connections to a proxy are hundreds.
const maxListedEntries = 10

// leakedConntrack returns the entries of node's `conntrack -L` output that
// the node DNATed to one of the addresses removed: their reply comes from
// a removed address they were not sent to. A packet that matches one
// follows it to the removed pod's address instead of being mapped afresh
// to the pod that serves the port now (a hostPort's DNAT, which the
// harness deletes before it forgets the pod's connections). An entry sent
// to the address itself (a late reply to a forgotten connection, say)
// redirects nothing and times out.
func leakedConntrack(node, list string, removed map[string]bool) []string {
	var left []string
	for line := range strings.Lines(list) {
		var src, dst []string
		for _, w := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(w, "src="); ok {
				src = append(src, v)
			} else if v, ok := strings.CutPrefix(w, "dst="); ok {
				dst = append(dst, v)
			}
		}
		// The original direction's addresses, then the reply's.
		if len(src) < 2 || len(dst) < 2 {
			continue
		}
		if replySrc := src[1]; removed[replySrc] && dst[0] != replySrc {
			left = append(left, fmt.Sprintf("on %s, DNATed to removed proxy address %s: %s", node, replySrc, strings.TrimSpace(line)))
		}
	}
	return left
}
