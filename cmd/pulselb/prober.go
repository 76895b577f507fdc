package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/httpserver"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/prober/agent"
)

const proberUsage = `Usage: pulselb prober --node-name=NODE [flags]
       pulselb prober --external --vantage-name=NAME --kubeconfig=FILE [flags]

Runs on every node (DaemonSet): probes the Service ports and node beacons
the vantage assignment gives this node, listens on this node's beacon port,
renews the Lease pulselb-prober-NODE in --namespace every --heartbeat as its
heartbeat, and writes the ProbeReport named after the node there when a
result changes. Uses in-cluster credentials unless --kubeconfig is given.

With --external it runs outside the cluster as an external vantage: it
probes every served Service's published addresses (status ingress IPs) on
the Service's ports with its probe specs, renews the Lease
pulselb-prober-external-NAME and writes the ProbeReport external-NAME,
marked external. It listens on no beacon and reads no pods or Secrets;
--kubeconfig names its own credentials (pulselb vantage-kubeconfig makes
them). See docs/external-vantages.md.

Every flag can also be set with the environment variable named after it
(--node-name is PULSELB_NODE_NAME); a flag given on the command line wins.

Flags:
`

func runProber(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("prober", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kube := addKubeFlags(fs, 5, 10)
	namespace := fs.String("namespace", "pulselb-system", "namespace of the proxy and prober pods, the reports and probe Secrets")
	nodeName := fs.String("node-name", "", "the node this prober runs on (downward API spec.nodeName); required without --external")
	external := fs.Bool("external", false, "run as an external vantage, outside the cluster: probe the Services' published addresses (needs --vantage-name and --kubeconfig)")
	vantageName := fs.String("vantage-name", "", "the external vantage's name (with --external): lower-case letters, digits and '-'; its report is external-NAME")
	vantages := fs.Int("vantages", contract.DefaultVantages, "probers per target; must equal the controller's")
	beaconPort := fs.Uint("beacon-port", agent.DefaultBeaconPort, "port of the node beacon (the prober pod's hostPort)")
	beaconLinger := fs.Duration("beacon-linger", agent.DefaultBeaconLinger, "how long the beacon keeps answering after SIGTERM, so that a prober rollout fails no node")
	heartbeat := fs.Duration("heartbeat", contract.DefaultHeartbeat, "how often the prober's Lease is renewed (it lasts 3 of them) and the report compared for changes no state transition announces")
	leaseHeartbeat := fs.Bool("lease-heartbeat", true, "keep the Lease pulselb-prober-NODE as the heartbeat and write the report only on change; false: rewrite the report every --heartbeat instead, as probers before Leases did (for a cluster that cannot grant the prober Lease rights)")
	minWrite := fs.Duration("min-write-interval", agent.DefaultMinWriteInterval, "least time between report writes caused by state changes")
	concurrency := fs.Int("concurrency", prober.DefaultConcurrency, "probes in flight at most")
	classOnly := fs.Bool("class-only", false, "probe only Services with loadBalancerClass "+contract.Class+", as the controller's --class-only")
	metricsAddr := fs.String("metrics-address", ":9473", "address for /metrics and /healthz; empty disables")
	metricsConns := fs.Int("metrics-max-connections", httpserver.DefaultMaxConns, "connections --metrics-address holds at once; more wait until one closes")
	verbosity := fs.Int("v", 0, "log verbosity: 2 decisions, 4 detail")
	if _, code, ok := parseFlags(fs, proberUsage, args, stderr); !ok {
		return code
	}
	if code := checkExternalFlags(*external, *nodeName, *vantageName, kube.kubeconfig, stderr); code != 0 {
		return code
	}
	switch {
	case *nodeName == "" && !*external:
		fmt.Fprintln(stderr, "pulselb prober: --node-name is required (or --external with --vantage-name)")
		return 2
	case *vantages < 1:
		fmt.Fprintln(stderr, "pulselb prober: --vantages must be at least 1")
		return 2
	case *beaconPort < 1 || *beaconPort > 65535:
		fmt.Fprintln(stderr, "pulselb prober: --beacon-port must be 1 to 65535")
		return 2
	case *heartbeat < time.Second:
		fmt.Fprintln(stderr, "pulselb prober: --heartbeat must be at least 1s")
		return 2
	case *metricsConns < 1:
		fmt.Fprintf(stderr, "pulselb prober: --metrics-max-connections=%d: want at least 1\n", *metricsConns)
		return 2
	}
	setVerbosity(*verbosity)
	logger := klog.Background().WithName("prober").WithValues("node", *nodeName)
	if *external {
		logger = klog.Background().WithName("prober").WithValues("vantage", *vantageName)
		*nodeName = *vantageName
	}

	client, dyn, err := kube.clients("pulselb-prober", true)
	if err != nil {
		return failed(logger, err)
	}

	ctx, stop := signalContext(logger)
	defer stop()

	metrics, agentMetrics := prober.NewMetrics(), agent.NewMetrics()
	reg, err := newRegistry(metrics.RegisterMetrics, agentMetrics.RegisterMetrics)
	if err != nil {
		return failed(logger, err)
	}
	closeMetrics, err := serveMetrics(*metricsAddr, *metricsConns, metricsHandler(reg))
	if err != nil {
		return failed(logger, err)
	}
	defer closeMetrics()
	if !*external {
		beacon, err := net.Listen("tcp", fmt.Sprintf(":%d", *beaconPort))
		if err != nil {
			logger.Error(err, "Listening for the node beacon failed", "port", *beaconPort)
			return 1
		}
		beaconDone := make(chan struct{})
		go func() {
			defer close(beaconDone)
			if err := agent.ServeBeacon(ctx, beacon, *beaconLinger); err != nil {
				logger.Error(err, "Node beacon stopped")
				stop()
			}
		}()
		// The beacon outlives the agent by its linger.
		defer func() { stop(); <-beaconDone }()
	}

	inf := newInformerFactories(client, *namespace)
	var leases agent.Leases
	if *leaseHeartbeat {
		leases = client.CoordinationV1().Leases(*namespace)
	}
	system := inf.system
	if *external {
		system = nil
	}
	a, err := agent.New(ctx, inf.cluster, system, v1alpha1.NewClient(dyn), agent.Config{
		Node:             *nodeName,
		External:         *external,
		Namespace:        *namespace,
		Services:         contract.Selection{ClassOnly: *classOnly},
		Vantages:         *vantages,
		BeaconPort:       uint16(*beaconPort),
		Heartbeat:        *heartbeat,
		Leases:           leases,
		MinWriteInterval: *minWrite,
		Metrics:          agentMetrics,
		Scheduler:        prober.Config{Concurrency: *concurrency, Metrics: metrics},
	})
	if err != nil {
		logger.Error(err, "Creating prober agent failed")
		return 1
	}
	shutdown := inf.start(ctx)
	defer shutdown()
	if err := a.Run(ctx); err != nil {
		logger.Error(err, "Prober stopped")
		return 1
	}
	logger.Info("Stopped prober")
	return 0
}

// checkExternalFlags checks the flags of an external vantage, and that
// --vantage-name comes only with --external. It prints what is wrong and
// returns 2, or returns 0.
func checkExternalFlags(external bool, nodeName, vantageName, kubeconfig string, stderr io.Writer) int {
	var msg string
	switch {
	case !external && vantageName != "":
		msg = "--vantage-name needs --external"
	case !external:
		return 0
	case nodeName != "":
		msg = "--node-name and --external exclude each other: an external vantage runs on no node of the cluster; name it with --vantage-name"
	case vantageName == "":
		msg = "--external needs --vantage-name, the vantage's name (such as vps-1)"
	case kubeconfig == "":
		msg = "--external needs --kubeconfig, the external vantage's own credentials (pulselb vantage-kubeconfig writes one)"
	default:
		if _, err := contract.ExternalReportName(vantageName); err != nil {
			msg = "--vantage-name: " + err.Error()
		}
	}
	if msg == "" {
		return 0
	}
	fmt.Fprintln(stderr, "pulselb prober: "+msg)
	return 2
}
