package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/controller"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/placement"
)

const controllerUsage = `Usage: pulselb controller --proxy-image=IMAGE [flags]

Serves LoadBalancer Services with per-Service proxy workloads in --namespace
and keeps each Service's status.loadBalancer equal to its proxy nodes' IPs.
Uses in-cluster credentials unless --kubeconfig is given. With
--leader-elect (the default) only the Lease holder reconciles.

With --dns-zone, every replica (leader or not) also serves that zone as an
authoritative DNS server built from the Services' status, from its own
informer cache (see docs/dns.md). With --dnsendpoints, the leader also
writes an external-dns DNSEndpoint per Service with hostname annotations.

Every replica also serves a read-only health dashboard at / of
--metrics-address, its data at /api/v1/state and changes as server-sent
events at /api/v1/events (see docs/dashboard.md); --dashboard=false turns
it off.

Every flag can also be set with the environment variable named after it
(--proxy-image is PULSELB_PROXY_IMAGE); a flag given on the command line wins.

Flags:
`

// controllerFlags are the controller's flags, checked.
type controllerFlags struct {
	kube         *kubeFlags
	placement    placement.Config
	classOnly    bool
	workers      int
	maxRollouts  int
	probeReports bool
	vantages     int
	election     electionConfig
	podName      string
	metricsAddr  string
	metricsConns int
	dashboard    bool
	apiWait      time.Duration
	verbosity    int
	dnsZone      string
	dns          *dnsexport.Config // nil without --dns-zone
	dnsEndpoints bool
	dnsTTL       uint
}

// electionConfig is the leader election: on or off, the Lease and its
// timings.
type electionConfig struct {
	enabled                              bool
	namespace, lease                     string
	duration, renewDeadline, retryPeriod time.Duration
}

// runController builds the controller step by step: flags, clients,
// health source, metrics and dashboard server, Events, informers and
// controller, dashboard feed, DNS, then reconciles under the leader
// Lease.
func runController(args []string, _, stderr io.Writer) int {
	f, code, ok := parseControllerFlags(args, stderr)
	if !ok {
		return code
	}
	setVerbosity(f.verbosity)
	logger := klog.Background().WithName("controller")

	client, _, err := f.kube.clients("pulselb-controller", false)
	if err != nil {
		return failed(logger, err)
	}
	// The controller's own writes go through the election's fence; the
	// Lease and the Events do not.
	metrics := controller.NewMetrics()
	elect := newElection(f.election, client, f.podName)
	elect.tookOver = metrics.TookOverLease
	writer, dyn, err := f.kube.wrappedClients("pulselb-controller", f.probeReports || f.dnsEndpoints, func(rt http.RoundTripper) http.RoundTripper {
		return fence{next: rt, open: elect.mayWrite, fenced: metrics.Fenced}
	})
	if err != nil {
		return failed(logger, err)
	}
	ctx, stop := signalContext(logger)
	defer stop()

	// Nothing works without the API server: say so at once, naming it,
	// rather than let the first step that needs it time out.
	if err := waitForAPIServer(ctx, client.Discovery().RESTClient(), f.kube.host, f.apiWait); err != nil {
		if ctx.Err() != nil {
			logger.Info("Stopped while waiting for the API server", "address", f.kube.host)
			return 0
		}
		logger.Error(err, "Giving up on the API server", "address", f.kube.host)
		fmt.Fprintf(stderr, "pulselb controller: %v\n", err)
		return 1
	}
	health, err := f.health(ctx, client, dyn)
	if err != nil {
		if errors.Is(err, controller.ErrNoProbeReportCRD) {
			logger.Error(err, "Judging health from ProbeReports is impossible", "flag", "--probe-reports")
			fmt.Fprintf(stderr, "pulselb controller: --probe-reports: %v\n", err)
		} else {
			logger.Error(err, "Asking the API server for the ProbeReport CRD failed", "address", f.kube.host)
			fmt.Fprintf(stderr, "pulselb controller: %v\n", err)
		}
		return 1
	}

	var dash *dashboard.Dashboard
	sets := []func(prometheus.Registerer) error{metrics.RegisterMetrics}
	if f.dns != nil {
		sets = append(sets, f.dns.Metrics.RegisterMetrics)
	}
	if f.dashboard && f.metricsAddr != "" {
		dashMetrics := dashboard.NewMetrics()
		sets = append(sets, dashMetrics.RegisterMetrics)
		dash = dashboard.New(dashboard.Options{Title: "pulselb", Metrics: dashMetrics, MaxClients: dashboard.MaxClientsFor(f.metricsConns)})
		defer dash.Close()
	}
	reg, err := newRegistry(sets...)
	if err != nil {
		return failed(logger, err)
	}
	mux := metricsHandler(reg)
	if dash != nil {
		mux.Handle("/", dash)
	}
	closeMetrics, err := serveMetrics(f.metricsAddr, f.metricsConns, mux)
	if err != nil {
		return failed(logger, err)
	}
	defer closeMetrics()
	if f.metricsAddr != "" {
		// Listening on the pod IP is what lets Prometheus and the
		// dashboard Service reach it; say what that exposes.
		logger.Info("Serving /metrics, /healthz and the dashboard without authentication; restrict who reaches the port with a NetworkPolicy (docs/operations.md)",
			"address", f.metricsAddr, "dashboard", dash != nil)
	}

	recorder, stopEvents := eventRecorder(ctx, client, "pulselb-controller")
	defer stopEvents()

	// Informers run on every replica so a new leader starts with warm
	// caches, and dnsexport serves from them without the lease.
	inf := newInformerFactories(client, f.placement.Namespace)
	cfg := f.config(health, dyn, metrics)
	cfg.Judged = elect.poke
	ctl, err := controller.New(ctx, writer, inf.cluster, inf.system, recorder, cfg)
	if err != nil {
		logger.Error(err, "Creating controller failed")
		return 1
	}
	if dash != nil {
		if err := runDashboardFeed(ctx, ctl, inf, dash, f.dnsZone); err != nil {
			return failed(logger, err)
		}
	}
	// leading is true while this replica reconciles; only then does the
	// DNS feed turn zone problems into Events.
	var leading atomic.Bool
	if f.dns != nil {
		report := controller.DNSProblemReporter(logger.WithName("dns"), recorder, leading.Load)
		waitDNS, err := startDNS(ctx, *f.dns, inf.cluster.Core().V1().Services(), f.classOnly, report)
		if err != nil {
			return failed(logger, err)
		}
		// Stop (also on an early error return) and wait for both, so
		// the DNS sockets are closed when runController returns.
		defer func() { stop(); waitDNS() }()
	}

	// The caches are the verdicts and the DNS answers: they redial an
	// API server that cannot be reached rather than back off from it.
	watchCtx := redialing(ctx)
	shutdown := inf.start(watchCtx)
	defer shutdown()
	if health.Reports != nil {
		go health.Reports.RunWithContext(watchCtx)
		go health.Leases.RunWithContext(watchCtx)
	}
	if f.election.enabled {
		// Judge on every replica, so that a standby sees the leader's
		// node fail and takes over with the leader's verdicts.
		ctl.RunHealth(ctx)
	}
	return elect.lead(ctx, stop, ctl, recorder, func(ctx context.Context) {
		leading.Store(true)
		defer leading.Store(false)
		if err := ctl.Run(ctx, f.workers); err != nil {
			logger.Error(err, "Controller stopped")
		}
	})
}

// parseControllerFlags parses and checks the controller's command line.
// It returns ok false with the exit code when the command must stop.
func parseControllerFlags(args []string, stderr io.Writer) (f *controllerFlags, code int, ok bool) {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f = &controllerFlags{kube: addKubeFlags(fs, 50, 100)}
	namespace := fs.String("namespace", "pulselb-system", "namespace of the proxy workloads and the leader Lease")
	image := fs.String("proxy-image", "", "image of proxy pods (the pulselb image); required")
	pullPolicy := fs.String("proxy-image-pull-policy", string(corev1.PullIfNotPresent), "Always, IfNotPresent or Never")
	priorityClass := fs.String("proxy-priority-class", placement.DefaultPriorityClassName, "priority class of proxy pods; empty for none")
	proxyMode := fs.String("proxy-mode", placement.DefaultProxyMode, "the proxies' --mode: auto, iptables or userspace")
	fs.IntVar(&f.maxRollouts, "max-proxy-rollouts", controller.DefaultMaxRollouts, "how many Services' proxies roll out a new pod template (a new image) at once; 0: no limit")
	proxySA := fs.String("proxy-service-account", placement.DefaultProxyServiceAccount, "ServiceAccount of the proxy pods, which may read the proxy workloads in --namespace (each proxy's allow-list)")
	sysctls := fs.Bool("proxy-sysctls", false, "turn on the proxies' IP forwarding with the pod's securityContext.sysctls instead of the privileged proxy-init init container; every kubelet must allow them ("+placement.KubeletSysctlFlag+"), or it refuses the pod (a SysctlForbidden Warning on the Service)")
	drainTimeout := fs.Duration("proxy-drain-timeout", placement.DefaultDrainTimeout, "how long a proxy being removed lets open connections finish after its drain delay (pulselb.io/drain-delay)")
	fs.BoolVar(&f.classOnly, "class-only", false, "serve only Services with loadBalancerClass "+contract.Class+", not those without a class")
	fs.IntVar(&f.workers, "workers", 16, "Services reconciled in parallel; most of a sync is waiting on the API server")
	fs.BoolVar(&f.probeReports, "probe-reports", true, "judge health from the probers' ProbeReports (needs the ProbeReport CRD from deploy/crds/ and the prober DaemonSet); false: a node is down only while labelled pulselb.io/unhealthy")
	fs.IntVar(&f.vantages, "vantages", contract.DefaultVantages, "probers per target; must equal the probers' --vantages")
	fs.BoolVar(&f.election.enabled, "leader-elect", true, "reconcile only while holding the Lease")
	fs.StringVar(&f.podName, "pod-name", "", "this replica's pod, named in the leader Lease so that a standby can tell the leader's node (and take over when it fails); default: the host name")
	fs.StringVar(&f.election.lease, "leader-elect-lease-name", "pulselb-controller", "name of the leader Lease in --namespace")
	fs.DurationVar(&f.election.duration, "leader-elect-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	fs.DurationVar(&f.election.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up")
	fs.DurationVar(&f.election.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
	fs.StringVar(&f.metricsAddr, "metrics-address", ":9471", "address for /metrics and /healthz; empty disables")
	fs.IntVar(&f.metricsConns, "metrics-max-connections", httpserver.DefaultMaxConns, "connections --metrics-address holds at once, the dashboard's event streams included (at most half of them); more wait until one closes")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the read-only health dashboard at / of --metrics-address on every replica (see docs/dashboard.md)")
	fs.IntVar(&f.verbosity, "v", 0, "log verbosity: 2 decisions, 4 detail")
	fs.DurationVar(&f.apiWait, "api-server-wait", 0, "at start, how long to keep retrying an API server that cannot be reached before exiting with an error; 0 retries until stopped")
	var dnsNS, dnsTSIGKeys listFlag
	fs.StringVar(&f.dnsZone, "dns-zone", "", "serve this DNS zone from Service status on every replica, e.g. lb.example.com; empty turns DNS off")
	fs.Var(&dnsNS, "dns-ns", "name server of the zone, repeatable: ns1.lb.example.com=192.0.2.53 (addresses, comma-separated, required inside the zone) or ns.example.net; required with --dns-zone")
	dnsListen := fs.String("dns-listen", ":53", "UDP and TCP address of the DNS server")
	fs.UintVar(&f.dnsTTL, "dns-ttl", uint(contract.DefaultDNSTTL), "TTL of a Service's records when it sets no "+contract.AnnotationDNSTTL)
	dnsHostmaster := fs.String("dns-hostmaster", "", "SOA RNAME; default hostmaster.<zone>")
	dnsMaxUDP := fs.Uint("dns-max-udp-size", 1232, "largest UDP response")
	dnsSecondaries := fs.String("dns-secondaries", "", "NOTIFY targets, comma-separated ip:port[/keyname]")
	fs.Var(&dnsTSIGKeys, "dns-tsig-key", "hmac-sha256 key allowed to transfer the zone, repeatable: name:/path/to/secret-file (the file holds the base64 secret)")
	dnsRate := fs.Float64("dns-rate-limit", dnsexport.DefaultRateLimit.ResponsesPerSecond, "UDP responses per second per source /24 or /56; 0 turns limiting off")
	dnsBurst := fs.Int("dns-rate-limit-burst", dnsexport.DefaultRateLimit.Burst, "rate limit bucket size")
	dnsSlip := fs.Int("dns-rate-limit-slip", dnsexport.DefaultRateLimit.Slip, "every n-th rate-limited response is sent truncated; 0 drops all")
	dnsSerialFile := fs.String("dns-serial-file", "", "file keeping the SOA serial across restarts (on a persistent volume)")
	fs.BoolVar(&f.dnsEndpoints, "dnsendpoints", false, "on the leader, write an external-dns DNSEndpoint per Service with hostname annotations, recordTTL defaulting to --dns-ttl (needs the DNSEndpoint CRD)")
	if _, code, ok := parseFlags(fs, controllerUsage, args, stderr); !ok {
		return nil, code, false
	}
	switch {
	case *image == "":
		fmt.Fprintln(stderr, "pulselb controller: --proxy-image is required")
		return nil, 2, false
	case f.maxRollouts < 0:
		fmt.Fprintln(stderr, "pulselb controller: --max-proxy-rollouts must not be negative")
		return nil, 2, false
	case f.workers < 1:
		fmt.Fprintln(stderr, "pulselb controller: --workers must be at least 1")
		return nil, 2, false
	case f.metricsConns < 1:
		fmt.Fprintf(stderr, "pulselb controller: --metrics-max-connections=%d: want at least 1\n", f.metricsConns)
		return nil, 2, false
	case f.apiWait < 0:
		fmt.Fprintf(stderr, "pulselb controller: --api-server-wait=%s: want 0 (retry until stopped) or more, such as 5m\n", f.apiWait)
		return nil, 2, false
	case *drainTimeout <= 0 || *drainTimeout > time.Hour:
		fmt.Fprintf(stderr, "pulselb controller: --proxy-drain-timeout=%s: want more than 0s, at most 1h\n", *drainTimeout)
		return nil, 2, false
	}
	switch corev1.PullPolicy(*pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		fmt.Fprintf(stderr, "pulselb controller: --proxy-image-pull-policy=%q: want Always, IfNotPresent or Never\n", *pullPolicy)
		return nil, 2, false
	}
	switch *proxyMode {
	case "auto", "iptables", "userspace":
	default:
		fmt.Fprintf(stderr, "pulselb controller: --proxy-mode=%q: want auto, iptables or userspace\n", *proxyMode)
		return nil, 2, false
	}
	if f.dnsZone != "" {
		cfg, err := dnsConfig(f.dnsZone, dnsNS, *dnsListen, f.dnsTTL, *dnsHostmaster, *dnsMaxUDP, *dnsSecondaries,
			dnsTSIGKeys, dnsexport.RateLimit{ResponsesPerSecond: *dnsRate, Burst: *dnsBurst, Slip: *dnsSlip}, *dnsSerialFile)
		if err != nil {
			fmt.Fprintf(stderr, "pulselb controller: %v\n", err)
			return nil, 2, false
		}
		cfg.Metrics = dnsexport.NewMetrics()
		f.dns = &cfg
	}
	if f.dnsEndpoints && (f.dnsTTL < 1 || f.dnsTTL > contract.MaxDNSTTL) {
		fmt.Fprintf(stderr, "pulselb controller: --dns-ttl=%d: want 1 to %d seconds\n", f.dnsTTL, contract.MaxDNSTTL)
		return nil, 2, false
	}
	if f.probeReports && f.vantages < 1 {
		fmt.Fprintf(stderr, "pulselb controller: --vantages=%d: want at least 1\n", f.vantages)
		return nil, 2, false
	}
	f.placement = placement.Config{
		Namespace:         *namespace,
		Image:             *image,
		ImagePullPolicy:   corev1.PullPolicy(*pullPolicy),
		PriorityClassName: *priorityClass,
		ProxyMode:         *proxyMode,
		DNSTTL:            uint32(f.dnsTTL),
		DrainTimeout:      *drainTimeout,
		ReadinessGate:     f.probeReports,
		ServiceAccount:    *proxySA,
		ForwardingSysctls: *sysctls,
	}
	f.election.namespace = *namespace
	return f, 0, true
}

// health returns where the controller's health verdicts come from: with
// --probe-reports the probers' ProbeReports, once their CRD is served;
// else nothing, and a node is down only while labelled unhealthy.
func (f *controllerFlags) health(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) (controller.HealthConfig, error) {
	if !f.probeReports {
		return controller.HealthConfig{}, nil
	}
	// Without the CRD the report informer would never sync and the
	// controller would wait silently; say what is missing instead.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := controller.WaitForProbeReportCRD(ctx, client.Discovery(), 2*time.Second, 30*time.Second); err != nil {
		return controller.HealthConfig{}, err
	}
	return controller.HealthConfig{
		Reports:  v1alpha1.NewInformer(v1alpha1.NewClient(dyn), f.placement.Namespace),
		Leases:   controller.NewProberLeaseInformer(client, f.placement.Namespace),
		Vantages: f.vantages,
	}, nil
}

// config returns the controller's configuration.
func (f *controllerFlags) config(health controller.HealthConfig, dyn dynamic.Interface, metrics *controller.Metrics) controller.Config {
	cfg := controller.Config{
		Metrics:     metrics,
		Services:    contract.Selection{ClassOnly: f.classOnly},
		MaxRollouts: f.maxRollouts,
		Health:      health,
		Placement:   f.placement,
	}
	if f.dnsEndpoints {
		cfg.DNSEndpoints = dnsexport.NewEndpointWriter(dyn, uint32(f.dnsTTL))
	}
	return cfg
}

// runDashboardFeed keeps dash equal to what the controller sees, in the
// background until ctx is done.
func runDashboardFeed(ctx context.Context, ctl *controller.Controller, inf informerFactories, dash *dashboard.Dashboard, zone string) error {
	host, _ := os.Hostname()
	feed, err := controller.NewDashboardFeed(ctl, inf.cluster, inf.system, dash, controller.DashboardConfig{Instance: host, Zone: zone})
	if err != nil {
		return startFailed(err, "Creating dashboard feed failed")
	}
	logger := klog.FromContext(ctx)
	dashCtx := klog.NewContext(ctx, logger.WithName("dashboard"))
	go func() {
		if err := feed.Run(dashCtx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Dashboard feed stopped")
		}
	}()
	return nil
}

// startDNS starts the authoritative DNS server of cfg and the feed that
// keeps its zone equal to the Services, and returns the function that
// waits for both to stop once ctx is done.
func startDNS(ctx context.Context, cfg dnsexport.Config, services coreinformers.ServiceInformer, classOnly bool,
	report func(*corev1.Service, []error)) (wait func(), err error) {
	srv, err := dnsexport.NewServer(cfg)
	if err != nil {
		return nil, startFailed(err, "Creating DNS server failed")
	}
	// Listen before the informers start so that a taken port fails the
	// start-up instead of a goroutine.
	if err := srv.Listen(); err != nil {
		return nil, startFailed(err, "Listening for DNS failed", "address", cfg.Listen)
	}
	feed, err := dnsexport.NewFeed(srv, services, dnsexport.FeedConfig{
		Services: contract.Selection{ClassOnly: classOnly},
		Report:   report,
	})
	if err != nil {
		return nil, startFailed(err, "Creating DNS feed failed")
	}
	logger := klog.FromContext(ctx).WithName("dns")
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Run(ctx); err != nil {
			// DNS is an output of the controller, not a reason to stop
			// reconciling; the metric and this line say it is down.
			logger.Error(err, "DNS server stopped")
		}
	})
	wg.Go(func() {
		if err := feed.Run(ctx); err != nil {
			logger.Error(err, "DNS feed stopped")
		}
	})
	return wg.Wait, nil
}

// dnsConfig checks the --dns-* flags and returns the DNS server's
// configuration. The TSIG secrets are read from their files here, so a
// missing Secret mount fails the start-up.
func dnsConfig(zone string, nameServers []string, listen string, ttl uint, hostmaster string, maxUDP uint,
	secondaries string, tsigKeys []string, rl dnsexport.RateLimit, serialFile string) (dnsexport.Config, error) {
	cfg := dnsexport.Config{
		Zone:       dnsexport.ZoneConfig{Origin: zone, Hostmaster: hostmaster},
		Listen:     listen,
		RateLimit:  rl,
		SerialFile: serialFile,
	}
	if len(nameServers) == 0 {
		return cfg, errors.New("--dns-ns is required with --dns-zone")
	}
	for _, v := range nameServers {
		ns, err := dnsexport.ParseNameServer(v)
		if err != nil {
			return cfg, fmt.Errorf("--dns-ns: %w", err)
		}
		cfg.Zone.NameServers = append(cfg.Zone.NameServers, ns)
	}
	if ttl < 1 || ttl > contract.MaxDNSTTL {
		return cfg, fmt.Errorf("--dns-ttl=%d: want 1 to %d seconds", ttl, contract.MaxDNSTTL)
	}
	cfg.Zone.DefaultTTL = uint32(ttl)
	if maxUDP < 512 || maxUDP > 65535 {
		return cfg, fmt.Errorf("--dns-max-udp-size=%d: want 512 to 65535", maxUDP)
	}
	cfg.MaxUDPSize = uint16(maxUDP)
	if rl.ResponsesPerSecond < 0 || rl.Burst < 0 || rl.Slip < 0 {
		return cfg, errors.New("--dns-rate-limit, --dns-rate-limit-burst and --dns-rate-limit-slip must not be negative")
	}
	for _, v := range strings.Split(secondaries, ",") {
		if strings.TrimSpace(v) == "" {
			continue
		}
		sec, err := dnsexport.ParseSecondary(v)
		if err != nil {
			return cfg, fmt.Errorf("--dns-secondaries: %w", err)
		}
		cfg.Secondaries = append(cfg.Secondaries, sec)
	}
	for _, v := range tsigKeys {
		k, err := dnsexport.ReadTSIGKey(v)
		if err != nil {
			return cfg, fmt.Errorf("--dns-tsig-key: %w", err)
		}
		cfg.TransferKeys = append(cfg.TransferKeys, k)
	}
	// NewServer checks the rest (zone, glue, keys named by secondaries);
	// check here too so that a bad flag exits with status 2.
	if _, err := dnsexport.NewServer(cfg); err != nil {
		return cfg, fmt.Errorf("dns: %w", err)
	}
	return cfg, nil
}
