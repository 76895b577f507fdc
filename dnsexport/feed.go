package dnsexport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
)

// DefaultDebounce is how long a Feed waits after a Service change before
// it rebuilds the zone, so that a burst of changes (a failover rewriting
// many statuses) costs one rebuild and one serial.
const DefaultDebounce = 100 * time.Millisecond

// FeedConfig says which Services a Feed serves and how.
type FeedConfig struct {
	// Services says which Services the zone holds (the controller's
	// --class-only).
	Services contract.Selection
	// Debounce coalesces changes; default DefaultDebounce.
	Debounce time.Duration
	// RetryInterval is the pause before retrying a failed Update (the
	// serial file could not be written); default one second.
	RetryInterval time.Duration
	// Report, when set, is called from Run's goroutine with a Service and
	// its zone problems (*ServiceError) whenever that Service's set of problems changes to a
	// non-empty one, so a problem is reported once, not at every rebuild.
	Report func(svc *corev1.Service, problems []error)
}

// Feed keeps a Server's zone equal to the Services in an informer cache:
// every Service add, update and delete rebuilds the zone (debounced). It
// needs no leader lock, so every controller replica can serve DNS.
type Feed struct {
	server   *Server
	services corelisters.ServiceLister
	synced   cache.InformerSynced
	cfg      FeedConfig
	// changed is signalled, never blocking, by the event handlers.
	changed chan struct{}
	// reported is the last problem text reported per Service.
	reported map[cache.ObjectName]string
	// parsed holds each Service's settings: a rebuild reads every
	// Service, and parses only those whose annotations or ports changed.
	parsed contract.ParseCache
}

// NewFeed returns a Feed that fills server from informer. The caller
// starts the informer's factory and then calls Run.
func NewFeed(server *Server, informer coreinformers.ServiceInformer, cfg FeedConfig) (*Feed, error) {
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	f := &Feed{
		server:   server,
		services: informer.Lister(),
		synced:   informer.Informer().HasSynced,
		cfg:      cfg,
		changed:  make(chan struct{}, 1),
		reported: map[cache.ObjectName]string{},
	}
	// Handlers only signal: the rebuild reads the whole lister, so which
	// Service changed does not matter (and tombstones need no unwrapping).
	signal := func() {
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal() },
		UpdateFunc: func(any, any) { signal() },
		DeleteFunc: func(any) { signal() },
	}); err != nil {
		return nil, fmt.Errorf("dns feed: adding service event handler: %w", err)
	}
	return f, nil
}

// serves reports whether the zone holds svc: a Service pulselb serves that
// is not being deleted. A Service being deleted loses its names at once,
// while the controller still holds it with its finalizer to remove the
// proxies.
func (f *Feed) serves(svc *corev1.Service) bool {
	return f.cfg.Services.Active(svc)
}

// Run waits for the informer cache, serves the first zone, and then
// rebuilds it after every change until ctx is done. Until the first zone
// is served the server answers SERVFAIL, never an empty zone.
func (f *Feed) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), f.synced) {
		return fmt.Errorf("dns feed: waiting for the service cache: %w", ctx.Err())
	}
	// The first zone needs no debounce; a pending signal from the
	// initial list is consumed by it.
	select {
	case <-f.changed:
	default:
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	pending := true // a rebuild is due when timer fires
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.changed:
			if !pending {
				pending = true
				timer.Reset(f.cfg.Debounce)
			}
		case <-timer.C:
			pending = false
			if err := f.sync(ctx); err != nil {
				logger.Error(err, "Updating DNS zone failed, will retry", "retryIn", f.cfg.RetryInterval)
				pending = true
				timer.Reset(f.cfg.RetryInterval)
			}
		}
	}
}

// sync rebuilds the zone from the cache once.
func (f *Feed) sync(ctx context.Context) error {
	all, err := f.services.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing services: %w", err)
	}
	byName := map[cache.ObjectName]*corev1.Service{}
	problems := map[cache.ObjectName][]error{}
	services := make([]Service, 0, len(all))
	for _, svc := range all {
		if !f.serves(svc) {
			continue
		}
		key := cache.MetaObjectToName(svc)
		byName[key] = svc
		settings, _ := f.parsed.Parse(svc) // the controller reports the problems
		services = append(services, fromService(svc, settings))
	}
	f.parsed.Prune()
	zoneProblems, err := f.server.Update(services)
	for _, p := range zoneProblems {
		var se *ServiceError
		if errors.As(p, &se) {
			key := cache.NewObjectName(se.Namespace, se.Name)
			problems[key] = append(problems[key], p)
		}
	}
	f.report(ctx, byName, problems)
	if err != nil {
		return err
	}
	if z := f.server.Zone(); z != nil {
		klog.FromContext(ctx).V(4).Info("Rebuilt DNS zone", "services", len(services), "serial", z.Serial(), "records", z.Len())
	}
	return nil
}

// report calls cfg.Report for each Service whose problems changed, and
// forgets Services that have none left (or are gone).
func (f *Feed) report(ctx context.Context, services map[cache.ObjectName]*corev1.Service, problems map[cache.ObjectName][]error) {
	for key := range f.reported {
		if _, ok := problems[key]; !ok {
			delete(f.reported, key)
		}
	}
	keys := make([]cache.ObjectName, 0, len(problems))
	for key := range problems {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b cache.ObjectName) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range keys {
		errs := problems[key]
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		text := strings.Join(msgs, "\n")
		if f.reported[key] == text {
			continue
		}
		f.reported[key] = text
		if svc := services[key]; svc != nil && f.cfg.Report != nil {
			f.cfg.Report(svc, errs)
		} else if svc != nil {
			klog.FromContext(ctx).Info("Service has DNS problems", "service", klog.KObj(svc), "problems", msgs)
		}
	}
}
