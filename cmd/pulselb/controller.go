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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/controller"
	"github.com/pulselb/pulselb/placement"
)

const controllerUsage = `Usage: pulselb controller --proxy-image=IMAGE [flags]

Serves LoadBalancer Services with per-Service proxy workloads in --namespace
and keeps each Service's status.loadBalancer equal to its proxy nodes' IPs.
Uses in-cluster credentials unless --kubeconfig is given. With
--leader-elect (the default) only the Lease holder reconciles.

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
	classOnly := fs.Bool("class-only", false, "serve only Services with loadBalancerClass "+controller.Class+", not those without a class")
	workers := fs.Int("workers", 4, "Services reconciled in parallel")
	leaderElect := fs.Bool("leader-elect", true, "reconcile only while holding the Lease")
	leaseName := fs.String("leader-elect-lease-name", "pulselb-controller", "name of the leader Lease in --namespace")
	leaseDuration := fs.Duration("leader-elect-lease-duration", 15*time.Second, "how long a Lease lasts without renewal")
	renewDeadline := fs.Duration("leader-elect-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up")
	retryPeriod := fs.Duration("leader-elect-retry-period", 2*time.Second, "how often candidates try to acquire or renew")
	metricsAddr := fs.String("metrics-address", ":9471", "address for /metrics and /healthz; empty disables")
	qps := fs.Float64("kube-api-qps", 50, "API requests per second")
	burst := fs.Int("kube-api-burst", 100, "API request burst")
	verbosity := fs.Int("v", 0, "log verbosity: 2 decisions, 4 detail")
	fs.Usage = func() {
		fmt.Fprint(stderr, controllerUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if _, err := setFromEnv(fs); err != nil {
		fmt.Fprintf(stderr, "pulselb controller: %v\n", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "pulselb controller: unexpected argument %q\n", fs.Arg(0))
		return 2
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
	setVerbosity(*verbosity)
	logger := klog.Background().WithName("controller")

	var restCfg *rest.Config
	var err error
	if *kubeconfig != "" {
		restCfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		restCfg, err = rest.InClusterConfig()
	}
	if err != nil {
		logger.Error(err, "Loading Kubernetes client config failed", "kubeconfig", *kubeconfig)
		return 1
	}
	restCfg.QPS, restCfg.Burst = float32(*qps), *burst
	restCfg.UserAgent = "pulselb-controller"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		logger.Error(err, "Creating Kubernetes client failed")
		return 1
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
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			logger.Error(err, "Listening for metrics failed", "address", *metricsAddr)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
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
		ClassOnly: *classOnly,
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
	cluster.Start(ctx.Done())
	system.Start(ctx.Done())
	defer cluster.Shutdown()
	defer system.Shutdown()

	run := func(ctx context.Context) {
		if err := ctl.Run(ctx, *workers); err != nil {
			logger.Error(err, "Controller stopped")
		}
	}
	if !*leaderElect {
		run(ctx)
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
