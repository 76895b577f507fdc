package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/trim"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/status"
)

// HealthConfig turns on verdicts from ProbeReports.
type HealthConfig struct {
	// Reports is an informer on the ProbeReports of the pulselb namespace
	// (v1alpha1.NewInformer); nil turns the health pipeline off, and a node
	// is then down only while labelled pulselb.io/unhealthy.
	Reports cache.SharedIndexInformer
	// Leases is an informer on the probers' Leases (NewProberLeaseInformer);
	// a prober is fresh while its Lease is current or its report
	// heartbeat recent (status.Fresh). Nil: report heartbeats only.
	Leases cache.SharedIndexInformer
	// Vantages is how many probers probe each target; it must equal the
	// probers' --vantages (default contract.DefaultVantages).
	Vantages int
	// Resync is how often verdicts are re-evaluated without a report
	// change, so that stale reports stop counting (default 1s).
	Resync time.Duration
}

// Event reasons of the health pipeline.
const (
	ReasonTargetDown = "TargetDown"
	ReasonTargetUp   = "TargetUp"
	ReasonNodeFailed = "NodeFailed"
	ReasonFailedOver = "FailedOver"
)

// ErrNoProbeReportCRD says the API server does not serve ProbeReports.
var ErrNoProbeReportCRD = errors.New("the ProbeReport CRD (probereports." + v1alpha1.GroupName + ") is not installed: " +
	"apply deploy/crds/pulselb.io_probereports.yaml, or run the controller with --probe-reports=false " +
	"(then a node is down only while labelled " + contract.LabelUnhealthy + ")")

// WaitForProbeReportCRD returns nil once the API server serves
// ProbeReports, checking every interval for at most timeout (so a CRD
// applied together with the controller is found), and otherwise
// ErrNoProbeReportCRD, or the last discovery error when the API server
// could not be asked.
func WaitForProbeReportCRD(ctx context.Context, d discovery.DiscoveryInterface, interval, timeout time.Duration) error {
	gv := v1alpha1.SchemeGroupVersion.String()
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(context.Context) (bool, error) {
		list, err := d.ServerResourcesForGroupVersion(gv)
		switch {
		case apierrors.IsNotFound(err):
			last = ErrNoProbeReportCRD
			return false, nil
		case err != nil:
			last = fmt.Errorf("asking the API server for %s resources: %w", gv, err)
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == v1alpha1.Resource.Resource {
				return true, nil
			}
		}
		last = ErrNoProbeReportCRD
		return false, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// healthKey is the one key of the health queue: every evaluation looks at
// every report.
const healthKey = "verdicts"

// healthTarget is one target or beacon the controller judges.
type healthTarget struct {
	status.Target
	service cache.ObjectName // zero for a beacon
	port    contract.PortKey
}

// judging is what the health worker keeps between evaluations, so that a
// round judges only what changed (status.Engine.Rejudge): at 1,000 nodes
// and 2,000 Services, listing the targets, indexing every report and
// judging every target cost about 70 ms of CPU a round, on every report
// and every second, where a round without news has nothing to do. Only
// the health worker uses it.
type judging struct {
	// targets are the targets judged, listed (listTargets) when listed is
	// false, again when one of their inputs changed or at startingEnds;
	// byKey and byVantage index them.
	listed       bool
	targets      []healthTarget
	byKey        map[string]int
	byVantage    map[string][]int
	startingEnds time.Time
	// reports indexes the cached reports; indexed holds the object each
	// was indexed from, to tell the reports that changed.
	reports status.Reports
	indexed map[string]*v1alpha1.ProbeReport
	// downVotes holds the targets a fresh vantage reports Down (noteFailing).
	downVotes map[string]bool
	// inputs are the objects of each of Controller.targetInputs seen.
	inputs []seenObjects
}

// seenObjects remembers the objects of a cache seen in the last round, to
// tell whether any was added, deleted or changed since: an informer
// replaces an object it updates, so the same objects mean no change. The
// zero value has seen nothing.
type seenObjects struct {
	ids   map[any]bool
	byKey map[string]any
}

// changed reports whether objs, the cache's objects now, differ from those
// seen by one that was added or deleted or by an update that can change
// the targets (targetInputChanged), and remembers objs.
func (s *seenObjects) changed(objs []any) bool {
	if s.ids != nil && len(objs) == len(s.ids) {
		same := true
		for _, o := range objs {
			if !s.ids[o] {
				same = false
				break
			}
		}
		if same {
			return false
		}
	}
	changed := s.ids == nil
	ids := make(map[any]bool, len(objs))
	byKey := make(map[string]any, len(objs))
	for _, o := range objs {
		k, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			continue
		}
		ids[o], byKey[k] = true, o
		if old, ok := s.byKey[k]; !ok || (old != o && targetInputChanged(old, o)) {
			changed = true
		}
	}
	if len(byKey) != len(s.byKey) {
		changed = true // every key of objs was seen: some seen are gone
	}
	s.ids, s.byKey = ids, byKey
	return changed
}

// setTargets makes targets the ones judged.
func (j *judging) setTargets(targets []healthTarget, startingEnds time.Time) {
	j.listed, j.targets, j.startingEnds = true, targets, startingEnds
	j.byKey = make(map[string]int, len(targets))
	j.byVantage = map[string][]int{}
	for i, t := range targets {
		j.byKey[t.Key] = i
		for _, v := range t.Vantages {
			j.byVantage[v] = append(j.byVantage[v], i)
		}
	}
}

// evaluate judges the targets and beacons by quorum over the cached
// reports, stores the verdicts, and queues the Services and nodes whose
// verdicts changed. It never fails: reports are read from the cache.
// A round judges every target when the targets changed (a Service, proxy
// or prober pod, node or proxy workload did, or a proxy stopped
// starting), and otherwise only those whose reports or vantages changed
// and those whose verdict depends on the time (status.Engine.Rejudge).
func (c *Controller) evaluate(ctx context.Context, _ string) error {
	defer c.healthQueue.AddAfter(healthKey, c.cfg.Health.Resync)
	logger := klog.FromContext(ctx)
	now := c.now()
	h := &c.judging

	// Every input is looked at, so that each change is seen once.
	if len(h.inputs) != len(c.targetInputs) {
		h.inputs = make([]seenObjects, len(c.targetInputs))
	}
	changed := false
	for i, store := range c.targetInputs {
		changed = h.inputs[i].changed(store.List()) || changed
	}
	full := !h.listed || changed || (!h.startingEnds.IsZero() && !now.Before(h.startingEnds))
	if full {
		targets, ends, err := c.listTargets(&c.targetSettings)
		c.targetSettings.Prune()
		if err != nil {
			h.listed = false // listed again next round
			return err
		}
		h.setTargets(targets, ends)
	}
	keys, flipped := c.refreshReports(now)
	var changes []status.Change
	round := "full"
	if full {
		changes = c.verdicts.Judge(h.reports, statusTargets(h.targets), now)
	} else {
		round = "changed"
		changes = c.verdicts.Rejudge(h.reports, keys, flipped, now)
	}
	c.metrics.judgedTargets.WithLabelValues(round).Add(float64(c.verdicts.Judged()))
	c.metrics.flappingTargets.Set(float64(c.verdicts.Flapping()))
	if full || len(keys) > 0 || len(flipped) > 0 {
		c.judgeExternal(h.reports, h.targets)
	}
	c.noteFailing(h.reports, now, full, keys, flipped)
	if full || len(changes) > 0 {
		c.publishJudged(h.targets)
	}
	if c.cfg.Judged != nil {
		c.cfg.Judged()
	}
	if c.standby.Load() {
		// The leader raises the Events and restarts the proxies; a
		// standby only keeps its verdicts warm.
		return nil
	}

	for _, ch := range changes {
		t, was, is := h.targets[h.byKey[ch.Target.Key]], ch.From, ch.To
		if ch.Late {
			logger.Info("Target still down after its proxy started", "target", t.Key, "summary", is.Summary())
			c.recordService(t.service, corev1.EventTypeWarning, ReasonTargetDown, "%s/%d on node %s is %s", t.port.Protocol, t.port.Port, t.Node, is.Summary())
			continue
		}
		kind := "target"
		if t.Beacon {
			kind = "beacon"
		}
		c.metrics.verdictChanges.WithLabelValues(kind, is.Verdict.String()).Inc()
		logger.Info("Verdict changed", "target", t.Key, "from", was.Verdict, "to", is.Verdict, "reason", is.Reason, "summary", is.Summary())
		if t.Beacon {
			c.nodeQueue.Add(t.Node)
			for _, svc := range c.servicesOnNode(t.Node) {
				c.urgent.Add(svc)
				if is.Verdict == status.VerdictDown {
					c.recordService(svc, corev1.EventTypeWarning, ReasonNodeFailed, "node %s failed: %s", t.Node, is.Summary())
				}
			}
			// After the Services served there: those with a backend
			// there may now fail behind their proxies (behindProxies).
			for _, svc := range c.servicesWithEndpointsOn(t.Node) {
				c.urgent.Add(svc)
			}
			continue
		}
		c.urgent.Add(t.service)
		switch {
		case ch.Quiet:
			// A proxy being started, found refusing before it serves: no
			// alarm, unless it is still Down once started (ch.Late).
		case is.Verdict == status.VerdictDown:
			c.recordService(t.service, corev1.EventTypeWarning, ReasonTargetDown, "%s/%d on node %s is %s", t.port.Protocol, t.port.Port, t.Node, is.Summary())
		case was.Verdict == status.VerdictDown:
			c.recordService(t.service, corev1.EventTypeNormal, ReasonTargetUp, "%s/%d on node %s is %s", t.port.Protocol, t.port.Port, t.Node, is.Summary())
		}
	}
	return c.restartBrokenProxies(ctx, c.restartCandidates())
}

// refreshReports brings the report index up to date with the cache at now:
// the reports added, changed or deleted since the last round, and every
// prober's freshness. It returns the keys of the targets whose observation
// changed and the probers that turned fresh or stale.
func (c *Controller) refreshReports(now time.Time) (keys, flipped []string) {
	h := &c.judging
	if h.indexed == nil {
		h.indexed = map[string]*v1alpha1.ProbeReport{}
	}
	listed := 0
	var objs []any
	if c.reports != nil {
		objs = c.reports.List()
	}
	for _, o := range objs {
		r, ok := o.(*v1alpha1.ProbeReport)
		if !ok || r.Namespace != c.cfg.Placement.Namespace {
			continue
		}
		listed++
		if prev, ok := h.indexed[r.Name]; ok && prev == r {
			continue
		}
		// A report the cache replaced: its new object.
		h.indexed[r.Name] = r
		keys = append(keys, h.reports.Put(r)...)
	}
	if listed != len(h.indexed) {
		present := make(map[string]bool, listed)
		for _, o := range objs {
			if r, ok := o.(*v1alpha1.ProbeReport); ok && r.Namespace == c.cfg.Placement.Namespace {
				present[r.Name] = true
			}
		}
		for name := range h.indexed {
			if !present[name] {
				delete(h.indexed, name)
				keys = append(keys, h.reports.Remove(name)...)
			}
		}
	}
	for name, r := range h.indexed {
		if h.reports.SetFresh(name, status.Fresh(c.proberLease(name), r, now)) {
			flipped = append(flipped, name)
		}
	}
	return keys, flipped
}

// proberLease returns node's prober Lease from the cache; nil without one.
func (c *Controller) proberLease(node string) *coordinationv1.Lease {
	if c.leases == nil {
		return nil
	}
	name, err := contract.ProberLeaseName(node)
	if err != nil {
		return nil
	}
	o, ok, err := c.leases.GetByKey(c.cfg.Placement.Namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	l, _ := o.(*coordinationv1.Lease)
	return l
}

// reportIndex indexes the cached ProbeReports of the pulselb namespace
// (none without the health pipeline), fresh or stale at now by their
// probers' Leases and heartbeats (status.Fresh).
func (c *Controller) reportIndex(now time.Time) status.Reports {
	var reports []*v1alpha1.ProbeReport
	if c.reports != nil {
		for _, o := range c.reports.List() {
			if r, ok := o.(*v1alpha1.ProbeReport); ok && r.Namespace == c.cfg.Placement.Namespace {
				reports = append(reports, r)
			}
		}
	}
	var leases map[string]*coordinationv1.Lease
	if c.leases != nil {
		objs := c.leases.List()
		leases = make(map[string]*coordinationv1.Lease, len(objs))
		for _, o := range objs {
			l, ok := o.(*coordinationv1.Lease)
			if !ok || l.Namespace != c.cfg.Placement.Namespace {
				continue
			}
			if node, ok := contract.ProberLeaseNode(l.Name); ok {
				leases[node] = l
			}
		}
	}
	return status.IndexVantages(reports, leases, now)
}

// NewProberLeaseInformer returns an informer on the probers' Leases in
// namespace, selected by their labels so that the leader election's Leases
// there stay out of the cache. The caller runs it.
func NewProberLeaseInformer(client kubernetes.Interface, namespace string) cache.SharedIndexInformer {
	sel := labels.SelectorFromSet(contract.ProberLeaseLabels()).String()
	inf := coordinationinformers.NewFilteredLeaseInformer(client, namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = sel })
	_ = inf.SetTransform(trim.Object) // not started yet: cannot fail
	return inf
}

// leaseRenewed returns the handler of Lease changes: a verdict can only
// change when a prober's Lease appears, goes, or is renewed after it had
// lapsed; a renewal of a current Lease, the steady state, changes nothing
// and waits for the periodic evaluation. The stale-to-fresh case is
// queued at once so that a prober back from an outage counts again
// without waiting for it.
func (c *Controller) leaseRenewed(enqueue func()) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { enqueue() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*coordinationv1.Lease)
			n, ok2 := newObj.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return
			}
			if now := c.now(); !status.LeaseCurrent(o, now) && status.LeaseCurrent(n, now) {
				enqueue()
			}
		},
		DeleteFunc: func(any) { enqueue() },
	}
}

// publishJudged makes targets, judged by the round that just ended, what
// judgedTargets returns, and tells the listeners (OnJudged).
func (c *Controller) publishJudged(targets []healthTarget) {
	c.judged.Store(&targets)
	c.mu.Lock()
	listeners := c.judgedListeners
	c.mu.Unlock()
	for _, l := range listeners {
		l()
	}
}

// judgedTargets returns the targets of the last round of verdicts that listed
// them or changed a verdict, whose verdicts c.verdicts holds, and false
// before the first round (or without the health pipeline). The slice is
// shared: callers must not change it.
func (c *Controller) judgedTargets() ([]healthTarget, bool) {
	p := c.judged.Load()
	if p == nil {
		return nil, false
	}
	return *p, true
}

// onJudged calls l after each round of verdicts that listed the targets or
// changed a verdict, on the health worker: l must not block.
func (c *Controller) onJudged(l func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.judgedListeners = append(c.judgedListeners, l)
}

// listTargets is healthTargets, and also says when the first of the
// targets that are Starting stops (zero when none is): until then, and
// until a Service, pod, node or proxy workload changes, the targets stay
// the same. The list is contract.ListTargets, the prober agents' too; the
// controller adds which vantages a Service's allow-list admits yet
// (probeAdmission) and which targets are Starting. settings parses the
// Services: the caller's contract.ParseCache, pruned after each listing.
func (c *Controller) listTargets(settings *contract.ParseCache) ([]healthTarget, time.Time, error) {
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("listing nodes: %w", err)
	}
	probers, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProberAppName}))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("listing prober pods: %w", err)
	}
	proxies, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProxyAppName}))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("listing proxy pods: %w", err)
	}
	list := contract.ListTargets(contract.TargetInput{
		Selection: c.cfg.Services,
		Service: func(n types.NamespacedName) (*corev1.Service, bool) {
			svc, err := c.services.Services(n.Namespace).Get(n.Name)
			return svc, err == nil
		},
		Settings: func(svc *corev1.Service) contract.Settings {
			s, _ := settings.Parse(svc) // sync reports the problems
			return s
		},
		Nodes: nodes, Probers: probers, Proxies: proxies,
		Vantages: c.cfg.Health.Vantages,
		// Remembered between evaluations (every second, and on every
		// report): afresh, 1,000 prober nodes and 5,000 targets cost 5
		// million hashes.
		Memo: &c.vantages,
	})

	out := make([]healthTarget, 0, len(list.Beacons)+len(list.Ports))
	for _, b := range list.Beacons {
		out = append(out, healthTarget{Target: status.Target{Key: b.Key, Node: b.Node, Beacon: true, Vantages: b.Vantages}})
	}
	var ends time.Time
	// admission memoises probeAdmission per Service for this call.
	admission := map[types.NamespacedName]func(string) bool{}
	var proberAddrs map[string][]netip.Addr
	now := c.now()
	for _, t := range list.Ports {
		name := types.NamespacedName{Namespace: t.Service.Namespace, Name: t.Service.Name}
		admits, ok := admission[name]
		if !ok {
			if proberAddrs == nil {
				proberAddrs = proberAddrsByNode(probers)
			}
			admits = c.probeAdmission(t.Service, proberAddrs)
			admission[name] = admits
		}
		vs := t.Vantages
		if admits != nil {
			vs = slices.DeleteFunc(slices.Clone(vs), func(v string) bool { return !admits(v) })
		}
		// A target is starting only while every pod serving it is.
		window := time.Duration(t.Probe.Rise)*t.Probe.Interval + proxyStartMargin
		starting := true
		for _, p := range t.Pods {
			end := proxyStartEnd(p, now, window)
			if !now.Before(end) {
				starting = false
			} else if ends.IsZero() || end.Before(ends) {
				ends = end
			}
		}
		out = append(out, healthTarget{
			Target:  status.Target{Key: t.Key, Node: t.Node, Vantages: vs, Starting: starting},
			service: cache.ObjectName(name),
			port:    t.Probe.Port,
		})
	}
	return out, ends, nil
}

// podHasPort reports whether proxy pod p holds pk as a host port, as its
// template does for each port of its Service when it was made; true for a
// pod that declares no host port at all.
func podHasPort(p *corev1.Pod, pk contract.PortKey) bool {
	held := contract.HostPorts(p)
	return len(held) == 0 || slices.Contains(held, pk)
}

// Starting a proxy: its targets are Starting (status.Target), so a Down
// verdict raises no TargetDown Warning, while the pod's containers are not
// ready, and then for long enough that the probers can see it Up (rise
// probes at the port's interval) and report it (proxyStartMargin); but for
// proxyStartLimit after the pod's creation at most, so a proxy that never
// comes up, or crash-loops, is still announced.
const (
	proxyStartMargin = 10 * time.Second
	proxyStartLimit  = 2 * time.Minute
)

// proxyStartEnd returns when proxy pod p stops starting, as it is at now
// (a change of its conditions changes it), and so whether it still is;
// window is how long after its containers are ready it still counts as
// starting.
func proxyStartEnd(p *corev1.Pod, now time.Time, window time.Duration) time.Time {
	limit := p.CreationTimestamp.Add(proxyStartLimit)
	if !now.Before(limit) {
		return limit
	}
	var ready *corev1.PodCondition
	for i, cond := range p.Status.Conditions {
		// Ready implies ContainersReady; the readiness gate holds Ready
		// back until the pod is probed Up, so ContainersReady is the one
		// that says the proxy serves.
		if (cond.Type == corev1.ContainersReady || cond.Type == corev1.PodReady) && cond.Status == corev1.ConditionTrue {
			if ready == nil || cond.LastTransitionTime.Before(&ready.LastTransitionTime) {
				ready = &p.Status.Conditions[i]
			}
		}
	}
	if ready == nil {
		return limit
	}
	if end := ready.LastTransitionTime.Add(window); end.Before(limit) {
		return end
	}
	return limit
}

// verdictLag is how long after a proxy's containers are ready, beyond its
// rise probes at their interval and one interval more for the phase of the
// first, its probers' reports can take to say it is Up: their coalesced
// write (agent.DefaultMinWriteInterval), the informer, and the condition's
// time, which is truncated to the second.
const verdictLag = 2 * time.Second

// markEarly sets Early on the health of each node whose proxy of svc has
// served (its containers ready) for less than its probes need to find it
// Up (rise probes of its slowest port, an interval, verdictLag), and
// returns how long until the first of them is no longer early; zero when
// none is. A Down verdict on such a node may be from before the proxy
// forwarded.
func markEarly(health map[string]status.Health, settings contract.Settings, own []*corev1.Pod, now time.Time) time.Duration {
	var window time.Duration
	for _, p := range settings.Probes {
		window = max(window, time.Duration(p.Rise+1)*p.Interval)
	}
	window += verdictLag
	var next time.Duration
	for _, p := range own {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type != corev1.ContainersReady || cond.Status != corev1.ConditionTrue {
				continue
			}
			left := cond.LastTransitionTime.Add(window).Sub(now)
			if left <= 0 {
				break
			}
			h := health[p.Spec.NodeName]
			h.Early = true
			health[p.Spec.NodeName] = h
			if next == 0 || left < next {
				next = left
			}
		}
	}
	return next
}

// statusTargets returns what the quorum judges of targets.
func statusTargets(targets []healthTarget) []status.Target {
	out := make([]status.Target, len(targets))
	for i, t := range targets {
		out[i] = t.Target
	}
	return out
}

// servicesOnNode returns the Services with a proxy pod on node.
func (c *Controller) servicesOnNode(node string) []cache.ObjectName {
	pods, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProxyAppName}))
	if err != nil {
		return nil
	}
	var out []cache.ObjectName
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue
		}
		if key, ok := contract.ServiceOf(p.Labels); ok {
			n := cache.NewObjectName(key.Namespace, key.Name)
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func (c *Controller) recordService(key cache.ObjectName, eventType, reason, format string, args ...any) {
	svc, err := c.services.Services(key.Namespace).Get(key.Name)
	if err != nil {
		return
	}
	c.recorder.Eventf(svc, eventType, reason, format, args...)
}

// health returns the Health of every node with one of own's pods for svc,
// from the verdicts and the pulselb.io/unhealthy label. The Down verdicts
// of held ports, failing behind the proxies (behindProxies), count as Up.
func (c *Controller) health(svc *corev1.Service, nodes []*corev1.Node, own []*corev1.Pod, publishWhen string, held map[contract.PortKey]bool) map[string]status.Health {
	out := map[string]status.Health{}
	for _, n := range nodes {
		// A labelled node is down even before (or without) verdicts, such
		// as right after a controller restart; so is one leaving or out of
		// service, whose proxies keep forwarding for their drain delay
		// after its addresses left the status.
		if _, ok := n.Labels[contract.LabelUnhealthy]; ok || leavingReason(n) != "" {
			out[n.Name] = status.Health{Down: true}
		}
	}
	if c.reports == nil {
		return out
	}
	published := map[string]bool{}
	for _, n := range strings.Split(svc.Annotations[contract.AnnotationNodes], ",") {
		published[n] = true
	}
	name := cache.MetaObjectToName(svc).String()
	for _, p := range own {
		n := p.Spec.NodeName
		if n == "" {
			continue
		}
		if _, done := out[n]; done {
			continue
		}
		v := c.nodeVerdicts(svc, name, n, published[n])
		hold := held
		if c.beaconFailing(n) {
			hold = nil // its own fault, likely (behindProxies)
		}
		for pk := range hold {
			if j, ok := v.Ports[pk]; ok && j.Verdict == status.VerdictDown {
				v.Ports[pk] = status.Judgement{Verdict: status.VerdictUp, Assigned: j.Assigned, Fresh: j.Fresh}
			}
		}
		out[n] = status.NodeHealth(v, publishWhen)
	}
	return out
}

// nodeVerdicts gathers the verdicts on node for svc (named name): its
// beacon's and its ports'.
func (c *Controller) nodeVerdicts(svc *corev1.Service, name, node string, published bool) status.NodeVerdicts {
	v := status.NodeVerdicts{Beacon: c.verdicts.Verdict(contract.BeaconKey(node)), Ports: map[contract.PortKey]status.Judgement{}, Published: published}
	for _, sp := range contract.ServedPorts(svc) {
		pk := contract.PortKeyOf(sp)
		v.Ports[pk] = c.verdicts.Verdict(pk.TargetKey(name, node))
	}
	return v
}

// failedOver records, after svc's status was written without some nodes it
// had, a FailedOver Event and the time since the first failed probe of the
// verdict that dropped each node.
func (c *Controller) failedOver(ctx context.Context, svc *corev1.Service, r status.Result, health map[string]status.Health) {
	if c.reports == nil {
		return
	}
	var dropped []string
	var first time.Time
	for _, n := range strings.Split(svc.Annotations[contract.AnnotationNodes], ",") {
		if n == "" || slices.Contains(r.Nodes, n) || !health[n].Down {
			continue
		}
		dropped = append(dropped, n)
		name := cache.MetaObjectToName(svc).String()
		cands := []status.Judgement{c.verdicts.Verdict(contract.BeaconKey(n))}
		for _, sp := range contract.ServedPorts(svc) {
			pk := contract.PortKeyOf(sp)
			cands = append(cands, c.verdicts.Verdict(pk.TargetKey(name, n)))
		}
		for _, j := range cands {
			if !j.FirstFailure.IsZero() && (first.IsZero() || j.FirstFailure.Before(first)) {
				first = j.FirstFailure
			}
		}
	}
	if len(dropped) == 0 {
		return
	}
	if !first.IsZero() {
		d := c.now().Sub(first)
		c.metrics.failoverDuration.Observe(d.Seconds())
		klog.FromContext(ctx).Info("Failed over", "dropped", dropped, "nodes", r.Nodes, "sinceFirstFailure", d)
	}
	serving := strings.Join(r.Nodes, ", ")
	if serving == "" {
		serving = "no node"
	}
	c.recorder.Eventf(svc, corev1.EventTypeNormal, ReasonFailedOver, "removed %s from status; serving from %s", strings.Join(dropped, ", "), serving)
}

// evictFailed force-deletes the Deployment proxy pods on a node whose
// beacon is down by quorum, so their ReplicaSets replace them on eligible
// nodes at once instead of after the node's eviction timeout. DaemonSet
// pods are left to the DaemonSet controller, which removes them when the
// node stops matching their affinity.
func (c *Controller) evictFailed(ctx context.Context, node string) error {
	pods, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProxyAppName}))
	if err != nil {
		return fmt.Errorf("listing proxy pods: %w", err)
	}
	for _, p := range pods {
		if p.Spec.NodeName != node || !ownedByReplicaSet(p) {
			continue
		}
		if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0 {
			continue
		}
		err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pod %s/%s on failed node %s: %w", p.Namespace, p.Name, node, err)
		}
		c.metrics.writes.WithLabelValues("pods", "delete").Inc()
		klog.FromContext(ctx).Info("Deleted proxy pod on failed node", "pod", klog.KObj(p), "node", node)
	}
	return nil
}

func ownedByReplicaSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "ReplicaSet" {
			return true
		}
	}
	return false
}

// targetInputChanged reports an update that can change the targets judged
// (listTargets) or what external vantages are asked about (judgeExternal):
// of a Node, what nodeRelevantChange says (readiness, labels such as its
// zone); of a Service, its spec, labels, settings or deletion, not its
// status nor the addresses pulselb writes beside it; of a proxy workload,
// what workloadUnchanged does not ignore (its allow-list); of a pod, any.
func targetInputChanged(oldObj, newObj any) bool {
	switch o := oldObj.(type) {
	case *corev1.Node:
		n, ok := newObj.(*corev1.Node)
		return !ok || nodeRelevantChange(o, n)
	case *corev1.Service:
		n, ok := newObj.(*corev1.Service)
		return !ok || !equality.Semantic.DeepEqual(o.Spec, n.Spec) || !maps.Equal(o.Labels, n.Labels) ||
			!contract.SettingAnnotationsEqual(o.Annotations, n.Annotations) || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	case *appsv1.Deployment, *appsv1.DaemonSet:
		return !workloadUnchanged(oldObj, newObj)
	}
	return true
}
