// Package agent is the prober role (`pulselb prober`, a DaemonSet): it
// learns its targets from Services, proxy pods, prober pods and nodes,
// keeps those the vantage assignment gives its node, probes them with the
// prober engine, answers its own node's beacon, renews its node's Lease as
// a heartbeat, and writes its node's ProbeReport when what it says
// changes (coalesced), never on a timer alone. As an external vantage
// (`pulselb prober --external`, outside the cluster) it probes instead
// every served Service's published addresses, and writes its own report
// and Lease, named after the vantage. It is
// a subpackage of prober because it reads Services through the contract
// package, which itself imports prober.
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/report"
)

// Defaults of Config.
const (
	DefaultMinWriteInterval = 250 * time.Millisecond
	DefaultBeaconPort       = 9472
)

// Config configures an Agent.
type Config struct {
	// Node is the node this prober runs on; its report has this name.
	// With External it is the vantage's name instead, and the report is
	// contract.ExternalReportName(Node).
	Node string
	// External makes the agent an external vantage: it probes every
	// served Service's published addresses (its status ingress IPs, and
	// those held out as unreachable from outside) on the Service's ports
	// with its probe specs, from wherever it runs, marks its report
	// external, and reads neither pods nor Secrets.
	External bool
	// Namespace holds the proxy and prober pods, the reports and the
	// probe Secrets (pulselb-system).
	Namespace string
	// Services says which Services are probed; it must equal the
	// controller's (--class-only).
	Services contract.Selection
	// Vantages is K, the probers per target; it must equal the controller's.
	Vantages int
	// VantageMemo remembers the vantage assignment between target
	// computations (every cluster change recomputes the targets; at 1,000
	// nodes a fresh assignment costs about 5 million hashes), shared with
	// the other agents given the same memo: a benchmark running many
	// agents in one process sets one, so that the process hashes each
	// target once instead of once per agent. The assignment is the same
	// either way (contract.VantageMemo answers as contract.Vantages does); nil
	// gives the agent a memo of its own.
	VantageMemo *contract.VantageMemo
	// BeaconPort is the hostPort every prober pod's beacon listens on.
	BeaconPort uint16
	// Heartbeat is how often the Lease is renewed (it lasts
	// contract.StaleHeartbeats times as long) and how often the report is
	// compared with the one last written, for changes no state transition
	// announces, such as a certificate's expiry. Without Leases it is how
	// often the report is rewritten, changed or not.
	Heartbeat time.Duration
	// Leases is where the agent keeps its Lease, the Leases of Namespace.
	// Nil turns Leases off: the report is then rewritten every Heartbeat
	// as its heartbeat, as probers did before Leases (kept so that
	// benchmarks and upgrade tests can run such probers).
	Leases Leases
	// MinWriteInterval spaces report writes caused by state changes.
	MinWriteInterval time.Duration
	// Metrics receives the agent's own metrics; nil means unregistered
	// ones.
	Metrics *Metrics
	// Scheduler tunes the probe scheduler; OnChange is the agent's own and
	// is overwritten.
	Scheduler prober.Config
	// SourceAddrs are the addresses probes are sent from, at most one per
	// IP family: a target is probed from the one of its family, or from
	// the address the kernel picks when there is none (the default). A
	// benchmark running many agents on one host gives each its own node
	// address, as each prober pod has on its node.
	SourceAddrs []netip.Addr
}

// Reports is where the agent writes its report; *v1alpha1.Client is one.
type Reports interface {
	Get(ctx context.Context, namespace, name string) (*v1alpha1.ProbeReport, error)
	Create(ctx context.Context, r *v1alpha1.ProbeReport) (*v1alpha1.ProbeReport, error)
	Update(ctx context.Context, r *v1alpha1.ProbeReport) (*v1alpha1.ProbeReport, error)
}

// Leases is where the agent keeps its Lease;
// kubernetes.Interface.CoordinationV1().Leases(namespace) is one.
type Leases interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// Agent is one node's prober.
type Agent struct {
	cfg     Config
	reports Reports
	clock   clock.WithTicker
	sched   *prober.Scheduler

	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	pods     corelisters.PodNamespaceLister
	secrets  corelisters.SecretNamespaceLister
	synced   []cache.InformerSynced

	// changed says the cluster changed: recompute the targets.
	changed chan struct{}
	// dirty says a state changed: write the report soon.
	dirty chan struct{}

	mu sync.Mutex
	// meta describes each target the scheduler probes.
	meta map[string]report.Target
	// probers caches built probers by target key, spec text and source
	// address, for the targets of the last refresh.
	probers map[string]builtProber
	// parsed holds each Service's settings: the targets are computed from
	// every Service on every change, and only the Services whose
	// annotations or ports changed are parsed again.
	parsed contract.ParseCache

	// last is the report as last read or written; written is the status
	// last written, as built (the API server keeps times in whole
	// seconds), nil until a write succeeded. Both are owned by Run.
	last    *v1alpha1.ProbeReport
	written *v1alpha1.ProbeReportStatus

	// reportName is the name of the agent's report: the node's, or the
	// external vantage's.
	reportName string
	// leaseName is the name of the node's Lease; lease is the Lease as
	// last read or written, owned by renewLease.
	leaseName string
	lease     *coordinationv1.Lease
}

type builtProber struct {
	spec   string
	prober prober.Prober
}

// New returns an Agent reading Services and Nodes from cluster and Pods and
// Secrets from system (limited to cfg.Namespace; nil with cfg.External,
// which reads neither). The caller starts the factories.
func New(ctx context.Context, cluster, system informers.SharedInformerFactory, reports Reports, cfg Config) (*Agent, error) {
	if cfg.Node == "" {
		return nil, errors.New("no node name")
	}
	if cfg.VantageMemo == nil {
		cfg.VantageMemo = &contract.VantageMemo{}
	}
	if cfg.Vantages <= 0 {
		cfg.Vantages = contract.DefaultVantages
	}
	if cfg.BeaconPort == 0 {
		cfg.BeaconPort = DefaultBeaconPort
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = contract.DefaultHeartbeat
	}
	if cfg.MinWriteInterval <= 0 {
		cfg.MinWriteInterval = DefaultMinWriteInterval
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	reportName := cfg.Node
	if cfg.External {
		var err error
		if reportName, err = contract.ExternalReportName(cfg.Node); err != nil {
			return nil, fmt.Errorf("naming the external vantage's report: %w", err)
		}
	}
	leaseName, err := contract.ProberLeaseName(reportName)
	if err != nil && cfg.Leases != nil {
		return nil, fmt.Errorf("naming the prober Lease: %w", err)
	}
	if cfg.Scheduler.Clock == nil {
		cfg.Scheduler.Clock = clock.RealClock{}
	}
	a := &Agent{
		cfg:      cfg,
		reports:  reports,
		clock:    cfg.Scheduler.Clock,
		services: cluster.Core().V1().Services().Lister(),
		nodes:    cluster.Core().V1().Nodes().Lister(),
		changed:  make(chan struct{}, 1),
		dirty:    make(chan struct{}, 1),
		meta:     map[string]report.Target{},
		probers:  map[string]builtProber{},

		reportName: reportName,
		leaseName:  leaseName,
	}
	informers := []cache.SharedIndexInformer{cluster.Core().V1().Services().Informer(), cluster.Core().V1().Nodes().Informer()}
	if !cfg.External {
		a.pods = system.Core().V1().Pods().Lister().Pods(cfg.Namespace)
		a.secrets = system.Core().V1().Secrets().Lister().Secrets(cfg.Namespace)
		informers = append(informers, system.Core().V1().Pods().Informer(), system.Core().V1().Secrets().Informer())
	}
	sc := cfg.Scheduler
	// A new certificate expiry does not cause a write of its own: it goes
	// out with the next one, at the latest the next comparison (every
	// Heartbeat), so a target whose backends serve different certificates
	// does not turn every probe into a report write.
	logger := klog.FromContext(ctx)
	sc.OnChange = func(tr prober.Transition) {
		logTransition(logger, tr)
		poke(a.dirty)
	}
	a.sched = prober.NewScheduler(sc)

	trigger := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke(a.changed) },
		UpdateFunc: func(oldObj, newObj any) {
			if nodeUpdateMatters(oldObj, newObj) && serviceUpdateMatters(oldObj, newObj, cfg.External) {
				poke(a.changed)
			}
		},
		DeleteFunc: func(any) { poke(a.changed) },
	}
	for _, inf := range informers {
		if _, err := inf.AddEventHandler(trigger); err != nil {
			return nil, fmt.Errorf("adding event handler: %w", err)
		}
		a.synced = append(a.synced, inf.HasSynced)
	}
	return a, nil
}

// logTransition logs a target's change of state: a target going Down or
// coming back at default verbosity, so that a prober's log says which of its
// targets failed, when, and why (the report keeps only the latest state);
// a first Up, which every target reaches when probing starts, at V(2).
func logTransition(logger klog.Logger, tr prober.Transition) {
	if tr.From == prober.StateUnknown && tr.To == prober.StateUp {
		logger = logger.V(2)
	}
	kv := []any{"target", tr.Key, "from", tr.From.String(), "to", tr.To.String(), "outcome", tr.Result.Outcome.String()}
	if tr.Result.Err != nil {
		kv = append(kv, "err", tr.Result.Err)
	}
	logger.Info("Probed target changed state", kv...)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run waits for the caches, then probes and reports until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return fmt.Errorf("waiting for informer caches to sync: %w", ctx.Err())
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = a.sched.Run(ctx) })

	if a.cfg.Leases != nil {
		wg.Go(func() { a.renewLease(ctx) })
	}

	heartbeat := a.clock.NewTicker(a.cfg.Heartbeat)
	defer heartbeat.Stop()
	var lastWrite time.Time
	var pending <-chan time.Time // fires when a coalesced write is due
	// write writes the report when it changed since the last write, or
	// when force names another reason to.
	write := func(force string) {
		pending = nil
		st := a.Report()
		reason := force
		switch {
		case reason != "":
		case a.written == nil:
			reason = "retry"
		default:
			if reason = report.Change(*a.written, st); reason == "" {
				return
			}
		}
		a.cfg.Metrics.reportReasons.WithLabelValues(reason).Inc()
		lastWrite = a.clock.Now()
		if err := a.write(ctx, st); err != nil {
			logger.Error(err, "Writing probe report failed")
			// Retried at the next comparison, changed or not.
			a.written = nil
			return
		}
		a.written = &st
	}
	// The first write goes out whatever the report held before: a
	// restarted prober's report says it probes again, and without a Lease
	// it is the first heartbeat.
	a.refresh(ctx)
	logger.Info("Started prober", "node", a.cfg.Node, "external", a.cfg.External, "vantages", a.cfg.Vantages,
		"beaconPort", a.cfg.BeaconPort, "targets", len(a.sched.Snapshot()))
	write("start")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.changed:
			a.refresh(ctx)
		case <-a.dirty:
			if pending != nil {
				continue
			}
			if wait := a.cfg.MinWriteInterval - a.clock.Since(lastWrite); wait > 0 {
				pending = a.clock.After(wait)
				continue
			}
			write("")
		case <-pending:
			write("")
		case <-heartbeat.C():
			// With a Lease for liveness, only a change is written.
			if a.cfg.Leases == nil {
				write("heartbeat")
			} else {
				write("")
			}
		}
	}
}

// DefaultBeaconLinger is how long a stopping prober keeps answering its
// node's beacon.
const DefaultBeaconLinger = 3 * time.Second

// ServeBeacon accepts and closes connections on ln, the node beacon other
// probers probe, until ctx is done and linger more has passed. A prober pod
// being replaced (a DaemonSet rollout) is terminating from the moment it
// is deleted, so the other probers and the controller stop judging its
// beacon at once; answering a little longer keeps a probe that was already
// under way from failing the node, whose proxies serve on regardless.
func ServeBeacon(ctx context.Context, ln net.Listener, linger time.Duration) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		<-ctx.Done()
		t := time.NewTimer(linger)
		defer t.Stop()
		select {
		case <-t.C:
		case <-done:
		}
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accepting beacon connection: %w", err)
		}
		c.Close()
	}
}

// refresh recomputes the targets and hands them to the scheduler.
func (a *Agent) refresh(ctx context.Context) {
	a.cfg.Metrics.refreshes.Inc()
	targets, meta, err := a.targets(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Computing probe targets failed")
		return
	}
	a.mu.Lock()
	a.meta = meta
	for key := range a.probers {
		if _, ok := meta[key]; !ok {
			delete(a.probers, key) // its target is gone
		}
	}
	a.mu.Unlock()
	a.sched.Set(targets)
	klog.FromContext(ctx).V(2).Info("Updated probe targets", "count", len(targets))
	poke(a.dirty)
}

// targets returns the targets assigned to this node: the beacons and the
// Service ports on other nodes whose vantages include it, from the one
// target list the controller judges (contract.ListTargets).
func (a *Agent) targets(ctx context.Context) ([]prober.Target, map[string]report.Target, error) {
	defer a.parsed.Prune()
	if a.cfg.External {
		return a.externalTargets(ctx)
	}
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	proberPods, err := a.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProberAppName}))
	if err != nil {
		return nil, nil, fmt.Errorf("listing prober pods: %w", err)
	}
	proxies, err := a.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProxyAppName}))
	if err != nil {
		return nil, nil, fmt.Errorf("listing proxy pods: %w", err)
	}
	list := contract.ListTargets(contract.TargetInput{
		Selection: a.cfg.Services,
		Service: func(n types.NamespacedName) (*corev1.Service, bool) {
			svc, err := a.services.Services(n.Namespace).Get(n.Name)
			return svc, err == nil
		},
		Settings: func(svc *corev1.Service) contract.Settings {
			s, _ := a.parsed.Parse(svc) // the controller reports the problems
			return s
		},
		Nodes: nodes, Probers: proberPods, Proxies: proxies,
		Vantages: a.cfg.Vantages,
		Memo:     a.cfg.VantageMemo,
	})
	self := a.cfg.Node

	var out []prober.Target
	meta := map[string]report.Target{}
	for _, b := range list.Beacons {
		if b.Node == self || !slices.Contains(b.Vantages, self) {
			continue
		}
		p, err := a.prober(b.Key, string(probespec.TCP), "", b.Addr)
		if err != nil {
			return nil, nil, err
		}
		// A refusal says the node is there, whether or not its prober
		// is ready to answer (prober.Beacon).
		out = append(out, prober.Target{Key: b.Key, Addr: netip.AddrPortFrom(b.Addr, a.cfg.BeaconPort), Protocol: probespec.TCP, Prober: prober.Beacon(p)})
		meta[b.Key] = report.Target{Beacon: true, Node: b.Node, Protocol: probespec.TCP}
	}
	for _, t := range list.Ports {
		if t.Node == self || !slices.Contains(t.Vantages, self) {
			continue
		}
		pr, svc := t.Probe, t.Service
		// One target per family the Service is published in, each on the
		// node's own address of that family: a dual-stack Service's IPv6
		// is probed over IPv6. The vantages are the same (assigned by
		// key); the report carries both results under the same Service,
		// port and node, told apart by address.
		for i, ip := range t.Addrs {
			key := t.AddrKey(i)
			p, err := a.prober(key, pr.Text, svc.Namespace, ip)
			if err != nil {
				return nil, nil, err
			}
			out = append(out, prober.Target{Key: key, Addr: netip.AddrPortFrom(ip, uint16(pr.Port.Port)), Protocol: pr.Spec.Protocol, Prober: p,
				Interval: pr.Interval, Timeout: pr.Timeout, Rise: pr.Rise, Fall: pr.Fall})
			meta[key] = report.Target{Service: svc.Namespace + "/" + svc.Name, Port: pr.Port.Port, PortProtocol: string(pr.Port.Protocol),
				Protocol: pr.Spec.Protocol, Node: t.Node}
		}
	}
	return out, meta, nil
}

// prober returns the cached prober of key for spec text, building it when
// the text changed. Its Secrets resolve only for namespace; it probes
// from the source address for target (Config.SourceAddrs).
func (a *Agent) prober(key, text, namespace string, target netip.Addr) (prober.Prober, error) {
	src := a.source(target)
	id := text + "\x00" + namespace + "\x00" + src.String()
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.probers[key]; ok && b.spec == id {
		return b.prober, nil
	}
	spec, err := probespec.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing probe spec of %s: %w", key, err)
	}
	opts := prober.Options{Secrets: Secrets{Lister: a.secrets, Namespace: namespace}, LocalAddr: src}
	if a.cfg.External {
		// An external vantage reads no Secrets: a mysql probe logs in as a
		// user that does not exist, whose refusal (1045) says the server is
		// alive, as a probe without credentials does.
		opts.Secrets = nil
		if spec.Secret != "" {
			spec.User, spec.Secret, spec.Database = "", "", ""
		}
	}
	p, err := prober.New(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("building prober of %s: %w", key, err)
	}
	// A new prober makes the scheduler forget the certificate the old one
	// saw, which may have come from another name or port.
	a.probers[key] = builtProber{spec: id, prober: p}
	return p, nil
}

// source is the address of Config.SourceAddrs in target's family, or the
// zero Addr (the kernel's choice) when it has none.
func (a *Agent) source(target netip.Addr) netip.Addr {
	for _, s := range a.cfg.SourceAddrs {
		if s.Unmap().Is4() == target.Unmap().Is4() {
			return s
		}
	}
	return netip.Addr{}
}

// Report returns the report status the agent would write now.
func (a *Agent) Report() v1alpha1.ProbeReportStatus {
	now := a.clock.Now()
	snap := a.sched.Snapshot()
	a.mu.Lock()
	defer a.mu.Unlock()
	st := report.Status(now, a.cfg.Heartbeat, snap, a.meta)
	st.External = a.cfg.External
	return st
}

// write writes st as the agent's report, creating it when missing.
func (a *Agent) write(ctx context.Context, st v1alpha1.ProbeReportStatus) error {
	if a.last == nil {
		cur, err := a.reports.Get(ctx, a.cfg.Namespace, a.reportName)
		switch {
		case apierrors.IsNotFound(err):
			r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: a.cfg.Namespace, Name: a.reportName}, Status: st}
			created, err := a.reports.Create(ctx, r)
			if err != nil {
				a.cfg.Metrics.reportWrites.WithLabelValues("create", "error").Inc()
				return fmt.Errorf("creating probe report %s/%s: %w", a.cfg.Namespace, a.reportName, err)
			}
			a.cfg.Metrics.reportWrites.WithLabelValues("create", "ok").Inc()
			a.last = created
			return nil
		case err != nil:
			return fmt.Errorf("getting probe report %s/%s: %w", a.cfg.Namespace, a.reportName, err)
		}
		a.last = cur
	}
	r := a.last.DeepCopy()
	r.Status = st
	updated, err := a.reports.Update(ctx, r)
	if err != nil {
		a.cfg.Metrics.reportWrites.WithLabelValues("update", "error").Inc()
		// Re-read at the next write: someone replaced or deleted it.
		a.last = nil
		return fmt.Errorf("updating probe report %s/%s: %w", a.cfg.Namespace, a.reportName, err)
	}
	a.cfg.Metrics.reportWrites.WithLabelValues("update", "ok").Inc()
	a.last = updated
	return nil
}

// nodeUpdateMatters reports whether an update can change the targets:
// any update but a Node's that leaves what the targets read of a node as
// it was (its addresses, its Ready condition and its zone label). The
// rest of a Node changes often in a large cluster and changes no target:
// the kubelet's periodic status (heartbeat times), the controller's
// pulselb.io/unhealthy label, taints and other labels. Each such update
// would otherwise make every prober of the cluster recompute its targets
// at the same moment.
func nodeUpdateMatters(oldObj, newObj any) bool {
	o, ok := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok || !ok2 {
		return true
	}
	return o.Labels[corev1.LabelTopologyZone] != n.Labels[corev1.LabelTopologyZone] ||
		contract.NodeReady(o) != contract.NodeReady(n) ||
		!slices.Equal(o.Status.Addresses, n.Status.Addresses)
}

// serviceUpdateMatters reports whether a Service update can change the
// targets: not one that changes only the status and the annotations the
// controller writes beside it (its own writes, which follow every
// failover and at scale arrive for many Services at once, would make
// every agent recompute its targets while its votes wait to be written),
// except for an external agent, which probes the published addresses and
// those held out.
// Other objects always matter here.
func serviceUpdateMatters(oldObj, newObj any, external bool) bool {
	o, ok := oldObj.(*corev1.Service)
	n, ok2 := newObj.(*corev1.Service)
	if !ok || !ok2 {
		return true
	}
	if external && !equality.Semantic.DeepEqual(o.Status.LoadBalancer, n.Status.LoadBalancer) {
		return true
	}
	if external && !maps.Equal(o.Annotations, n.Annotations) {
		return true // it probes the addresses held out too
	}
	return !equality.Semantic.DeepEqual(o.Spec, n.Spec) ||
		!contract.SettingAnnotationsEqual(o.Annotations, n.Annotations) || !maps.Equal(o.Labels, n.Labels) ||
		!o.DeletionTimestamp.Equal(n.DeletionTimestamp) || !slices.Equal(o.Finalizers, n.Finalizers)
}

// renewLease keeps the node's Lease renewed, every Heartbeat, until ctx is
// done. A failure is retried at the next renewal; it is logged when it
// starts and when renewals work again.
func (a *Agent) renewLease(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := a.clock.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	failing := false
	for {
		err := a.renew(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			logger.Error(err, "Renewing prober Lease failed; retrying every heartbeat", "heartbeat", a.cfg.Heartbeat)
			failing = true
		case err == nil && failing:
			logger.Info("Renewing prober Lease works again", "lease", klog.KRef(a.cfg.Namespace, a.leaseName))
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// renew renews the node's Lease, creating it when missing. The Lease lasts
// contract.ProberLeaseSeconds.
func (a *Agent) renew(ctx context.Context) error {
	ref := klog.KRef(a.cfg.Namespace, a.leaseName)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(a.cfg.Node),
		LeaseDurationSeconds: ptr.To(contract.ProberLeaseSeconds(a.cfg.Heartbeat)),
		RenewTime:            ptr.To(metav1.NewMicroTime(a.clock.Now())),
	}
	if a.lease == nil {
		cur, err := a.cfg.Leases.Get(ctx, a.leaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: a.cfg.Namespace, Name: a.leaseName,
				Labels: contract.ProberLeaseLabels()}, Spec: spec}
			l.Spec.AcquireTime = l.Spec.RenewTime
			created, err := a.cfg.Leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				a.cfg.Metrics.leaseWrites.WithLabelValues("create", "error").Inc()
				return fmt.Errorf("creating prober Lease %s: %w", ref, err)
			}
			a.cfg.Metrics.leaseWrites.WithLabelValues("create", "ok").Inc()
			a.lease = created
			return nil
		case err != nil:
			return fmt.Errorf("getting prober Lease %s: %w", ref, err)
		}
		a.lease = cur
	}
	l := a.lease.DeepCopy()
	// Without managedFields the update is a few hundred bytes; the API
	// server keeps the stored ones.
	l.ManagedFields = nil
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	maps.Copy(l.Labels, contract.ProberLeaseLabels())
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != a.cfg.Node || l.Spec.AcquireTime == nil {
		spec.AcquireTime = spec.RenewTime
	} else {
		spec.AcquireTime = l.Spec.AcquireTime
	}
	spec.LeaseTransitions = l.Spec.LeaseTransitions
	l.Spec = spec
	updated, err := a.cfg.Leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		a.cfg.Metrics.leaseWrites.WithLabelValues("update", "error").Inc()
		// Re-read at the next renewal: someone replaced or deleted it.
		a.lease = nil
		return fmt.Errorf("renewing prober Lease %s: %w", ref, err)
	}
	a.cfg.Metrics.leaseWrites.WithLabelValues("update", "ok").Inc()
	a.lease = updated
	return nil
}
