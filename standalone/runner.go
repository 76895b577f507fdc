package standalone

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/report"
	"github.com/pulselb/pulselb/status"
)

// Options are what a Runner needs besides its Config.
type Options struct {
	// Registry receives the metrics served at /metrics; nil means a new
	// registry.
	Registry *prometheus.Registry
	// OnTransition, when set, is called for every verdict change, in
	// order, from the goroutine that judges. It must not block for long.
	OnTransition func(dashboard.Transition)
	// Title heads the dashboard.
	Title string
	// HTTPMetrics receives the HTTP server's metrics, registered by the
	// caller; nil means new ones, registered in Registry.
	HTTPMetrics *httpserver.Metrics
}

// Runner is one standalone instance: probes, verdicts, DNS, dashboard,
// peer reports and metrics.
type Runner struct {
	opts          Options
	reg           *prometheus.Registry
	metrics       *metrics
	proberMetrics *prober.Metrics
	sched         *prober.Scheduler
	dns           *dnsexport.Server
	dash          *dashboard.Dashboard
	httpLn        net.Listener
	client        *http.Client

	// wake asks the judging loop to look again.
	wake chan struct{}

	mu      sync.Mutex
	cfg     *Config
	targets map[string]targetInfo
	order   []string
	probers map[string]builtProber
	peers   map[string]*peerState
	// engine judges the targets; since holds when each target's verdict
	// last changed, for the dashboard and the state file.
	engine status.Engine
	since  map[string]time.Time
	// publishedHosts are, per service, the hosts in its DNS answer now,
	// each with the addresses published for it: a host whose addresses
	// changed is not the host that was published.
	publishedHosts map[string]map[string][]netip.Addr
	// failingOpen holds the services whose answer fails open now.
	failingOpen map[string]bool
	transitions []dashboard.Transition
	state       dashboard.State
	// saved is false while the state file lags behind the verdicts;
	// saveErr is the last save's error, empty after a good one.
	saved   bool
	saveErr string

	// lastProblems are the zone problems last logged; only the judging
	// loop uses them.
	lastProblems []string
}

type targetInfo struct {
	service string
	host    string
	port    Port
	// addr is where the target is probed; hostAddrs are the host's
	// published addresses.
	addr      netip.AddrPort
	hostAddrs []netip.Addr
}

type builtProber struct {
	spec   string
	prober prober.Prober
}

// New checks cfg, opens the DNS and HTTP sockets, loads the state file and
// returns a Runner ready to Run. A state file that cannot be read is
// logged and ignored: the instance then starts from Unknown.
func New(ctx context.Context, cfg *Config, opts Options) (*Runner, error) {
	logger := klog.FromContext(ctx)
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	r := &Runner{
		opts:          opts,
		reg:           reg,
		metrics:       newMetrics(),
		proberMetrics: prober.NewMetrics(),

		client:         newPeerClient(),
		wake:           make(chan struct{}, 1),
		cfg:            cfg,
		probers:        map[string]builtProber{},
		peers:          map[string]*peerState{},
		since:          map[string]time.Time{},
		publishedHosts: map[string]map[string][]netip.Addr{},
		failingOpen:    map[string]bool{},
		saved:          true,
	}
	dnsMetrics, dashMetrics := dnsexport.NewMetrics(), dashboard.NewMetrics()
	r.dash = dashboard.New(dashboard.Options{Title: opts.Title, Metrics: dashMetrics, MaxClients: dashboard.MaxClientsFor(cfg.HTTP.MaxConnections),
		MaxPageRows: cfg.HTTP.DashboardRows, ResponsesPerSecond: float64(cfg.HTTP.DashboardRate)})
	if err := errors.Join(r.metrics.RegisterMetrics(reg), r.proberMetrics.RegisterMetrics(reg), dnsMetrics.RegisterMetrics(reg), dashMetrics.RegisterMetrics(reg)); err != nil {
		return nil, err
	}
	if r.opts.HTTPMetrics == nil {
		r.opts.HTTPMetrics = httpserver.NewMetrics()
		if err := r.opts.HTTPMetrics.RegisterMetrics(reg); err != nil {
			return nil, err
		}
	}
	removed, err := removeStaleTemps(cfg.StateFile)
	if err != nil {
		logger.Error(err, "Removing temporary state files left by an interrupted write failed", "stateFile", cfg.StateFile)
	}
	if len(removed) > 0 {
		logger.Info("Removed temporary state files left by an interrupted write", "stateFile", cfg.StateFile, "files", removed)
	}
	r.sched = prober.NewScheduler(prober.Config{
		Interval: cfg.Interval,
		Rise:     cfg.Rise,
		Fall:     cfg.Fall,
		Metrics:  r.proberMetrics,
		OnChange: func(prober.Transition) { poke(r.wake) },
	})
	targets, infos, probers, err := r.buildTargets(cfg)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.setTargetsLocked(infos, probers)
	r.restoreLocked(logger, cfg.StateFile)
	r.mu.Unlock()
	r.sched.Set(targets)

	// The DNS server reads the serial file whole: refuse what would block
	// it or fill memory (Load checked it too, but it may have changed).
	if err := checkStateFile(cfg.DNS.SerialFile, MaxSerialBytes, "a serial file"); err != nil {
		return nil, fmt.Errorf("dns.serial-file: %w", err)
	}
	r.dns, err = dnsexport.NewServer(dnsexport.Config{Zone: cfg.zoneConfig(), Listen: cfg.DNS.Listen,
		SerialFile: cfg.DNS.SerialFile, RateLimit: cfg.DNS.RateLimit, Metrics: dnsMetrics})
	if err != nil {
		return nil, fmt.Errorf("creating dns server: %w", err)
	}
	if err := r.dns.Listen(); err != nil {
		return nil, err
	}
	r.httpLn, err = net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening on http %s: %w", cfg.HTTP.Listen, err)
	}
	logHTTPListen(logger, r.httpLn.Addr())
	warnPeers(logger, cfg)
	return r, nil
}

// restoreLocked loads the verdicts saved in the state file at path for
// the targets of the configuration, each only where it was reached: a
// target whose host moved while the instance was stopped (movedHost)
// starts Unknown, so its new address is published only once probed Up.
// A state file that cannot be read is logged and ignored. r.mu is held.
func (r *Runner) restoreLocked(logger klog.Logger, path string) {
	saved, err := loadState(path)
	if err != nil {
		logger.Error(err, "Ignoring the state file; starting from Unknown", "stateFile", path)
	}
	restored := 0
	for _, k := range r.order {
		v, ok := saved[k]
		if !ok {
			continue
		}
		ti := r.targets[k]
		if movedHost(v.addr, ti.addr, v.hostAddrs, ti.hostAddrs) {
			logger.Info("Host address changed since the verdict was saved; its verdict starts over", "service", ti.service, "host", ti.host,
				"port", ti.port.Port, "savedAddress", v.addr, "address", ti.addr)
			continue
		}
		r.engine.Restore(k, v.verdict)
		r.since[k] = v.since
		restored++
	}
	if restored > 0 {
		logger.Info("Loaded verdicts from the state file", "stateFile", path, "targets", restored)
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (r *Runner) config() *Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// DNSAddr is the address the DNS server listens on.
func (r *Runner) DNSAddr() netip.AddrPort { return r.dns.Addr() }

// HTTPAddr is the address of the dashboard, report and metrics server.
func (r *Runner) HTTPAddr() string { return r.httpLn.Addr().String() }

// Registry is the registry /metrics serves.
func (r *Runner) Registry() *prometheus.Registry { return r.reg }

// State returns what the dashboard shows now.
func (r *Runner) State() dashboard.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Handler serves the dashboard at / and /api/v1/*, this instance's report
// to peers at /api/v1/report, /metrics and /healthz.
func (r *Runner) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ReportPath, r.serveReport)
	metrics := promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, req *http.Request) {
		if !r.config().Metrics {
			http.NotFound(w, req)
			return
		}
		metrics.ServeHTTP(w, req)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/", r.dash)
	return mux
}

// Run probes, judges, serves DNS and HTTP and polls the peers until ctx is
// done, then closes the sockets.
func (r *Runner) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { _ = r.sched.Run(ctx) })
	wg.Go(func() {
		if err := r.dns.Run(ctx); err != nil {
			errs <- fmt.Errorf("dns server: %w", err)
		}
	})
	// Requests keep their context through the shutdown grace below.
	srv := httpserver.New(context.WithoutCancel(ctx), r.Handler(), httpserver.Options{Name: "standalone", MaxConns: r.config().HTTP.MaxConnections, Metrics: r.opts.HTTPMetrics})
	wg.Go(func() {
		if err := srv.Serve(r.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("http server: %w", err)
		}
	})
	wg.Go(func() { r.pollPeers(ctx) })
	logger.Info("Serving", "instance", r.config().Instance, "dns", r.DNSAddr(), "http", r.HTTPAddr(), "zone", r.config().Zone)

	var err error
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errs:
			break loop
		case <-r.wake:
		case <-timer.C:
		}
		r.evaluate(ctx)
		timer.Reset(r.config().Interval)
	}
	cancel()
	// Dashboard event streams stay open until their clients leave: end
	// them, give other requests a moment, then close what is left.
	r.dash.Close()
	shutdown, done := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer done()
	if srv.Shutdown(shutdown) != nil {
		_ = srv.Close()
	}
	wg.Wait()
	r.flushState(ctx)
	return err
}

// Reload applies cfg: targets that remain keep their state, streaks and
// verdicts; new ones start Unknown; removed ones are forgotten. Settings
// bound at start (instance, DNS and HTTP sockets, state file) keep their
// old values until a restart, and are logged. A new zone is refused with
// an error: the file's hostnames are checked against it, and they would
// not be served in the old one. On error nothing changes.
func (r *Runner) Reload(ctx context.Context, cfg *Config) error {
	logger := klog.FromContext(ctx)
	old := r.config()
	if cfg.Zone != old.Zone {
		// The zone is bound to the DNS server, and the new file's
		// hostnames were checked against the new zone: keeping the old
		// one would leave them silently not served.
		r.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("%s: zone: changed from %s to %s, which takes a restart; the reload is refused and the running configuration stays", cfg.File, old.Zone, cfg.Zone)
	}
	cfg = withFixed(old, cfg, func(field string) {
		logger.Info("Setting changes only at restart; keeping the running value", "field", field)
	})
	targets, infos, probers, err := r.buildTargets(cfg)
	if err != nil {
		r.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	r.mu.Lock()
	// The configuration, its targets, the scheduler's targets and the
	// verdicts change together, so the judging loop never sees one without
	// the others.
	r.cfg = cfg
	for name := range r.peers {
		if !slices.ContainsFunc(cfg.Peers, func(p Peer) bool { return p.Name == name }) {
			delete(r.peers, name)
		}
	}
	// A host moved when both its probe address and its published
	// addresses changed: its verdict was reached at another address. (A
	// new probe address alone is another path to the same host: the
	// scheduler probes it afresh, and the verdict stands until those
	// probes conclude, as after a restart.)
	var moved []string
	for k, ti := range infos {
		if old, ok := r.targets[k]; ok && movedHost(old.addr, ti.addr, old.hostAddrs, ti.hostAddrs) {
			moved = append(moved, k)
		}
	}
	slices.Sort(moved)
	r.setTargetsLocked(infos, probers)
	// The scheduler starts a target whose probe address changed afresh
	// and probes it at once; a moved host's verdict starts over too, so
	// its new address is published only once probed Up.
	r.sched.Set(targets)
	now := time.Now()
	for _, k := range moved {
		r.engine.Restore(k, status.VerdictUnknown)
		r.since[k] = now
		r.saved = false
		ti := infos[k]
		logger.Info("Host address changed; its verdict starts over", "service", ti.service, "host", ti.host, "port", ti.port.Port, "address", ti.addr)
	}
	r.mu.Unlock()
	r.metrics.reloads.WithLabelValues("ok").Inc()
	logger.Info("Reloaded configuration", "file", cfg.File, "services", len(cfg.Services), "targets", len(targets), "peers", len(cfg.Peers))
	warnPeers(logger, cfg)
	poke(r.wake)
	return nil
}

// ReloadFile loads the configuration file at path and applies it with
// Reload. On error, which names the file, line and field of every problem,
// the running configuration stays.
func (r *Runner) ReloadFile(ctx context.Context, path string) error {
	cfg, err := Load(path)
	if err != nil {
		r.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	return r.Reload(ctx, cfg)
}

// withFixed returns next with the settings bound at start taken from cur,
// calling changed for each that differs.
func withFixed(cur, next *Config, changed func(field string)) *Config {
	c := *next
	check := func(field string, differs bool) {
		if differs {
			changed(field)
		}
	}
	check("instance", c.Instance != cur.Instance)
	check("dns.listen", c.DNS.Listen != cur.DNS.Listen)
	check("dns.nameservers", fmt.Sprint(c.DNS.NameServers) != fmt.Sprint(cur.DNS.NameServers))
	check("dns.hostmaster", c.DNS.Hostmaster != cur.DNS.Hostmaster)
	check("dns.serial-file", c.DNS.SerialFile != cur.DNS.SerialFile)
	check("dns.rate-limit", c.DNS.RateLimit != cur.DNS.RateLimit)
	check("http.listen", c.HTTP.Listen != cur.HTTP.Listen)
	check("http.max-connections", c.HTTP.MaxConnections != cur.HTTP.MaxConnections)
	check("http.dashboard-rows", c.HTTP.DashboardRows != cur.HTTP.DashboardRows)
	check("http.dashboard-rate", c.HTTP.DashboardRate != cur.HTTP.DashboardRate)
	check("state-file", c.StateFile != cur.StateFile)
	c.Instance, c.Zone, c.HTTP, c.StateFile = cur.Instance, cur.Zone, cur.HTTP, cur.StateFile
	c.DNS.Listen, c.DNS.NameServers, c.DNS.Hostmaster, c.DNS.SerialFile = cur.DNS.Listen, cur.DNS.NameServers, cur.DNS.Hostmaster, cur.DNS.SerialFile
	c.DNS.RateLimit = cur.DNS.RateLimit
	return &c
}

// buildTargets returns the scheduler targets of cfg with their details and
// probers, reusing built probers whose spec did not change.
func (r *Runner) buildTargets(cfg *Config) ([]prober.Target, map[string]targetInfo, map[string]builtProber, error) {
	r.mu.Lock()
	cache := r.probers
	r.mu.Unlock()
	var opts prober.Options
	if cfg.SecretsDir != "" {
		opts.Secrets = prober.DirSecrets(cfg.SecretsDir)
	}
	var out []prober.Target
	infos := map[string]targetInfo{}
	probers := map[string]builtProber{}
	for _, svc := range cfg.Services {
		for _, h := range svc.Hosts {
			for _, p := range svc.Ports {
				key := Key(svc.Name, p, h.Name)
				b, ok := cache[key]
				if !ok || b.spec != p.Probe {
					pr, err := prober.New(p.Spec, opts)
					if err != nil {
						return nil, nil, nil, fmt.Errorf("service %s, host %s, port %d: %w", svc.Name, h.Name, p.Port, err)
					}
					b = builtProber{spec: p.Probe, prober: pr}
				}
				probers[key] = b
				addr := netip.AddrPortFrom(h.ProbeAddress, p.Port)
				infos[key] = targetInfo{service: svc.Name, host: h.Name, port: p, addr: addr, hostAddrs: h.Addresses}
				out = append(out, prober.Target{Key: key, Addr: addr, Protocol: p.Spec.Protocol, Prober: b.prober,
					Interval: cmp.Or(p.Spec.Interval, svc.Interval), Timeout: cmp.Or(p.Spec.Timeout, svc.Timeout),
					Rise: cmp.Or(p.Spec.Rise, svc.Rise), Fall: cmp.Or(p.Spec.Fall, svc.Fall)})
			}
		}
	}
	return out, infos, probers, nil
}

// setTargetsLocked installs the target details, forgetting what is known
// about targets that are gone. r.mu is held.
func (r *Runner) setTargetsLocked(infos map[string]targetInfo, probers map[string]builtProber) {
	r.targets, r.probers = infos, probers
	r.order = make([]string, 0, len(infos))
	for k := range infos {
		r.order = append(r.order, k)
	}
	slices.Sort(r.order)
	for k := range r.since {
		if _, ok := infos[k]; !ok {
			delete(r.since, k)
			r.saved = false
		}
	}
}

// Report returns this instance's ProbeReport: what its own probes
// concluded, in the form the cluster's probers write, so that the same
// quorum code judges both.
func (r *Runner) Report() *v1alpha1.ProbeReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reportLocked(time.Now())
}

// reportLocked is Report with r.mu held. The scheduler's snapshot is taken
// under r.mu, so that it matches the targets (a Reload changes both under
// r.mu).
func (r *Runner) reportLocked(now time.Time) *v1alpha1.ProbeReport {
	snap := r.sched.Snapshot()
	targets := make(map[string]report.Target, len(r.targets))
	for k, ti := range r.targets {
		targets[k] = report.Target{Service: ti.service, Port: int32(ti.port.Port), PortProtocol: ti.port.Protocol,
			Protocol: ti.port.Spec.Protocol, Node: ti.host}
	}
	return &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Instance},
		Status: report.Status(now, r.cfg.Interval, snap, targets)}
}

// certExpiries returns the certificate expiry of each target that has
// completed a TLS handshake, as the scheduler keeps it.
func (r *Runner) certExpiries() map[string]time.Time {
	certs := map[string]time.Time{}
	for _, s := range r.sched.Snapshot() {
		if !s.CertNotAfter.IsZero() {
			certs[s.Key] = s.CertNotAfter
		}
	}
	return certs
}

// pollPeers fetches every peer's report each interval until ctx is done.
func (r *Runner) pollPeers(ctx context.Context) {
	logger := klog.FromContext(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		cfg := r.config()
		timer.Reset(cfg.Interval)
		if len(cfg.Peers) == 0 {
			continue
		}
		// A poll may take up to one interval (at least a second), so that
		// a slow peer is late rather than absent.
		pctx, cancel := context.WithTimeout(ctx, max(cfg.Interval, time.Second))
		var wg sync.WaitGroup
		for _, p := range cfg.Peers {
			wg.Go(func() {
				rep, remote, err := fetchReport(pctx, r.client, p, string(cfg.Token), cfg.Interval, time.Now)
				if ctx.Err() != nil {
					return
				}
				r.recordPoll(logger, p, rep, remote, err)
			})
		}
		wg.Wait()
		cancel()
		poke(r.wake)
	}
}

// recordPoll keeps a peer's new report, which names itself remote, or its
// error. A failed poll keeps the last report, which turns stale after
// contract.StaleHeartbeats intervals. A report of this instance's own is refused
// (ErrSelf): its votes would count twice.
func (r *Runner) recordPoll(logger klog.Logger, p Peer, rep *v1alpha1.ProbeReport, remote string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && remote == r.cfg.Instance {
		err = fmt.Errorf("polling peer %s: %w: its report is named %q, as this instance; set its url to the peer's own address", p.Name, ErrSelf, remote)
		// A report of our own is not one to keep while the error lasts.
		if ps := r.peers[p.Name]; ps != nil {
			ps.report = nil
		}
	}
	result := "ok"
	switch {
	case errors.Is(err, ErrUnauthorized):
		result = "unauthorized"
	case errors.Is(err, ErrInvalidReport):
		result = "invalid"
	case errors.Is(err, ErrSelf):
		result = "self"
	case err != nil:
		result = "error"
	}
	r.metrics.peerPolls.WithLabelValues(result).Inc()
	if !slices.ContainsFunc(r.cfg.Peers, func(q Peer) bool { return q.Name == p.Name }) {
		return // removed by a reload meanwhile
	}
	ps := r.peers[p.Name]
	if ps == nil {
		ps = &peerState{}
		r.peers[p.Name] = ps
	}
	switch {
	case err != nil && ps.err == nil:
		logger.Info("Polling peer failed; its last report turns stale after missed polls", "peer", p.Name, "err", err)
	case err == nil && ps.err != nil:
		logger.Info("Polling peer works again", "peer", p.Name)
	}
	ps.err = err
	if err == nil {
		ps.report, ps.remote = rep, remote
	}
}

// peerReportsLocked returns the peers' reports that count: one per
// instance, however often it is listed. A peer whose report names the
// same instance as an earlier peer's (two URLs of one instance) is left
// out, and logged when that starts and ends. r.mu is held.
func (r *Runner) peerReportsLocked(logger klog.Logger, cfg *Config) []*v1alpha1.ProbeReport {
	var out []*v1alpha1.ProbeReport
	seen := map[string]string{}
	for _, p := range cfg.Peers {
		ps := r.peers[p.Name]
		if ps == nil || ps.report == nil {
			continue
		}
		first, dup := seen[ps.remote]
		switch {
		case dup && ps.sameAs != first:
			logger.Info("Peer is the same instance as another; leaving its report out", "peer", p.Name, "samePeer", first, "instance", ps.remote)
		case !dup && ps.sameAs != "":
			logger.Info("Peer is no longer the same instance as another; counting its report", "peer", p.Name, "instance", ps.remote)
		}
		if dup {
			ps.sameAs = first
			continue
		}
		ps.sameAs = ""
		seen[ps.remote] = p.Name
		out = append(out, ps.report)
	}
	return out
}

// evaluate judges every target over this instance's and the peers'
// reports, publishes the healthy hosts in DNS, saves the verdicts and
// updates the dashboard.
func (r *Runner) evaluate(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := time.Now()

	r.mu.Lock()
	own := r.reportLocked(now)
	cfg := r.cfg
	reports := append([]*v1alpha1.ProbeReport{own}, r.peerReportsLocked(logger, cfg)...)
	vantages := []string{cfg.Instance}
	for _, p := range cfg.Peers {
		vantages = append(vantages, p.Name)
	}
	slices.Sort(vantages)
	idx := status.IndexReports(reports, now)
	// Alone, this instance is the only vantage and must be able to fail a
	// host by itself; with peers a single vantage never can.
	minDown := 0
	if len(cfg.Peers) == 0 {
		minDown = 1
	}
	targets := make([]status.Target, len(r.order))
	for i, key := range r.order {
		targets[i] = status.Target{Key: key, Node: r.targets[key].host, Vantages: vantages, MinDown: minDown}
	}
	var changes []dashboard.Transition
	for _, c := range r.engine.Judge(idx, targets, now) {
		ti, to := r.targets[c.Target.Key], c.To.Verdict
		changes = append(changes, dashboard.Transition{Time: now, Service: ti.service, Node: ti.host, Address: ti.addr.Addr().String(),
			Port: int(ti.port.Port), From: c.From.Verdict.String(), To: to.String(), Reason: c.To.Summary()})
		r.since[c.Target.Key] = now
		r.saved = false
		r.metrics.verdicts.WithLabelValues("target", to.String()).Inc()
	}

	var zone []dnsexport.Service
	var services []dashboard.Service
	certs := r.certExpiries()
	for _, svc := range cfg.Services {
		plan := planPublish(svc, r.engine.Verdict, r.publishedHosts[svc.Name], r.failingOpen[svc.Name])
		r.publishedHosts[svc.Name], r.failingOpen[svc.Name] = plan.hosts, plan.failOpen
		ips := plan.ips
		r.metrics.published.WithLabelValues(svc.Name).Set(float64(len(ips)))
		ttl := cmp.Or(svc.TTL, cfg.DNS.TTL)
		ds := dnsexport.Service{Name: svc.Name, Hostnames: svc.Hostnames, IPs: ips, TTL: ttl}
		for _, p := range svc.Ports {
			ds.Ports = append(ds.Ports, dnsexport.Port{Name: p.Name, Port: p.Port, Protocol: p.Protocol})
		}
		zone = append(zone, ds)
		services = append(services, r.dashboardService(cfg, svc, ips, plan.healthy, plan.allDown, idx, vantages, certs))
	}
	for name := range r.publishedHosts {
		if !slices.ContainsFunc(cfg.Services, func(s Service) bool { return s.Name == name }) {
			delete(r.publishedHosts, name)
			delete(r.failingOpen, name)
			r.metrics.published.DeleteLabelValues(name)
		}
	}
	slices.SortFunc(services, func(a, b dashboard.Service) int { return strings.Compare(a.Name, b.Name) })
	// Newest first; the changes of one round share a time, in key order.
	r.transitions = append(slices.Clone(changes), r.transitions...)
	if len(r.transitions) > dashboard.MaxTransitions {
		r.transitions = r.transitions[:dashboard.MaxTransitions]
	}
	r.state = dashboard.State{Role: "standalone", Instance: cfg.Instance, GeneratedAt: now, Vantages: vantages,
		Services: services, Transitions: slices.Clone(r.transitions)}
	state := r.state
	r.mu.Unlock()

	for _, c := range changes {
		logger.Info("Target verdict changed", "service", c.Service, "host", c.Node, "address", c.Address, "port", c.Port,
			"from", c.From, "to", c.To, "reason", c.Reason)
		if r.opts.OnTransition != nil {
			r.opts.OnTransition(c)
		}
	}
	problems, err := r.dns.Update(zone)
	if err != nil {
		logger.Error(err, "Updating DNS zone failed")
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	if !slices.Equal(msgs, r.lastProblems) && len(msgs) > 0 {
		logger.Info("Services have DNS problems; serving the rest", "problems", msgs)
	}
	r.lastProblems = msgs
	r.dash.Update(state)
	r.flushState(ctx)
}

// publishPlan is what a round publishes of one Service (planPublish).
type publishPlan struct {
	// hosts are the published hosts' addresses, by host; ips all of
	// them, sorted, each once.
	hosts map[string][]netip.Addr
	ips   []netip.Addr
	// healthy says some host is healthy; failOpen that the Service
	// publishes every host because none is (status.Publish); allDown is
	// its all-down policy when no host is healthy, else empty.
	healthy  bool
	failOpen bool
	allDown  string
}

// planPublish decides what svc publishes from the verdicts of its ports
// (verdict, by Key), the hosts it published before (prev) and whether it
// was failing open: the rules of the cluster (status.NodeHealth,
// status.Healthy, status.Publish). It changes nothing; evaluate applies
// it.
func planPublish(svc Service, verdict func(key string) status.Judgement, prev map[string][]netip.Addr, failingOpen bool) publishPlan {
	health := make(map[string]status.Health, len(svc.Hosts))
	all := make([]string, len(svc.Hosts))
	for i, h := range svc.Hosts {
		was, ok := prev[h.Name]
		nv := status.NodeVerdicts{Ports: map[contract.PortKey]status.Judgement{}, Published: ok && slices.Equal(was, h.Addresses)}
		for _, p := range svc.Ports {
			nv.Ports[p.PortKey()] = verdict(Key(svc.Name, p, h.Name))
		}
		health[h.Name] = status.NodeHealth(nv, svc.PublishWhen)
		all[i] = h.Name
	}
	healthy := status.Healthy(all, health, failingOpen)
	pub, failOpen := status.Publish(healthy, all, svc.AllDown)
	plan := publishPlan{hosts: map[string][]netip.Addr{}, healthy: len(healthy) > 0, failOpen: failOpen}
	if !plan.healthy {
		plan.allDown = svc.AllDown
	}
	for _, h := range svc.Hosts {
		if slices.Contains(pub, h.Name) {
			plan.hosts[h.Name] = h.Addresses
			plan.ips = append(plan.ips, h.Addresses...)
		}
	}
	slices.SortFunc(plan.ips, netip.Addr.Compare)
	plan.ips = slices.Compact(plan.ips)
	return plan
}

// flushState writes the verdicts to the state file when they changed.
func (r *Runner) flushState(ctx context.Context) {
	r.mu.Lock()
	if r.saved || r.cfg.StateFile == "" {
		r.mu.Unlock()
		return
	}
	verdicts := make(map[string]savedVerdict, len(r.order))
	for _, k := range r.order {
		ti := r.targets[k]
		verdicts[k] = savedVerdict{verdict: r.engine.Verdict(k).Verdict, since: r.since[k], addr: ti.addr, hostAddrs: ti.hostAddrs}
	}
	path, instance := r.cfg.StateFile, r.cfg.Instance
	r.saved = true
	r.mu.Unlock()
	err := saveState(path, instance, time.Now(), verdicts)
	r.mu.Lock()
	defer r.mu.Unlock()
	// A failed save is retried at every evaluation until one works (a
	// full disk gets space again): log when the failure starts or its
	// reason changes, and when it ends, not at every try.
	logger := klog.FromContext(ctx)
	switch {
	case err != nil:
		r.saved = false
		r.metrics.stateSaves.WithLabelValues("error").Inc()
		// The message names a temporary file of a new name each time:
		// compare the cause, such as "no space left on device".
		if msg := rootCause(err).Error(); msg != r.saveErr {
			logger.Error(err, "Saving verdicts failed; retrying at every change and evaluation, logging again only when the error changes", "stateFile", path)
			r.saveErr = msg
		}
	default:
		r.metrics.stateSaves.WithLabelValues("ok").Inc()
		if r.saveErr != "" {
			logger.Info("Saving verdicts works again", "stateFile", path)
			r.saveErr = ""
		}
	}
}

// rootCause is the innermost error err wraps.
func rootCause(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// dashboardService describes svc for the dashboard. r.mu is held.
func (r *Runner) dashboardService(cfg *Config, svc Service, ips []netip.Addr, healthy bool, allDown string,
	reports status.Reports, vantages []string, certs map[string]time.Time) dashboard.Service {
	ds := dashboard.Service{Name: svc.Name, DNSNames: append([]string{svc.Name + "." + cfg.Zone}, svc.Hostnames...),
		Published: []string{}, Healthy: healthy, AllDown: allDown}
	for _, ip := range ips {
		ds.Published = append(ds.Published, ip.String())
	}
	for h := range r.publishedHosts[svc.Name] {
		ds.PublishedNodes = append(ds.PublishedNodes, h)
	}
	slices.Sort(ds.PublishedNodes)
	for _, h := range svc.Hosts {
		for _, p := range svc.Ports {
			key := Key(svc.Name, p, h.Name)
			j := r.engine.Verdict(key)
			t := dashboard.Target{Node: h.Name, Address: h.ProbeAddress.String(), Port: int(p.Port), Protocol: p.Protocol,
				Probe: p.Probe, State: j.Verdict.String(), Since: r.since[key], CertNotAfter: certs[key],
				Reason: j.Summary(), Flapping: j.Reason == status.ReasonFlapping, FailingSince: j.FirstFailure}
			for _, v := range vantages {
				vr := dashboard.VantageResult{Vantage: v, State: status.VerdictUnknown.String()}
				fresh, _ := reports.Vantage(v)
				vr.Stale = !fresh
				if obs := reports.Observation(v, status.Target{Key: key}); obs != nil {
					vr.State, vr.Outcome, vr.Message = string(obs.State), obs.Outcome, obs.Message
					if obs.Latency != nil {
						vr.LatencySeconds = obs.Latency.Seconds()
					}
					if obs.LastChange != nil {
						vr.LastChange = obs.LastChange.Time
					}
				}
				t.Vantages = append(t.Vantages, vr)
			}
			ds.Targets = append(ds.Targets, t)
		}
	}
	slices.SortFunc(ds.Targets, func(a, b dashboard.Target) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port),
			strings.Compare(a.Protocol, b.Protocol))
	})
	return ds
}

func statusProtocol(p string) corev1.Protocol { return corev1.Protocol(p) }

// warnPeers warns about a configuration with exactly one peer. A Down
// verdict needs a majority of the fresh vantages and at least two of them
// (status.MinDownVotes): with two instances, while one is down or cut off
// the other can fail no host, and every failover stops.
func warnPeers(logger klog.Logger, cfg *Config) {
	if len(cfg.Peers) != 1 {
		return
	}
	logger.Info("Warning: with exactly two instances no host can be failed while either of them is down or unreachable, "+
		"since a Down verdict needs two votes. Run three instances (two peers each), or drop peers so that each instance judges alone",
		"peer", cfg.Peers[0].Name, "minDownVotes", status.MinDownVotes)
}

// logHTTPListen says where the HTTP server listens, and warns when that is
// not a loopback address: the dashboard, /api/v1/state and /metrics have
// no authentication (only /api/v1/report asks for the token).
func logHTTPListen(logger klog.Logger, addr net.Addr) {
	logger.Info("Serving the dashboard, state API and metrics", "address", addr.String())
	if tcp, ok := addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(tcp.IP); ok && ip.Unmap().IsLoopback() {
			return
		}
	}
	logger.Info("Warning: the dashboard, /api/v1/state and /metrics are served without authentication on a non-loopback address; "+
		"anyone who can reach it sees every service, host and address. Restrict it with a firewall, or set http.listen to 127.0.0.1",
		"address", addr.String())
}
