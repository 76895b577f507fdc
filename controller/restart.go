package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
)

// ReasonProxyRestarted is the Event recorded on a Service when one of its
// proxy pods is deleted because a port is down on a node that is up.
const ReasonProxyRestarted = "ProxyRestarted"

// Proxy restart backoff: the first restart of a proxy may happen at once,
// the next not before RestartBackoff later, doubling up to
// MaxRestartBackoff; the backoff starts over once every port of the proxy
// has been Up for RestartBackoffReset.
const (
	RestartBackoff      = 10 * time.Second
	MaxRestartBackoff   = 5 * time.Minute
	RestartBackoffReset = 5 * time.Minute
	// RestartGrace is how long a proxy pod must have been Ready before a
	// port down on its node counts against it: probes reach a new pod
	// before its proxy is set up, and a verdict from before it was Ready
	// may be about the pod it replaced. Without it, a Service's proxies
	// would be restarted one after another as each new pod starts.
	RestartGrace = 10 * time.Second
	// RestartAfterDown is how long a port's verdict must have been Down
	// before its proxy is restarted: a backend failing everywhere reaches the
	// verdicts of its proxy nodes one after another, and until they agree
	// the first node down would look like a broken proxy.
	RestartAfterDown = 5 * time.Second
)

// Why a proxy pod is or is not restarted (decideRestart).
const (
	restartPortDown        = "portDownOnHealthyNode"
	keepNotRunning         = "notRunning"
	keepNotReadyLongEnough = "readyTooShort"
	keepDownTooShort       = "downTooShort"
	keepPortsUp            = "noPortDown"
	keepNodeNotUp          = "nodeNotUp"
	keepBackendDown        = "backendDownEverywhere"
	keepBackoff            = "backoff"
	keepNoLocalEndpoint    = "noLocalEndpoint"
)

// restartInput is what decideRestart looks at for one proxy pod.
type restartInput struct {
	// Running is false for a pod that is not Running or is terminating.
	Running bool
	// ReadyFor is how long the pod has been Ready; zero when it is not.
	ReadyFor time.Duration
	// DownFor is how long the verdict of the longest-Down port on the
	// pod's node has been Down. Not from the probers' first failure: a
	// vantage that was failing on its own before (cut off, say) would
	// make a fresh verdict look old.
	DownFor time.Duration
	// Beacon is the verdict on the pod's node beacon.
	Beacon status.Verdict
	// Ports holds the verdict on each Service port on the pod's node.
	Ports map[contract.PortKey]status.Verdict
	// Others holds the same for every other node with a proxy pod of the
	// Service whose beacon is not Down.
	Others []map[contract.PortKey]status.Verdict
	// NoLocalEndpoint: the pod forwards to its node's NodePorts
	// (externalTrafficPolicy Local) and the node has no serving endpoint
	// of the Service, as while a backend is replaced on it.
	NoLocalEndpoint bool
	// Now and NotBefore: no restart before NotBefore (the backoff).
	Now, NotBefore time.Time
}

// decideRestart reports whether a proxy pod is to be deleted so that its
// workload replaces it, and why. A port down by quorum on a node whose
// beacon is Up, while the same port is Up on another proxy node of the
// Service, means the proxy there is broken: the node and the backend both
// work. When the port is down on every proxy node (a single proxy
// included) the backend or its ClusterIP is failing, and restarting
// proxies would only churn.
func decideRestart(in restartInput) (bool, string) {
	if !in.Running {
		return false, keepNotRunning
	}
	if !anyDown(in.Ports) {
		return false, keepPortsUp
	}
	if in.NoLocalEndpoint {
		// A NodePort without a local endpoint may drop what the proxy
		// forwards: the node lacks a backend, the proxy is not broken.
		// It stays, or moves with moveLocalProxies.
		return false, keepNoLocalEndpoint
	}
	if in.ReadyFor < RestartGrace {
		return false, keepNotReadyLongEnough
	}
	if in.Beacon != status.VerdictUp {
		return false, keepNodeNotUp
	}
	if in.DownFor < RestartAfterDown {
		return false, keepDownTooShort
	}
	upElsewhere := false
	for p, v := range in.Ports {
		if v != status.VerdictDown {
			continue
		}
		for _, o := range in.Others {
			if o[p] == status.VerdictUp {
				upElsewhere = true
			}
		}
	}
	if !upElsewhere {
		return false, keepBackendDown
	}
	if in.Now.Before(in.NotBefore) {
		return false, keepBackoff
	}
	return true, restartPortDown
}

func anyDown(m map[contract.PortKey]status.Verdict) bool {
	for _, v := range m {
		if v == status.VerdictDown {
			return true
		}
	}
	return false
}

func allUp(m map[contract.PortKey]status.Verdict) bool {
	if len(m) == 0 {
		return false
	}
	for _, v := range m {
		if v != status.VerdictUp {
			return false
		}
	}
	return true
}

// restartBackoffs keeps the restart backoff of each proxy, keyed by
// Service and node: the replacement pod has a new name but the same
// Service and, usually, the same node, and its verdicts (keyed the same
// way) stay Down until the probers see it work.
type restartBackoffs struct {
	mu sync.Mutex
	m  map[string]*restartBackoff
}

type restartBackoff struct {
	// next is the backoff applied after the next restart.
	next time.Duration
	// notBefore is the earliest time of the next restart.
	notBefore time.Time
	// upSince is when every port was last seen Up without a break.
	upSince time.Time
}

func (r *restartBackoffs) notBefore(key string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.m[key]; b != nil {
		return b.notBefore
	}
	return time.Time{}
}

// restarted records a restart at now and returns how long the next one
// must wait.
func (r *restartBackoffs) restarted(key string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*restartBackoff{}
	}
	b := r.m[key]
	if b == nil {
		b = &restartBackoff{next: RestartBackoff}
		r.m[key] = b
	}
	wait := b.next
	b.notBefore, b.upSince = now.Add(wait), time.Time{}
	b.next = min(2*b.next, MaxRestartBackoff)
	return wait
}

// observe notes whether every port of key was Up at now, and forgets the
// backoff once they have been for RestartBackoffReset.
func (r *restartBackoffs) observe(key string, up bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.m[key]
	switch {
	case b == nil:
	case !up:
		b.upSince = time.Time{}
	case b.upSince.IsZero():
		b.upSince = now
	case now.Sub(b.upSince) >= RestartBackoffReset:
		delete(r.m, key)
	}
}

// forget drops the backoffs of proxies that no longer exist.
func (r *restartBackoffs) forget(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m {
		if !keep[k] {
			delete(r.m, k)
		}
	}
}

// services returns the Services that have a proxy with a backoff.
func (r *restartBackoffs) services() []cache.ObjectName {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []cache.ObjectName
	for k := range r.m {
		svc, _, _ := strings.Cut(k, "@")
		if n, err := cache.ParseObjectName(svc); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// restartCandidates returns the Services restartBrokenProxies has to look
// at: those with a port Down by quorum on some node (no other proxy can be
// restarted) and those with a proxy in backoff (which ends, or is
// forgotten, only when looked at).
func (c *Controller) restartCandidates() []cache.ObjectName {
	h := &c.judging
	set := map[cache.ObjectName]bool{}
	for _, k := range c.verdicts.DownKeys() {
		if i, ok := h.byKey[k]; ok && !h.targets[i].Beacon {
			set[h.targets[i].service] = true
		}
	}
	for _, n := range c.restarts.services() {
		set[n] = true
	}
	out := make([]cache.ObjectName, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	return out
}

// restartBrokenProxies deletes, with backoff, the proxy pods of services
// whose Service port is down by quorum on a node whose beacon is up
// (decideRestart), so that their workload starts fresh ones. It reads only
// caches and the verdicts of the last evaluation. services must hold every
// Service with a proxy in backoff (restartCandidates): the others' backoffs
// are forgotten.
func (c *Controller) restartBrokenProxies(ctx context.Context, services []cache.ObjectName) error {
	logger := klog.FromContext(ctx)
	now := c.now()
	bySvc := map[cache.ObjectName][]*corev1.Pod{}
	for _, n := range services {
		objs, err := c.podIndex.ByIndex(serviceIndex, n.String())
		if err != nil {
			return fmt.Errorf("listing proxy pods: %w", err)
		}
		for _, o := range objs {
			p, ok := o.(*corev1.Pod)
			if !ok || p.Namespace != c.cfg.Placement.Namespace || p.Labels[contract.LabelAppName] != contract.ProxyAppName || p.Spec.NodeName == "" {
				continue
			}
			bySvc[n] = append(bySvc[n], p)
		}
	}
	keep := map[string]bool{}
	var errs []error
	for name, pods := range bySvc {
		svc, err := c.services.Services(name.Namespace).Get(name.Name)
		if err != nil || !c.cfg.Services.Active(svc) {
			continue
		}
		// A port failing behind the proxies is no proxy's fault.
		_, held, err := c.behindProxies(svc, pods)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var serving map[string]bool
		if slices.ContainsFunc(pods, forwardsToNodePort) {
			if serving, _, err = c.endpointNodes(svc); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		ports := map[string]map[contract.PortKey]status.Verdict{}
		beacons := map[string]status.Verdict{}
		downFor := map[string]time.Duration{}
		for _, p := range pods {
			n := p.Spec.NodeName
			if _, done := ports[n]; done {
				continue
			}
			beacons[n] = c.verdicts.Verdict(contract.BeaconKey(n)).Verdict
			m := map[contract.PortKey]status.Verdict{}
			for _, sp := range contract.ServedPorts(svc) {
				pk := contract.PortKeyOf(sp)
				tk := pk.TargetKey(name.String(), n)
				m[pk] = c.verdicts.Verdict(tk).Verdict
				if held[pk] && m[pk] == status.VerdictDown && !c.beaconFailing(n) {
					m[pk] = status.VerdictUp
					continue
				}
				downFor[n] = max(downFor[n], c.verdicts.DownFor(tk, now))
			}
			ports[n] = m
		}
		for _, p := range pods {
			n := p.Spec.NodeName
			bk := name.String() + "@" + n
			keep[bk] = true
			c.restarts.observe(bk, allUp(ports[n]), now)
			in := restartInput{
				Running:   p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil,
				ReadyFor:  readyFor(p, now),
				DownFor:   downFor[n],
				Beacon:    beacons[n],
				Ports:     heldPorts(p, ports[n]),
				Now:       now,
				NotBefore: c.restarts.notBefore(bk),

				NoLocalEndpoint: forwardsToNodePort(p) && !serving[n],
			}
			for other, m := range ports {
				if other != n && beacons[other] != status.VerdictDown {
					in.Others = append(in.Others, m)
				}
			}
			restart, why := decideRestart(in)
			if !restart {
				if why != keepPortsUp && why != keepNotRunning {
					logger.V(4).Info("Not restarting proxy with a port down", "pod", klog.KObj(p), "node", n, "reason", why)
				}
				continue
			}
			err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting broken proxy pod %s/%s: %w", p.Namespace, p.Name, err))
				continue
			}
			c.metrics.writes.WithLabelValues("pods", "delete").Inc()
			c.metrics.proxyRestarts.Inc()
			wait := c.restarts.restarted(bk, now)
			down := downPorts(ports[n])
			logger.Info("Restarted broken proxy", "pod", klog.KObj(p), "node", n, "downPorts", down, "nextNotBefore", wait)
			c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonProxyRestarted,
				"deleted proxy pod %s on node %s: %s down by quorum while the node is up; next restart not before %s",
				p.Name, n, strings.Join(down, ", "), wait)
		}
	}
	c.restarts.forget(keep)
	if len(errs) > 0 {
		return fmt.Errorf("restarting broken proxies: %w", errs[0])
	}
	return nil
}

// heldPorts returns the verdicts of m on the ports proxy pod p holds
// (podHasPort): a proxy from before a port change is not judged on the
// ports its successor, starting next to it, is to serve.
func heldPorts(p *corev1.Pod, m map[contract.PortKey]status.Verdict) map[contract.PortKey]status.Verdict {
	out := make(map[contract.PortKey]status.Verdict, len(m))
	for pk, v := range m {
		if podHasPort(p, pk) {
			out[pk] = v
		}
	}
	return out
}

// readyFor returns how long p has been Ready at now; zero when it is not.
func readyFor(p *corev1.Pod, now time.Time) time.Duration {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return max(now.Sub(c.LastTransitionTime.Time), 0)
		}
	}
	return 0
}

func downPorts(m map[contract.PortKey]status.Verdict) []string {
	var out []string
	for k, v := range m {
		if v == status.VerdictDown {
			out = append(out, fmt.Sprintf("%s/%d", k.Protocol, k.Port))
		}
	}
	slices.Sort(out)
	return out
}
