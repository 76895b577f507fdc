package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

var everything = labels.Everything()

// sync brings one Service's proxy workload, status, annotations and
// finalizer in line with the cluster. A returned error means retry.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "service", key)
	ctx = klog.NewContext(ctx, logger)

	svc, err := c.service(key)
	if apierrors.IsNotFound(err) {
		c.setManaged(key, false)
		// Gone without our finalizer (removed by hand, or never served):
		// remove whatever workload is left.
		return c.deleteWorkloads(ctx, key)
	}
	if err != nil {
		return fmt.Errorf("getting service %s: %w", key, err)
	}
	if !c.cfg.Services.Active(svc) {
		c.setManaged(key, false)
		return c.release(ctx, svc)
	}
	c.setManaged(key, true)

	// The finalizer is added with the first write to the Service (see
	// writeStatus), not before the workload: a Service deleted before then
	// has nothing of pulselb's on it to clean up, and its workload goes
	// when sync finds it gone (or at start-up, with the orphans).

	nodes, err := c.nodes.List(everything)
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	cfg, err := c.placementConfig(svc)
	if err != nil {
		return err
	}
	want, problems := placement.Desired(svc, nodes, cfg)
	if err := c.applyWorkload(ctx, svc, want); err != nil {
		return err
	}

	own, err := c.proxyPods(svc)
	if err != nil {
		return err
	}
	// externalTrafficPolicy Local: the nodes with a serving endpoint, which
	// alone may be published, and those with one serving or starting, or
	// that had one a moment ago (LocalEndpointGrace), where proxies belong.
	var localReady, localPresent map[string]bool
	if want.NodePortTarget {
		if localReady, localPresent, err = c.endpointNodes(svc); err != nil {
			return err
		}
		localPresent = c.localNodes(svc, localPresent)
	} else {
		c.endpointGaps.forget(key)
	}
	if err := c.placeHomesUnlessRefused(ctx, svc, want, own, nodes, localPresent); err != nil {
		return err
	}
	var conflicts []string
	if slices.ContainsFunc(own, func(p *corev1.Pod) bool { return p.Spec.NodeName == "" }) {
		// Only an unscheduled pod can be in conflict; the other
		// Services' pods are read only then.
		allPods, err := c.pods.List(everything)
		if err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
		for _, cf := range placement.PortConflicts(svc, own, allPods) {
			conflicts = append(conflicts, cf.String())
		}
	}
	in := status.Input{
		Service:       svc,
		Nodes:         make(map[string]*corev1.Node, len(nodes)),
		Pods:          own,
		Health:        map[string]status.Health{},
		AddressType:   want.Settings.AddressType,
		AllDown:       want.Settings.AllDown,
		Conflicts:     conflicts,
		Servable:      !want.Empty(),
		EligibleNodes: len(want.EligibleNodes),
		Now:           metav1.NewTime(c.now()),
		ExternalMode:  want.Settings.ExternalVantages,
		DataPaths:     want.Settings.DataPaths(svc),
		External:      c.externalView(key),
	}
	for _, n := range nodes {
		in.Nodes[n.Name] = n
	}
	behind, held, err := c.behindProxies(svc, own)
	if err != nil {
		return err
	}
	in.BehindProxies = behind
	in.Health = c.health(svc, nodes, own, want.Settings.PublishWhen, held)
	if c.reports != nil && len(svc.Status.LoadBalancer.Ingress) == 0 {
		// Nothing published yet: whether its backends answer is known
		// only once its proxies have served long enough to be probed.
		if wait := markEarly(in.Health, want.Settings, own, c.now()); wait > 0 {
			c.queue.AddAfter(key, wait)
		}
	}
	in.Held = c.replacedInPlace(svc, want, own, in.Health)
	if err := c.openGates(ctx, svc, own, want.Settings.PublishWhen); err != nil {
		return err
	}
	for _, p := range problems {
		reason := status.ReasonInvalidAnnotation
		if !p.IsAnnotation() {
			reason = "InvalidSpec"
		}
		in.Problems = append(in.Problems, status.Problem{Reason: reason, Message: p.String()})
	}
	in.Problems = append(in.Problems, c.sysctlProblems(svc, own, nodes)...)
	if want.NodePortTarget {
		in.LocalEndpointNodes = localReady
		if want.Deployment != nil && len(svc.Spec.Selector) > 0 {
			if err := c.moveLocalProxies(ctx, own, localPresent); err != nil {
				return err
			}
		}
	}
	var recheck time.Duration
	in.AllowList, recheck = c.allowListState(svc, want, own)
	if recheck > 0 {
		// A proxy still reports the previous list: look again once it is
		// late, in case nothing else changes meanwhile.
		c.queue.AddAfter(key, recheck)
	}
	r := status.Decide(in)
	written, err := c.writeStatus(ctx, svc, r)
	if err != nil {
		return err
	}
	c.failedOver(ctx, svc, r, in.Health)
	if !hasFinalizer(written) && !hasLegacyFinalizer(written) {
		// Nothing written yet, so nothing published: no DNSEndpoint
		// either, which release could not find without the finalizer.
		return nil
	}
	return c.syncDNSEndpoint(ctx, written)
}

// replacedInPlace returns the published nodes whose proxy is being replaced
// by one of other ports next to it (placement.ReplacedInPlace), and counts
// them healthy: their old proxy does not serve the Service's new ports and
// their new one may not yet, which is no fault of the node's. A node whose
// beacon is Down is not among them.
func (c *Controller) replacedInPlace(svc *corev1.Service, want placement.Workload, own []*corev1.Pod, health map[string]status.Health) map[string]bool {
	var ports []contract.PortKey
	for _, sp := range contract.ServedPorts(svc) {
		ports = append(ports, contract.PortKeyOf(sp))
	}
	held := placement.ReplacedInPlace(own, publishedNodes(svc), want.EligibleNodes, ports)
	for n := range held {
		if c.reports != nil && c.verdicts.Verdict(contract.BeaconKey(n)).Verdict == status.VerdictDown {
			delete(held, n)
			continue
		}
		health[n] = status.Health{}
	}
	return held
}

// writeStatus writes r's annotations and status where they differ from svc,
// then records r's Events. It returns the Service as written (svc itself
// when nothing differed); the caller must not change it.
//
// A Service pulselb takes on costs two writes when all goes well: one
// update with the finalizer and the annotations together, and one status
// write, both when its first proxy is published (settling holds back the
// conditions of its progress until then). Every update carries the
// finalizer, so release always finds what pulselb wrote. A Service that
// still carries LegacyFinalizer gets Finalizer in its place with the next
// update, made for that alone if nothing else differs.
func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, r status.Result) (*corev1.Service, error) {
	key := cache.MetaObjectToName(svc)
	writeStatus := false
	if status.Differs(svc, r) {
		if wait := c.settling(key, svc, r); wait > 0 {
			// The annotations, which follow the addresses, and the
			// Events, which follow the conditions, wait too.
			c.queue.AddAfter(key, wait)
			return svc, nil
		}
		writeStatus = true
	}
	var err error
	var wroteStatus *corev1.Service // the Service as written by a status write made first
	if writeStatus && hasFinalizer(svc) {
		// The status first: a failover's addresses reach those who read
		// them (external-dns, dnsexport, the probers of the published
		// addresses) one round trip sooner, and the annotations, which
		// only repeat them, follow. Without the finalizer the update that
		// adds it comes first, so that nothing is published without it.
		if svc, err = c.updateStatus(ctx, svc, r); err != nil {
			return nil, err
		}
		writeStatus, wroteStatus = false, svc
	}
	if status.AnnotationsDiffer(svc, r) || (writeStatus && !hasFinalizer(svc)) || hasLegacyFinalizer(svc) {
		svc = svc.DeepCopy()
		status.ApplyAnnotations(svc, r)
		svc.Finalizers = withFinalizer(svc.Finalizers)
		if svc, err = c.client.CoreV1().Services(svc.Namespace).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			if wroteStatus != nil {
				// The conditions are written: their Events are due, and
				// the retry will find no change of them.
				c.recordEvents(wroteStatus, r)
			}
			return nil, fmt.Errorf("updating annotations and finalizer: %w", err)
		}
		c.wroteService(svc)
		c.metrics.writes.WithLabelValues("services", "update").Inc()
	}
	if writeStatus {
		if svc, err = c.updateStatus(ctx, svc, r); err != nil {
			return nil, err
		}
	}
	c.recordEvents(svc, r)
	return svc, nil
}

// recordEvents records r's Events on svc.
func (c *Controller) recordEvents(svc *corev1.Service, r status.Result) {
	for _, e := range r.Events {
		c.recorder.Event(svc, e.Type, e.Reason, e.Message)
	}
}

// updateStatus writes r's status on svc and returns the Service as
// written.
func (c *Controller) updateStatus(ctx context.Context, svc *corev1.Service, r status.Result) (*corev1.Service, error) {
	key := cache.MetaObjectToName(svc)
	svc = svc.DeepCopy()
	status.ApplyStatus(svc, r)
	svc, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating status: %w", err)
	}
	c.wroteService(svc)
	c.statusWrote(key, c.now())
	c.metrics.writes.WithLabelValues("services/status", "update").Inc()
	klog.FromContext(ctx).Info("Updated load balancer status", "nodes", r.Nodes, "ingress", len(r.LoadBalancer.Ingress))
	return svc, nil
}

// release undoes pulselb's work on a Service that is being deleted or is no
// longer served (type or class changed, or --class-only): workload first,
// then the DNSEndpoint, then pulselb's status, annotations and conditions,
// then the finalizer. Only a finalizer pulselb put there is removed (see
// ownsFinalizer), and only such a Service is cleared.
func (c *Controller) release(ctx context.Context, svc *corev1.Service) error {
	key := cache.MetaObjectToName(svc)
	if err := c.deleteWorkloads(ctx, key); err != nil {
		return err
	}
	// Decided before anything is cleared: clearing removes the marks
	// ownsFinalizer may read.
	legacy, standard := hasLegacyFinalizer(svc), c.ownsFinalizer(svc)
	if !legacy && !standard {
		// Never served, already released, or the finalizer is another
		// implementation's: it may own this Service's status now. No
		// DNSEndpoint lookup either: it would cost an API request for
		// every non-LoadBalancer Service, and the garbage collector
		// deletes a DNSEndpoint with its Service.
		return nil
	}
	// Before the finalizer goes, so that a failure is retried.
	if err := c.forgetDNSEndpoint(ctx, svc); err != nil {
		return err
	}
	cleared := status.Cleared(svc)
	if svc.DeletionTimestamp == nil && status.Differs(svc, cleared) {
		cp := svc.DeepCopy()
		status.ApplyStatus(cp, cleared)
		updated, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("clearing status: %w", err)
		}
		c.wroteService(updated)
		c.metrics.writes.WithLabelValues("services/status", "update").Inc()
		svc = updated
	}
	cp := svc.DeepCopy()
	status.ApplyAnnotations(cp, cleared)
	cp.Finalizers = slices.DeleteFunc(cp.Finalizers, func(f string) bool {
		return f == LegacyFinalizer || (standard && f == Finalizer)
	})
	updated, err := c.client.CoreV1().Services(svc.Namespace).Update(ctx, cp, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("removing finalizer: %w", err)
	}
	c.wroteService(updated)
	c.metrics.writes.WithLabelValues("services", "update").Inc()
	klog.FromContext(ctx).Info("Released service", "deleting", svc.DeletionTimestamp != nil)
	return nil
}

// statusSettle is the least time between two status writes of one Service
// when only its conditions changed. A Service's proxies go through several
// such steps (one scheduled, all scheduled, one restarted) within a second
// or two; writing each costs the API server a write and every watcher of
// Services an event. Address changes, which clients and external-dns act
// on, are written at once.
const statusSettle = 2 * time.Second

// progressLag is how long the conditions of a Service that has nothing
// published yet wait to be written while they only report progress
// (proxies pending, scheduled, not ready yet): on a healthy start they
// are written with the first address, in the same write. A Service still
// unpublished after progressLag is stuck rather than slow, and gets them
// written to say why (a Deployment is declared stuck after 10 minutes; on
// a loaded control plane a proxy pod may take a minute or more to be
// scheduled and started). A problem (a port conflict, no eligible node, an
// invalid setting) is written at once.
const progressLag = 2 * time.Minute

// serviceRecord is what the controller remembers of a served Service
// between its syncs, for settle; guarded by Controller.mu.
type serviceRecord struct {
	// managed is set while the Service is served (setManaged).
	managed bool
	// statusWritten is when its status was last written.
	statusWritten time.Time
	// progressSince is when its conditions were first held back as
	// progress while it had no address.
	progressSince time.Time
	// firstAddress is when it first had an address to publish while
	// other proxies of it were starting.
	firstAddress time.Time
}

// settling returns how long to wait before writing r's status over svc's
// (settle), and remembers when the wait began.
func (c *Controller) settling(key cache.ObjectName, svc *corev1.Service, r status.Result) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.record(key)
	wait, next := settle(*rec, svc, r, c.now())
	*rec = next
	return wait
}

// settle returns how long to wait at now before writing r's status over
// svc's, given what was recorded of the Service, and the record with the
// times its waits began: zero when the addresses change (but for a new
// Service's first ones, which wait up to statusSettle for its other
// proxies starting), or when the last status write was statusSettle ago
// and the conditions are not a new Service's progress still within
// progressLag.
func settle(rec serviceRecord, svc *corev1.Service, r status.Result, now time.Time) (time.Duration, serviceRecord) {
	if !equality.Semantic.DeepEqual(svc.Status.LoadBalancer, r.LoadBalancer) {
		if len(svc.Status.LoadBalancer.Ingress) > 0 || len(r.LoadBalancer.Ingress) == 0 || r.Starting == 0 ||
			!status.Progressing(svc.Status.Conditions) {
			return 0, rec
		}
		// A Service's first addresses, with more proxies starting (not
		// one whose proxies are all down: its return is written at
		// once): they usually become ready within a second of each
		// other, and publishing them together saves a write of the
		// Service and one of its status.
		if rec.firstAddress.IsZero() {
			rec.firstAddress = now
		}
		return max(0, rec.firstAddress.Add(statusSettle).Sub(now)), rec
	}
	if len(svc.Status.LoadBalancer.Ingress) == 0 && status.Progressing(r.Conditions) {
		if rec.progressSince.IsZero() {
			rec.progressSince = now
		}
		if wait := rec.progressSince.Add(progressLag).Sub(now); wait > 0 {
			return wait, rec
		}
	}
	if rec.statusWritten.IsZero() {
		return 0, rec
	}
	return max(0, rec.statusWritten.Add(statusSettle).Sub(now)), rec
}

// record returns key's record, made when missing; c.mu must be held.
func (c *Controller) record(key cache.ObjectName) *serviceRecord {
	rec := c.records[key]
	if rec == nil {
		rec = &serviceRecord{}
		c.records[key] = rec
	}
	return rec
}

// statusWrote records that key's status was written at now: the waits
// for its first addresses and its progress are over.
func (c *Controller) statusWrote(key cache.ObjectName, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.record(key)
	rec.statusWritten, rec.progressSince, rec.firstAddress = now, time.Time{}, time.Time{}
}

func (c *Controller) setManaged(key cache.ObjectName, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		rec := c.record(key)
		if !rec.managed {
			rec.managed = true
			c.managedCount++
		}
	} else {
		if rec := c.records[key]; rec != nil && rec.managed {
			c.managedCount--
		}
		delete(c.records, key)
		delete(c.echoes, key)
		c.refusals.forget(key)
		c.endpointGaps.forget(key)
	}
	c.metrics.managedServices.Set(float64(c.managedCount))
}
