package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/controller"
	"github.com/pulselb/pulselb/dashboard"
	"github.com/pulselb/pulselb/dnsexport"
	"github.com/pulselb/pulselb/placement"
	"github.com/pulselb/pulselb/prober"
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

func runController(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty means in-cluster config")
	namespace := fs.String("namespace", "pulselb-system", "namespace of the proxy workloads and the leader Lease")
	image := fs.String("proxy-image", "", "image of proxy pods (the pulselb image); required")
	pullPolicy := fs.String("proxy-image-pull-policy", string(corev1.PullIfNotPresent), "Always, IfNotPresent or Never")
	priorityClass := fs.String("proxy-priority-class", placement.DefaultPriorityClassName, "priority class of proxy pods; empty for none")
	proxyMode := fs.String("proxy-mode", placement.DefaultProxyMode, "the proxies' --mode: auto, iptables or userspace")
	classOnly := fs.Bool("class-only", false, "serve only Services with loadBalancerClass "+contract.Class+", not those without a class")
	workers := fs.Int("workers", 16, "Services reconciled in parallel; most of a sync is waiting on the API server")
	probeReports := fs.Bool("probe-reports", true, "judge health from the probers' ProbeReports (needs the ProbeReport CRD from deploy/crds/ and the prober DaemonSet); false: a node is down only while labelled pulselb.io/unhealthy")
	vantages := fs.Int("vantages", prober.DefaultVantages, "probers per target; must equal the probers' --vantages")
	leaderElect := fs.Bool("leader-elect", true, "reconcile only while holding the Lease")
	leaseName := fs.String("leader-elect-lease-name", "pulselb-controller", "name of the leader Lease in --namespace")
	leaseDuration := fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	renewDeadline := fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up")
	retryPeriod := fs.Duration("leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
	metricsAddr := fs.String("metrics-address", ":9471", "address for /metrics and /healthz; empty disables")
	dashboardOn := fs.Bool("dashboard", true, "serve the read-only health dashboard at / of --metrics-address on every replica (see docs/dashboard.md)")
	qps := fs.Float64("kube-api-qps", 50, "API requests per second")
	burst := fs.Int("kube-api-burst", 100, "API request burst")
	verbosity := fs.Int("v", 0, "log verbosity: 2 decisions, 4 detail")
	var dnsNS, dnsTSIGKeys listFlag
	dnsZone := fs.String("dns-zone", "", "serve this DNS zone from Service status on every replica, e.g. lb.example.com; empty turns DNS off")
	fs.Var(&dnsNS, "dns-ns", "name server of the zone, repeatable: ns1.lb.example.com=192.0.2.53 (addresses, comma-separated, required inside the zone) or ns.example.net; required with --dns-zone")
	dnsListen := fs.String("dns-listen", ":53", "UDP and TCP address of the DNS server")
	dnsTTL := fs.Uint("dns-ttl", uint(dnsexport.DefaultTTL), "TTL of a Service's records when it sets no "+contract.AnnotationDNSTTL)
	dnsHostmaster := fs.String("dns-hostmaster", "", "SOA RNAME; default hostmaster.<zone>")
	dnsMaxUDP := fs.Uint("dns-max-udp-size", 1232, "largest UDP response")
	dnsSecondaries := fs.String("dns-secondaries", "", "NOTIFY targets, comma-separated ip:port[/keyname]")
	fs.Var(&dnsTSIGKeys, "dns-tsig-key", "hmac-sha256 key allowed to transfer the zone, repeatable: name:/path/to/secret-file (the file holds the base64 secret)")
	dnsRate := fs.Float64("dns-rate-limit", 100, "UDP responses per second per source /24 or /56; 0 turns limiting off")
	dnsBurst := fs.Int("dns-rate-limit-burst", 200, "rate limit bucket size")
	dnsSlip := fs.Int("dns-rate-limit-slip", 2, "every n-th rate-limited response is sent truncated; 0 drops all")
	dnsSerialFile := fs.String("dns-serial-file", "", "file keeping the SOA serial across restarts (on a persistent volume)")
	dnsEndpoints := fs.Bool("dnsendpoints", false, "on the leader, write an external-dns DNSEndpoint per Service with hostname annotations, recordTTL defaulting to --dns-ttl (needs the DNSEndpoint CRD)")
	if _, code, ok := parseFlags(fs, controllerUsage, args, stderr); !ok {
		return code
	}
	switch {
	case *image == "":
		fmt.Fprintln(stderr, "pulselb controller: --proxy-image is required")
		return 2
	case *workers < 1:
		fmt.Fprintln(stderr, "pulselb controller: --workers must be at least 1")
		return 2
	}
	switch corev1.PullPolicy(*pullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		fmt.Fprintf(stderr, "pulselb controller: --proxy-image-pull-policy=%q: want Always, IfNotPresent or Never\n", *pullPolicy)
		return 2
	}
	switch *proxyMode {
	case "auto", "iptables", "userspace":
	default:
		fmt.Fprintf(stderr, "pulselb controller: --proxy-mode=%q: want auto, iptables or userspace\n", *proxyMode)
		return 2
	}
	var dnsCfg *dnsexport.Config
	if *dnsZone != "" {
		cfg, err := dnsConfig(*dnsZone, dnsNS, *dnsListen, *dnsTTL, *dnsHostmaster, *dnsMaxUDP, *dnsSecondaries,
			dnsTSIGKeys, dnsexport.RateLimit{ResponsesPerSecond: *dnsRate, Burst: *dnsBurst, Slip: *dnsSlip}, *dnsSerialFile)
		if err != nil {
			fmt.Fprintf(stderr, "pulselb controller: %v\n", err)
			return 2
		}
		dnsCfg = &cfg
	}
	if *dnsEndpoints && (*dnsTTL < 1 || *dnsTTL > contract.MaxDNSTTL) {
		fmt.Fprintf(stderr, "pulselb controller: --dns-ttl=%d: want 1 to %d seconds\n", *dnsTTL, contract.MaxDNSTTL)
		return 2
	}
	if *probeReports && *vantages < 1 {
		fmt.Fprintf(stderr, "pulselb controller: --vantages=%d: want at least 1\n", *vantages)
		return 2
	}
	setVerbosity(*verbosity)
	logger := klog.Background().WithName("controller")

	restCfg, err := kubeConfig(*kubeconfig, *qps, *burst, "pulselb-controller")
	if err != nil {
		logger.Error(err, "Loading Kubernetes client config failed", "kubeconfig", *kubeconfig)
		return 1
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		logger.Error(err, "Creating Kubernetes client failed")
		return 1
	}

	// One dynamic client for the custom resources: ProbeReports and
	// DNSEndpoints.
	var dyn dynamic.Interface
	if *probeReports || *dnsEndpoints {
		if dyn, err = dynamic.NewForConfig(restCfg); err != nil {
			logger.Error(err, "Creating dynamic client failed")
			return 1
		}
	}
	var health controller.HealthConfig
	if *probeReports {
		// Without the CRD the report informer would never sync and the
		// controller would wait silently; say what is missing instead.
		crdCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := controller.WaitForProbeReportCRD(crdCtx, client.Discovery(), 2*time.Second, 30*time.Second)
		cancel()
		if err != nil {
			logger.Error(err, "Judging health from ProbeReports is impossible", "flag", "--probe-reports")
			fmt.Fprintf(stderr, "pulselb controller: --probe-reports: %v\n", err)
			return 1
		}
		health = controller.HealthConfig{
			Reports:  v1alpha1.NewInformer(v1alpha1.NewClient(dyn), *namespace),
			Vantages: *vantages,
		}
	}
	var endpointWriter controller.DNSEndpointWriter
	if *dnsEndpoints {
		endpointWriter = dnsexport.NewEndpointWriter(dyn, uint32(*dnsTTL))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx = klog.NewContext(ctx, logger)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := controller.RegisterMetrics(reg); err != nil {
		logger.Error(err, "Registering metrics failed")
		return 1
	}
	if dnsCfg != nil {
		dnsCfg.Metrics = dnsexport.NewMetrics()
		if err := dnsCfg.Metrics.RegisterMetrics(reg); err != nil {
			logger.Error(err, "Registering metrics failed")
			return 1
		}
	}
	var dash *dashboard.Dashboard
	if *dashboardOn && *metricsAddr != "" {
		dash = dashboard.New(dashboard.Options{Title: "pulselb"})
		defer dash.Close()
		if err := dashboard.RegisterMetrics(reg); err != nil {
			logger.Error(err, "Registering metrics failed")
			return 1
		}
	}
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			logger.Error(err, "Listening for metrics failed", "address", *metricsAddr)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		if dash != nil {
			mux.Handle("/", dash)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "pulselb-controller"})

	// Informers run on every replica so a new leader starts with warm
	// caches (and, later, dnsexport serves from them without the lease).
	cluster := informers.NewSharedInformerFactory(client, 0)
	system := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(*namespace))
	ctl, err := controller.New(ctx, client, cluster, system, recorder, controller.Config{
		Services:     contract.Selection{ClassOnly: *classOnly},
		Health:       health,
		DNSEndpoints: endpointWriter,
		Placement: placement.Config{
			Namespace:         *namespace,
			Image:             *image,
			ImagePullPolicy:   corev1.PullPolicy(*pullPolicy),
			PriorityClassName: *priorityClass,
			ProxyMode:         *proxyMode,
		},
	})
	if err != nil {
		logger.Error(err, "Creating controller failed")
		return 1
	}
	if dash != nil {
		host, _ := os.Hostname()
		feed, err := controller.NewDashboardFeed(ctl, cluster, system, dash, controller.DashboardConfig{Instance: host, Zone: *dnsZone})
		if err != nil {
			logger.Error(err, "Creating dashboard feed failed")
			return 1
		}
		dashCtx := klog.NewContext(ctx, logger.WithName("dashboard"))
		go func() {
			if err := feed.Run(dashCtx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Dashboard feed stopped")
			}
		}()
	}
	// leading is true while this replica reconciles; only then does the
	// DNS feed turn zone problems into Events, so that N replicas do not
	// record N copies of each.
	var leading atomic.Bool
	if dnsCfg != nil {
		dnsSrv, err := dnsexport.NewServer(*dnsCfg)
		if err != nil {
			logger.Error(err, "Creating DNS server failed")
			return 1
		}
		// Listen before the informers start so that a taken port fails
		// the start-up instead of a goroutine.
		if err := dnsSrv.Listen(); err != nil {
			logger.Error(err, "Listening for DNS failed", "address", dnsCfg.Listen)
			return 1
		}
		feed, err := dnsexport.NewFeed(dnsSrv, cluster.Core().V1().Services(), dnsexport.FeedConfig{
			Services: contract.Selection{ClassOnly: *classOnly},
			Report:   dnsProblemReporter(logger, recorder, &leading),
		})
		if err != nil {
			logger.Error(err, "Creating DNS feed failed")
			return 1
		}
		dnsLogger := logger.WithName("dns")
		dnsCtx := klog.NewContext(ctx, dnsLogger)
		dnsDone := make(chan struct{}, 2)
		go func() {
			defer func() { dnsDone <- struct{}{} }()
			if err := dnsSrv.Run(dnsCtx); err != nil {
				// DNS is an output of the controller, not a reason to stop
				// reconciling; the metric and this line say it is down.
				dnsLogger.Error(err, "DNS server stopped")
			}
		}()
		go func() {
			defer func() { dnsDone <- struct{}{} }()
			if err := feed.Run(dnsCtx); err != nil {
				dnsLogger.Error(err, "DNS feed stopped")
			}
		}()
		// Stop (also on an early error return) and wait for both, so
		// the DNS sockets are closed when runController returns.
		defer func() { stop(); <-dnsDone; <-dnsDone }()
	}
	cluster.Start(ctx.Done())
	if health.Reports != nil {
		go health.Reports.RunWithContext(ctx)
	}
	system.Start(ctx.Done())
	defer cluster.Shutdown()
	defer system.Shutdown()

	run := func(ctx context.Context) {
		leading.Store(true)
		defer leading.Store(false)
		if err := ctl.Run(ctx, *workers); err != nil {
			logger.Error(err, "Controller stopped")
		}
	}
	if !*leaderElect {
		run(ctx)
		stop()
		return 0
	}
	host, _ := os.Hostname()
	identity := host + "_" + rand.String(8)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, *namespace, *leaseName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: identity, EventRecorder: recorder})
	if err != nil {
		logger.Error(err, "Creating leader lock failed")
		return 1
	}
	exit := 0
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *leaseDuration,
		RenewDeadline:   *renewDeadline,
		RetryPeriod:     *retryPeriod,
		ReleaseOnCancel: true,
		Name:            *leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Started leading", "identity", identity)
				run(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					// Lost the lease while running: exit so that the
					// restarted process starts clean instead of two
					// leaders reconciling.
					logger.Info("Lost leader lease", "identity", identity)
					exit = 1
				}
				stop()
			},
			OnNewLeader: func(id string) {
				if id != identity {
					logger.Info("New leader", "identity", id)
				}
			},
		},
	})
	logger.Info("Stopped", "exitCode", strconv.Itoa(exit))
	return exit
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

// dnsProblemReporter logs a Service's DNS problems on every replica.
// Annotation problems get no Event here: the leader's reconcile already
// validates the same annotations into InvalidAnnotation Events and the
// ConfigValid condition. A hostname taken by another Service is found only
// by the zone build, so the replica that leads records it as an Event.
func dnsProblemReporter(logger klog.Logger, recorder record.EventRecorder, leading *atomic.Bool) func(*corev1.Service, []error) {
	logger = logger.WithName("dns")
	return func(svc *corev1.Service, problems []error) {
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.Error()
			if leading.Load() && errors.Is(p, dnsexport.ErrHostnameConflict) {
				recorder.Event(svc, corev1.EventTypeWarning, "HostnameConflict", p.Error())
			}
		}
		logger.Info("Service has DNS problems; serving the rest", "service", klog.KObj(svc), "problems", msgs)
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}
