// Package controller runs pulselb's per-Service control loop: it watches
// LoadBalancer Services, Nodes, EndpointSlices and the proxy workloads in
// pulselb-system, feeds them to placement.Desired and status.Decide, and
// writes only what differs. It also keeps the pulselb.io/external-ip node
// label. Placement and status share one loop because they share the
// Service key, the finalizer and the leader lock; the decisions themselves
// stay in the pure placement and status packages.
package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulselb/pulselb/api/trim"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/status"
)

// Event reasons recorded by the controller itself; status.Decide supplies
// the others.
const (
	ReasonProxyApplied = "ProxyApplied"
	ReasonNameTaken    = "NameTaken"
	// ReasonDNSEndpointConflict: a DNSEndpoint pulselb did not write has
	// the Service's name.
	ReasonDNSEndpointConflict = "DNSEndpointConflict"
)

// Config is the controller's configuration.
type Config struct {
	Placement placement.Config
	// Services says which Services are served (--class-only).
	Services contract.Selection
	// Health feeds probe verdicts into placement and status.
	Health HealthConfig
	// DNSEndpoints, when set, keeps each served Service's external-dns
	// DNSEndpoint equal to its status (see DNSEndpointWriter).
	DNSEndpoints DNSEndpointWriter
	// Metrics receives the controller's metrics; nil means unregistered
	// ones of its own.
	Metrics *Metrics
	// MaxRollouts is how many proxy workloads may roll out a new pod
	// template at once; 0 means no limit.
	MaxRollouts int
	// Judged, when set, is called after each round of verdicts, on every
	// replica (see RunHealth), so that a standby can act on them.
	Judged func()
}

// Controller reconciles LoadBalancer Services with their proxy workloads
// and status.
type Controller struct {
	logger   klog.Logger
	client   kubernetes.Interface
	recorder record.EventRecorder
	cfg      Config
	metrics  *Metrics
	rollouts *rollouts
	// placed remembers the proxy pods just placed, until the cache shows
	// them so.
	placed placedPods
	now    func() time.Time

	services corelisters.ServiceLister
	// written holds the Services this controller wrote until the informer
	// has them, so that the next sync starts from what was written rather
	// than from a stale cache copy whose update would only conflict.
	written  cache.MutationCache
	nodes    corelisters.NodeLister
	slices   discoverylisters.EndpointSliceLister
	pods     corelisters.PodNamespaceLister
	podIndex cache.Indexer // pods by serviceIndex
	// workloadIndexes are the Deployments', DaemonSets' and
	// PodDisruptionBudgets' caches, by serviceIndex.
	workloadIndexes []cache.Indexer
	deployments     appslisters.DeploymentNamespaceLister
	daemonSets      appslisters.DaemonSetNamespaceLister
	budgets         policylisters.PodDisruptionBudgetNamespaceLister
	synced          []cache.InformerSynced

	// The work queues last for the process; each term as leader (Run)
	// has its own queue behind them (termQueue).
	queue *termQueue[cache.ObjectName]
	// urgent holds the Services whose verdicts changed, synced by workers
	// of their own so that a failover never waits behind routine syncs;
	// syncing keeps a Service from being synced from both queues at once.
	urgent    *termQueue[cache.ObjectName]
	syncing   keyLocks
	nodeQueue *termQueue[string]

	// reports is nil when the health pipeline is off; leases is nil
	// without prober Leases.
	reports     cache.Store
	leases      cache.Store
	healthQueue workqueue.TypedRateLimitingInterface[string]
	// healthOnce starts the health worker once, from RunHealth or Run.
	healthOnce sync.Once
	// standby is set while this replica judges without acting: its
	// verdict changes raise no Events and restart no proxy (RunHealth).
	standby atomic.Bool
	// verdicts are judged by evaluate and read by the sync workers.
	verdicts status.Engine
	// judging is the health worker's own state between evaluations;
	// targetInputs are the caches the targets it judges are made of.
	judging      judging
	targetInputs []cache.Store
	restarts     restartBackoffs
	// reaper holds the proxy Deployments deleted whose ReplicaSets the
	// leader sees gone (reaper.go).
	reaper reaper
	// endpointGaps holds the Local Services' nodes that lost their last
	// endpoint a moment ago (LocalEndpointGrace).
	endpointGaps endpointGaps
	// external holds what the external vantages say about each Service,
	// judged by evaluate and read by the sync workers; guarded by mu.
	external map[cache.ObjectName]status.External
	// vantages remembers the vantage assignment of the targets judged.
	vantages contract.VantageMemo
	// targetSettings holds the settings of the Services the health
	// worker reads (listTargets, judgeExternal), parsed once per change.
	targetSettings contract.ParseCache
	// judged holds the targets of the last round of verdicts (Judged);
	// judgedListeners are told of each round (onJudged), guarded by mu.
	judged          atomic.Pointer[[]healthTarget]
	judgedListeners []func()

	mu sync.Mutex
	// records holds what is remembered of each Service between its
	// syncs; managedCount how many of them are served.
	records      map[cache.ObjectName]*serviceRecord
	managedCount int
	// refusals are the nodes whose kubelet refused proxy pods' sysctls.
	refusals refusals
	// echoes are the resourceVersions of this controller's own writes of
	// each Service that the informer has not delivered yet (see
	// ownEcho).
	echoes map[cache.ObjectName][]string
	// allowLists is when each Service's current allow-list was first
	// wanted, for allowListGrace.
	allowLists map[cache.ObjectName]allowListSince
	// failing is when a vantage last reported each port target Down
	// (noteFailing); beaconsFailing holds the nodes whose beacon a fresh
	// vantage reports Down now.
	failing        map[string]time.Time
	beaconsFailing map[string]bool
}

// New returns a Controller reading Services, Nodes and EndpointSlices from
// cluster (a cluster-wide informer factory) and Pods, Deployments and
// DaemonSets from system (a factory limited to cfg.Placement.Namespace).
// The caller starts the factories.
func New(ctx context.Context, client kubernetes.Interface, cluster, system informers.SharedInformerFactory,
	recorder record.EventRecorder, cfg Config) (*Controller, error) {
	logger := klog.FromContext(ctx)
	svcInformer := cluster.Core().V1().Services()
	nodeInformer := cluster.Core().V1().Nodes()
	sliceInformer := cluster.Discovery().V1().EndpointSlices()
	podInformer := system.Core().V1().Pods()
	deployInformer := system.Apps().V1().Deployments()
	dsInformer := system.Apps().V1().DaemonSets()
	pdbInformer := system.Policy().V1().PodDisruptionBudgets()
	ns := cfg.Placement.Namespace
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	// Each sync reads its Service's proxy pods and workloads; an index
	// keeps that independent of how many other Services' there are.
	for _, inf := range []cache.SharedIndexInformer{podInformer.Informer(), deployInformer.Informer(), dsInformer.Informer(), pdbInformer.Informer()} {
		if err := inf.AddIndexers(cache.Indexers{serviceIndex: serviceIndexFunc}); err != nil {
			return nil, fmt.Errorf("adding service index: %w", err)
		}
	}

	c := &Controller{
		logger:   logger,
		client:   client,
		recorder: recorder,
		cfg:      cfg,
		metrics:  cfg.Metrics,
		rollouts: &rollouts{max: cfg.MaxRollouts},
		now:      time.Now,
		services: svcInformer.Lister(),
		written: cache.NewIntegerResourceVersionMutationCacheWithOptions(logger, svcInformer.Informer().GetStore(),
			cache.MutationCacheOptions{TTL: time.Minute, MaxCacheSize: 8192}),
		nodes:    nodeInformer.Lister(),
		slices:   sliceInformer.Lister(),
		pods:     podInformer.Lister().Pods(ns),
		podIndex: podInformer.Informer().GetIndexer(),
		workloadIndexes: []cache.Indexer{deployInformer.Informer().GetIndexer(), dsInformer.Informer().GetIndexer(),
			pdbInformer.Informer().GetIndexer()},
		deployments: deployInformer.Lister().Deployments(ns),
		daemonSets:  dsInformer.Lister().DaemonSets(ns),
		budgets:     pdbInformer.Lister().PodDisruptionBudgets(ns),
		synced: []cache.InformerSynced{
			svcInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced, sliceInformer.Informer().HasSynced,
			podInformer.Informer().HasSynced, deployInformer.Informer().HasSynced, dsInformer.Informer().HasSynced, pdbInformer.Informer().HasSynced,
		},
		queue:      newTermQueue[cache.ObjectName]("services", cfg.Metrics),
		urgent:     newTermQueue[cache.ObjectName]("failovers", cfg.Metrics),
		nodeQueue:  newTermQueue[string]("nodes", cfg.Metrics),
		records:    map[cache.ObjectName]*serviceRecord{},
		echoes:     map[cache.ObjectName][]string{},
		allowLists: map[cache.ObjectName]allowListSince{},
	}

	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{svcInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				c.observedService(obj, false)
				c.enqueueService(obj)
			},
			UpdateFunc: func(_, obj any) {
				c.observedService(obj, false)
				if c.ownEcho(obj) {
					return
				}
				c.enqueueService(obj)
			},
			DeleteFunc: func(obj any) {
				c.observedService(obj, true)
				c.enqueueService(obj)
			},
		}},
		{nodeInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.nodeChanged(nil, obj) },
			UpdateFunc: c.nodeChanged,
			DeleteFunc: func(obj any) { c.nodeChanged(obj, nil) },
		}},
		{podInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.proberAddressesChanged(nil, obj) },
			UpdateFunc: c.proberAddressesChanged,
			DeleteFunc: func(obj any) { c.proberAddressesChanged(obj, nil) },
		}},
		{sliceInformer.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueSliceService,
			UpdateFunc: func(_, obj any) { c.enqueueSliceService(obj) },
			DeleteFunc: c.enqueueSliceService,
		}},
	}
	for _, inf := range []cache.SharedIndexInformer{podInformer.Informer(), deployInformer.Informer(), dsInformer.Informer(), pdbInformer.Informer()} {
		handlers = append(handlers, struct {
			informer cache.SharedIndexInformer
			handler  cache.ResourceEventHandler
		}{inf, cache.ResourceEventHandlerFuncs{
			AddFunc: c.enqueueOwner,
			UpdateFunc: func(oldObj, newObj any) {
				if workloadUnchanged(oldObj, newObj) {
					return
				}
				c.enqueueOwner(newObj)
			},
			DeleteFunc: c.enqueueOwner,
		}})
	}
	if cfg.Health.Reports != nil {
		if c.cfg.Health.Vantages <= 0 {
			c.cfg.Health.Vantages = contract.DefaultVantages
		}
		if c.cfg.Health.Resync <= 0 {
			c.cfg.Health.Resync = time.Second
		}
		c.reports = cfg.Health.Reports.GetStore()
		c.healthQueue = workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "health", MetricsProvider: queueMetrics{cfg.Metrics}})
		c.synced = append(c.synced, cfg.Health.Reports.HasSynced)
		evaluate := func(any) { c.healthQueue.Add(healthKey) }
		handlers = append(handlers, struct {
			informer cache.SharedIndexInformer
			handler  cache.ResourceEventHandler
		}{cfg.Health.Reports, cache.ResourceEventHandlerFuncs{
			AddFunc:    evaluate,
			UpdateFunc: func(_, obj any) { evaluate(obj) },
			DeleteFunc: evaluate,
		}})
		// What the targets are made of: a change is judged at once.
		inputs := []cache.SharedIndexInformer{podInformer.Informer(), nodeInformer.Informer(), svcInformer.Informer(),
			deployInformer.Informer(), dsInformer.Informer()}
		for _, inf := range inputs {
			c.targetInputs = append(c.targetInputs, inf.GetStore())
			handlers = append(handlers, struct {
				informer cache.SharedIndexInformer
				handler  cache.ResourceEventHandler
			}{inf, cache.ResourceEventHandlerFuncs{
				AddFunc: evaluate,
				UpdateFunc: func(oldObj, newObj any) {
					if targetInputChanged(oldObj, newObj) {
						evaluate(newObj)
					}
				},
				DeleteFunc: evaluate,
			}})
		}
		if cfg.Health.Leases != nil {
			c.leases = cfg.Health.Leases.GetStore()
			c.synced = append(c.synced, cfg.Health.Leases.HasSynced)
			handlers = append(handlers, struct {
				informer cache.SharedIndexInformer
				handler  cache.ResourceEventHandler
			}{cfg.Health.Leases, c.leaseRenewed(func() { c.healthQueue.Add(healthKey) })})
		}
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, fmt.Errorf("adding event handler: %w", err)
		}
	}
	logger.V(2).Info("Set up controller", "namespace", ns, "classOnly", cfg.Services.ClassOnly, "dnsEndpoints", cfg.DNSEndpoints != nil)
	return c, nil
}

// Run waits for the caches, removes orphaned workloads, and runs workers
// until ctx is done; it returns when every worker has finished its item.
// It ends a standby begun by RunHealth: from now on the verdict changes are
// acted on. A term as leader is one Run: when it returns, the replica is a
// standby again (its verdicts kept warm, none acted on), and the next Run
// starts a new term with every Service and node queued again.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	defer func() {
		c.standby.Store(true)
		c.queue.ShutDown()
		c.urgent.ShutDown()
		c.nodeQueue.ShutDown()
		wg.Wait()
		c.queue.renew()
		c.urgent.renew()
		c.nodeQueue.renew()
		logger.Info("Stopped controller")
	}()

	logger.Info("Waiting for informer caches to sync")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for informer caches to sync: %w", ctx.Err())
	}
	c.standby.Store(false)
	// What the informers queued before, and whatever a term before this
	// one left undone (its queues are gone).
	if err := c.enqueueAll(); err != nil {
		return err
	}
	if err := c.collectOrphans(ctx); err != nil {
		// Not fatal: the orphans are retried at the next start, and a
		// Service's own sync removes its stale workloads.
		logger.Error(err, "Collecting orphaned proxy workloads failed")
	}
	if err := c.findGhosts(ctx); err != nil {
		// Not fatal either: the next term looks again.
		logger.Error(err, "Looking for proxy ReplicaSets of deleted Deployments failed")
	}
	logger.Info("Starting workers", "count", workers)
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.runServiceWorker, time.Second) })
		wg.Go(func() { wait.UntilWithContext(ctx, c.runUrgentWorker, time.Second) })
	}
	wg.Go(func() { wait.UntilWithContext(ctx, c.runNodeWorker, time.Second) })
	wg.Go(func() { c.reap(ctx) })
	c.startHealth(ctx)
	<-ctx.Done()
	return nil
}

// enqueueAll queues every Service and node from the caches.
func (c *Controller) enqueueAll() error {
	services, err := c.services.List(everything)
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	for _, svc := range services {
		c.queue.Add(cache.MetaObjectToName(svc))
	}
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes {
		c.nodeQueue.Add(n.Name)
	}
	return nil
}

// RunHealth judges the targets and beacons from the probers' reports until
// ctx is done, on a replica that does not lead (yet): the verdicts, their
// flap damping and how long each has been Down are the leader's own, so a
// standby that takes over acts at once on what the leader saw, and can
// tell that the leader's node failed (NodeDown). Until Run, a change of
// verdict raises no Event and restarts no proxy. It returns at once; it
// does nothing without the health pipeline.
func (c *Controller) RunHealth(ctx context.Context) {
	c.standby.Store(true)
	c.startHealth(ctx)
}

// startHealth starts the health worker the first time it is called, until
// ctx is done.
func (c *Controller) startHealth(ctx context.Context) {
	if c.healthQueue == nil {
		return
	}
	c.healthOnce.Do(func() {
		c.healthQueue.Add(healthKey)
		go func() {
			<-ctx.Done()
			c.healthQueue.ShutDown()
		}()
		go func() {
			// Judging empty caches would make every target unknown.
			if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
				return
			}
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, c.metrics, c.healthQueue, "health", c.evaluate) {
				}
			}, time.Second)
		}()
	})
}

// NodeDown reports whether node's beacon is judged Down by its probers'
// quorum: the node is cut off or dead, as for failing its proxies over.
func (c *Controller) NodeDown(node string) bool {
	return c.verdicts.Verdict(contract.BeaconKey(node)).Verdict == status.VerdictDown
}

// PodNode returns the node of the pod called name in the pulselb
// namespace, from the cache; false when it is not known or not scheduled.
func (c *Controller) PodNode(name string) (string, bool) {
	p, err := c.pods.Get(name)
	if err != nil || p.Spec.NodeName == "" {
		return "", false
	}
	return p.Spec.NodeName, true
}

func (c *Controller) runServiceWorker(ctx context.Context) {
	for processNext(ctx, c.metrics, c.queue, "services", c.syncExclusive) {
	}
}

func (c *Controller) runUrgentWorker(ctx context.Context) {
	for processNext(ctx, c.metrics, c.urgent, "failovers", c.syncExclusive) {
	}
}

// syncExclusive syncs the Service key once no other worker syncs it: each
// queue hands a key to one worker at a time, but a Service may be in both.
func (c *Controller) syncExclusive(ctx context.Context, key cache.ObjectName) error {
	c.syncing.lock(key)
	defer c.syncing.unlock(key)
	return c.sync(ctx, key)
}

// keyLocks holds a lock per key; the zero value is ready.
type keyLocks struct {
	mu   sync.Mutex
	cond *sync.Cond
	held map[cache.ObjectName]bool
}

func (l *keyLocks) lock(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cond == nil {
		l.cond, l.held = sync.NewCond(&l.mu), map[cache.ObjectName]bool{}
	}
	for l.held[key] {
		l.cond.Wait()
	}
	l.held[key] = true
}

func (l *keyLocks) unlock(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, key)
	l.cond.Broadcast()
}

func (c *Controller) runNodeWorker(ctx context.Context) {
	for processNext(ctx, c.metrics, c.nodeQueue, "nodes", c.syncNode) {
	}
}

// processNext handles one item of q: done on success, rate-limited retry on
// error. It returns false when q is shut down.
func processNext[T comparable](ctx context.Context, m *Metrics, q workqueue.TypedRateLimitingInterface[T], name string,
	syncFn func(context.Context, T) error) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	start := time.Now()
	err := syncFn(ctx, key)
	result := "ok"
	if err != nil {
		result = "error"
		m.syncErrors.WithLabelValues(name).Inc()
		q.AddRateLimited(key)
		klog.FromContext(ctx).Error(err, "Reconcile failed, will retry", "queue", name, "key", key)
	} else {
		q.Forget(key)
	}
	m.syncDuration.WithLabelValues(name, result).Observe(time.Since(start).Seconds())
	return true
}

// serviceIndex indexes proxy pods and workloads by their Service's
// "namespace/name".
const serviceIndex = "pulselb.io/service"

func serviceIndexFunc(obj any) ([]string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	key, ok := contract.ServiceOf(o.GetLabels())
	if !ok {
		return nil, nil
	}
	return []string{key.String()}, nil
}

// proxyPods returns svc's proxy pods from the cache.
func (c *Controller) proxyPods(svc *corev1.Service) ([]*corev1.Pod, error) {
	objs, err := c.podIndex.ByIndex(serviceIndex, svc.Namespace+"/"+svc.Name)
	if err != nil {
		return nil, fmt.Errorf("listing proxy pods: %w", err)
	}
	sel := labels.SelectorFromSet(contract.ProxySelector(svc))
	ns := c.cfg.Placement.Namespace
	var own []*corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Namespace == ns && sel.Matches(labels.Set(p.Labels)) {
			own = append(own, p)
		}
	}
	return own, nil
}

// wants reports whether pulselb serves svc.
func (c *Controller) wants(svc *corev1.Service) bool { return c.cfg.Services.Serves(svc) }

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

// observedService tells the mutation cache what the informer saw, so that
// a written copy is dropped once the cache has it or something newer.
func (c *Controller) observedService(obj any, deleted bool) {
	svc, ok := unwrap(obj).(*corev1.Service)
	if !ok {
		return
	}
	if deleted {
		c.written.OnDelete(svc)
		c.mu.Lock()
		delete(c.echoes, cache.MetaObjectToName(svc))
		c.mu.Unlock()
	} else {
		c.written.OnAddOrUpdate(svc)
	}
}

// service returns the Service key names: the informer's copy, or the one
// this controller last wrote when that is newer.
func (c *Controller) service(key cache.ObjectName) (*corev1.Service, error) {
	obj, exists, err := c.written.GetByKey(key.String())
	if err != nil {
		return nil, fmt.Errorf("getting service %s: %w", key, err)
	}
	if !exists {
		return nil, apierrors.NewNotFound(corev1.Resource("services"), key.Name)
	}
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, fmt.Errorf("getting service %s: cache holds a %T", key, obj)
	}
	return svc, nil
}

// wroteService records a Service as the API server returned it from a
// write, for the next sync (see Controller.written).
func (c *Controller) wroteService(svc *corev1.Service) {
	if _, err := trim.Object(svc); err == nil {
		c.written.Mutation(svc)
	}
	key := cache.MetaObjectToName(svc)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := append(c.echoes[key], svc.ResourceVersion)
	if len(e) > maxEchoes {
		// Echoes an informer relist skipped never arrive.
		e = e[len(e)-maxEchoes:]
	}
	c.echoes[key] = e
}

// maxEchoes bounds the own writes of one Service remembered by ownEcho.
const maxEchoes = 4

// ownEcho reports an update event that delivers the Service exactly as
// this controller wrote it, and forgets that write. Such an event needs no
// sync: the sync that wrote it carried on from what it wrote (and requeued
// itself for anything it left for later), and whatever changed since has
// an event of its own. A Service taken on is written twice, so this spares
// two syncs of each. An event that overtakes its write's response is not
// recognised and queues a sync, which then finds nothing to do.
func (c *Controller) ownEcho(obj any) bool {
	svc, ok := unwrap(obj).(*corev1.Service)
	if !ok {
		return false
	}
	key := cache.MetaObjectToName(svc)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.echoes[key]
	i := slices.Index(e, svc.ResourceVersion)
	if i < 0 {
		return false
	}
	if e = e[i+1:]; len(e) == 0 {
		delete(c.echoes, key)
	} else {
		c.echoes[key] = e
	}
	return true
}

func (c *Controller) enqueueService(obj any) {
	if svc, ok := unwrap(obj).(*corev1.Service); ok {
		c.queue.Add(cache.MetaObjectToName(svc))
	}
}

// enqueueOwner enqueues the Service a proxy pod, workload or
// PodDisruptionBudget belongs to, so that one changed or deleted by hand is
// put back.
func (c *Controller) enqueueOwner(obj any) {
	var l map[string]string
	switch o := unwrap(obj).(type) {
	case *corev1.Pod:
		l = o.Labels
		c.refusals.note(o)
	case *appsv1.Deployment:
		l = o.Labels
	case *appsv1.DaemonSet:
		l = o.Labels
	case *policyv1.PodDisruptionBudget:
		l = o.Labels
	default:
		return
	}
	if key, ok := contract.ServiceOf(l); ok {
		c.queue.Add(cache.NewObjectName(key.Namespace, key.Name))
	}
}

// workloadUnchanged reports an update of a proxy Deployment, DaemonSet or
// PodDisruptionBudget that changed nothing sync reads: sync reads a
// workload's labels, spec and pulselb's annotations, never its status, and
// the workload and disruption controllers update the status several times
// for every pod they start (the Deployment controller also adds its
// revision annotation once).
func workloadUnchanged(oldObj, newObj any) bool {
	var a, b metav1.Object
	switch o := oldObj.(type) {
	case *appsv1.Deployment:
		n, ok := newObj.(*appsv1.Deployment)
		if !ok {
			return false
		}
		a, b = o, n
	case *appsv1.DaemonSet:
		n, ok := newObj.(*appsv1.DaemonSet)
		if !ok {
			return false
		}
		a, b = o, n
	case *policyv1.PodDisruptionBudget:
		n, ok := newObj.(*policyv1.PodDisruptionBudget)
		if !ok {
			return false
		}
		a, b = o, n
	default:
		return false
	}
	return a.GetGeneration() == b.GetGeneration() && a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp()) &&
		maps.Equal(a.GetLabels(), b.GetLabels()) && maps.Equal(pulselbAnnotations(a), pulselbAnnotations(b))
}

// pulselbAnnotations returns o's annotations under contract.Prefix, the
// only ones sync reads of a workload.
func pulselbAnnotations(o metav1.Object) map[string]string {
	out := map[string]string{}
	for k, v := range o.GetAnnotations() {
		if strings.HasPrefix(k, contract.Prefix) {
			out[k] = v
		}
	}
	return out
}

// enqueueSliceService enqueues an externalTrafficPolicy Local Service whose
// endpoints changed; other Services do not look at endpoints.
func (c *Controller) enqueueSliceService(obj any) {
	slice, ok := unwrap(obj).(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	name := slice.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return
	}
	svc, err := c.services.Services(slice.Namespace).Get(name)
	if err != nil || svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return
	}
	c.queue.Add(cache.NewObjectName(svc.Namespace, svc.Name))
}

// nodeChanged queues the node's label check and, when something placement
// or status reads changed, every served Service.
func (c *Controller) nodeChanged(oldObj, newObj any) {
	oldNode, _ := unwrap(oldObj).(*corev1.Node)
	newNode, _ := unwrap(newObj).(*corev1.Node)
	if newNode != nil {
		c.nodeQueue.Add(newNode.Name)
	}
	if oldNode != nil && newNode != nil && !nodeRelevantChange(oldNode, newNode) {
		return
	}
	// The controller's own label on a failed node follows a beacon
	// verdict that has already queued the Services served there: the
	// others only see an eligible node fewer or more, which is not urgent,
	// and 2,000 of them queued at once would delay the next failover's
	// syncs by seconds.
	delay := time.Duration(0)
	if oldNode != nil && newNode != nil && onlyOwnLabelsChanged(oldNode, newNode) {
		delay = ownLabelResync
	}
	services, err := c.services.List(everything)
	if err != nil {
		return
	}
	for _, svc := range services {
		if c.wants(svc) || c.holdsFinalizer(svc) {
			if delay > 0 {
				c.queue.AddAfter(cache.MetaObjectToName(svc), delay)
			} else {
				c.queue.Add(cache.MetaObjectToName(svc))
			}
		}
	}
}

// ownLabelResync is how long after the controller changes its own labels on
// a node (pulselb.io/unhealthy, pulselb.io/external-ip) the Services not
// served there are synced for it.
const ownLabelResync = 5 * time.Second

// onlyOwnLabelsChanged reports whether a and b differ only in the labels
// the controller itself writes on nodes.
func onlyOwnLabelsChanged(a, b *corev1.Node) bool {
	strip := func(l map[string]string) map[string]string {
		l = maps.Clone(l)
		delete(l, contract.LabelUnhealthy)
		delete(l, contract.LabelExternalIP)
		return l
	}
	x, y := a.DeepCopy(), b.DeepCopy()
	x.Labels, y.Labels = strip(x.Labels), strip(y.Labels)
	return !nodeRelevantChange(x, y)
}

// nodeRelevantChange reports a change that can alter eligibility or the
// published addresses; heartbeats and image lists do not.
func nodeRelevantChange(a, b *corev1.Node) bool {
	if contract.NodeReady(a) != contract.NodeReady(b) || a.Spec.Unschedulable != b.Spec.Unschedulable ||
		!maps.Equal(a.Labels, b.Labels) || len(a.Spec.Taints) != len(b.Spec.Taints) ||
		len(a.Status.Addresses) != len(b.Status.Addresses) {
		return true
	}
	for i := range a.Spec.Taints {
		if !a.Spec.Taints[i].MatchTaint(&b.Spec.Taints[i]) {
			return true
		}
	}
	for i := range a.Status.Addresses {
		if a.Status.Addresses[i] != b.Status.Addresses[i] {
			return true
		}
	}
	return false
}
