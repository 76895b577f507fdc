package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/proxy"
)

const proxyUsage = `Usage: pulselb proxy --cluster-ips=IP[,IPv6] --ports=TCP:80,UDP:53 [flags]

Forwards the Service ports arriving in this network namespace (the proxy
pod's) to the Service's ClusterIP. Runs until SIGTERM or SIGINT, then shuts
down in phases:

  1. for --drain-delay, forwards new connections exactly as before, while
     clients still resolve the node's address (DNS TTL, external-dns);
  2. then refuses new connections (iptables: removes the DNAT rules, so the
     pod answers a reset or port unreachable; userspace: closes the
     listeners) and lets open ones finish for up to --drain-timeout
     (userspace stops early when all have ended; iptables waits it out);
  3. then removes its iptables rules or closes the connections left, and
     exits.

With --drain-delay=0 phase 1 is skipped, and iptables mode skips phase 2 too
and removes its rules at once. The pod's terminationGracePeriodSeconds must
exceed --drain-delay plus --drain-timeout: a further SIGTERM or SIGINT does
not shorten the phases, only the kubelet's SIGKILL at the end of the grace
period does.

Every flag can also be set with the environment variable named after it
(--cluster-ips is PULSELB_CLUSTER_IPS); a flag given on the command line wins.

Exit status: 0 after a clean shutdown, 1 when the data plane cannot start or
its rules cannot be removed, 2 for a bad flag or variable.

Flags:
`

func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clusterIPs := fs.String("cluster-ips", "", "the Service's ClusterIPs: one, or an IPv4 and an IPv6 separated by a comma")
	ports := fs.String("ports", "", "ports to forward, PROTOCOL:PORT separated by commas (TCP:80,UDP:53)")
	sourceRanges := fs.String("source-ranges", "", "CIDRs of allowed clients separated by commas (loadBalancerSourceRanges); empty allows all; ignored with --allow-list-from")
	allowFrom := fs.String("allow-list-from", "", "read the allow-list (source ranges and probers' addresses) from this proxy workload's annotations, deployment/NAME or daemonset/NAME in --namespace, and follow its changes; the proxy refuses every client until it has read it")
	namespace := fs.String("namespace", "pulselb-system", "namespace of the --allow-list-from workload")
	podName := fs.String("pod-name", "", "with --allow-list-from: this proxy's pod, on which it reports the allow-list it applies (condition pulselb.io/allow-list)")
	kube := addKubeFlags(fs, 5, 10)
	mode := fs.String("mode", string(proxy.ModeAuto), "auto, iptables or userspace")
	healthAddr := fs.String("health-address", "127.0.0.1:9470", "address for /healthz and /metrics; empty disables")
	resync := fs.Duration("resync-interval", proxy.DefaultResyncInterval, "how often iptables rules are checked and restored")
	delay := fs.Duration("drain-delay", 0, "after SIGTERM, keep forwarding new connections this long before refusing them; 0 refuses them at once")
	drain := fs.Duration("drain-timeout", proxy.DefaultDrainTimeout, "once new connections are refused, how long open ones may finish (iptables mode: only after a drain delay)")
	tcpIdle := fs.Duration("tcp-idle-timeout", proxy.DefaultTCPIdleTimeout, "userspace mode: close a TCP connection that carried no data either way this long; 0 never does")
	idle := fs.Duration("udp-idle-timeout", proxy.DefaultUDPIdleTimeout, "userspace mode: end a UDP session idle this long")
	maxSessions := fs.Int("udp-max-sessions", proxy.DefaultUDPMaxSessions, "userspace mode: UDP sessions per port")
	listen := fs.String("listen-address", "", "userspace mode: the address to listen on; empty means all")
	nodePortTarget := fs.String("node-port-target", "", "externalTrafficPolicy Local: ports forwarded to the node's IP at a NodePort instead of the ClusterIP, PORT=NODEPORT separated by commas (TCP:80=30080,UDP:53=30053)")
	nodeIPs := fs.String("node-ips", "", "the node's IPs, at most one per family, separated by commas; needed with --node-port-target")
	proxyProtocol := fs.String("proxy-protocol", "", "TCP ports whose relay sends a PROXY protocol header with the client's address to the backend, PORT=VERSION separated by commas (TCP:443=v2,TCP:25=v1); in iptables mode these ports are relayed in userspace")
	cleanup := fs.Bool("cleanup", false, "remove rules a previous proxy left in this network namespace, and exit")
	verbosity := fs.Int("v", 0, "log verbosity: 2 decisions, 4 per-connection detail")
	fromEnv, code, ok := parseFlags(fs, proxyUsage, args, stderr)
	if !ok {
		return code
	}
	setVerbosity(*verbosity)
	logger := klog.Background().WithName("proxy")

	if *cleanup {
		if err := proxy.Cleanup(nil); err != nil {
			logger.Error(err, "Removing leftover proxy rules failed")
			return 1
		}
		fmt.Fprintln(stdout, "removed pulselb proxy rules, if any")
		return 0
	}

	cfg := proxy.Config{
		ResyncInterval: *resync, DrainDelay: *delay, DrainTimeout: *drain,
		TCPIdleTimeout: *tcpIdle, UDPIdleTimeout: *idle, UDPMaxSessions: *maxSessions,
	}
	if *tcpIdle == 0 {
		cfg.TCPIdleTimeout = -1
	}
	bad := func(name, value string, err error) int {
		from := ""
		if fromEnv[name] {
			from = " (from " + envName(name) + ")"
		}
		fmt.Fprintf(stderr, "pulselb proxy: --%s=%q%s: %v\n", name, value, from, err)
		return 2
	}
	for _, s := range strings.Split(*clusterIPs, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return bad("cluster-ips", *clusterIPs, fmt.Errorf("%q is not an IP address", s))
		}
		cfg.ClusterIPs = append(cfg.ClusterIPs, a)
	}
	var err error
	if cfg.Ports, err = proxy.ParsePorts(*ports); err != nil {
		return bad("ports", *ports, err)
	}
	if cfg.SourceRanges, err = proxy.ParseSourceRanges(*sourceRanges); err != nil {
		return bad("source-ranges", *sourceRanges, err)
	}
	var ref workloadRef
	if *allowFrom != "" {
		if ref, err = parseWorkloadRef(*allowFrom); err != nil {
			return bad("allow-list-from", *allowFrom, err)
		}
		cfg.AwaitAllowList = true
	}
	if cfg.Mode, err = proxy.ParseMode(*mode); err != nil {
		return bad("mode", *mode, err)
	}
	if *healthAddr != "" {
		if err := checkListenAddress(*healthAddr); err != nil {
			return bad("health-address", *healthAddr, err)
		}
	}
	if *listen != "" {
		if cfg.ListenAddress, err = netip.ParseAddr(*listen); err != nil {
			return bad("listen-address", *listen, errors.New("not an IP address"))
		}
	}
	if cfg.NodePorts, err = proxy.ParseNodePorts(*nodePortTarget); err != nil {
		return bad("node-port-target", *nodePortTarget, err)
	}
	if strings.TrimSpace(*nodeIPs) != "" {
		for _, s := range strings.Split(*nodeIPs, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil {
				return bad("node-ips", *nodeIPs, fmt.Errorf("%q is not an IP address", s))
			}
			cfg.NodeIPs = append(cfg.NodeIPs, a)
		}
	}
	if cfg.ProxyProtocol, err = proxy.ParseProxyProtocol(*proxyProtocol); err != nil {
		return bad("proxy-protocol", *proxyProtocol, err)
	}
	for name, d := range map[string]*time.Duration{"resync-interval": resync, "drain-timeout": drain, "udp-idle-timeout": idle} {
		if *d <= 0 {
			return bad(name, d.String(), errors.New("want a positive duration"))
		}
	}
	if *tcpIdle < 0 {
		return bad("tcp-idle-timeout", tcpIdle.String(), errors.New("want zero (never) or a positive duration"))
	}
	if *delay < 0 {
		return bad("drain-delay", delay.String(), errors.New("want zero or a positive duration"))
	}
	if *maxSessions < 1 {
		return bad("udp-max-sessions", strconv.Itoa(*maxSessions), errors.New("want at least 1"))
	}

	metrics := proxy.NewMetrics()
	p, err := proxy.New(cfg, metrics)
	switch {
	case errors.Is(err, proxy.ErrNodePorts):
		return bad("node-port-target", *nodePortTarget, err)
	case errors.Is(err, proxy.ErrNodeIPs):
		return bad("node-ips", *nodeIPs, err)
	case errors.Is(err, proxy.ErrProxyProtocol):
		return bad("proxy-protocol", *proxyProtocol, err)
	case err != nil:
		return bad("cluster-ips", *clusterIPs, err)
	}
	reg, err := newRegistry(metrics.RegisterMetrics)
	if err != nil {
		return failed(logger, err)
	}

	// The context stays registered for both signals until stop, so a second
	// SIGTERM or a SIGINT during the drain is absorbed rather than killing
	// the process: the phases are what let a planned change lose nothing,
	// and the kubelet's SIGKILL ends them at the grace period anyway.
	ctx, stop := signalContext(logger)
	defer stop()
	if err := p.Start(ctx); err != nil {
		logger.Error(err, "Starting proxy failed")
		return 1
	}
	if *healthAddr != "" {
		closeHealth, err := serveHTTP(*healthAddr, proxy.NewHandler(p, reg))
		if err != nil {
			logger.Error(err, "Listening for health checks failed", "address", *healthAddr)
			stop()
			_ = p.Run(ctx)
			return 1
		}
		defer closeHealth()
	}
	if ref != (workloadRef{}) {
		kcfg, err := kube.config("pulselb-proxy")
		if err == nil {
			var client *kubernetes.Clientset
			if client, err = kubernetes.NewForConfig(kcfg); err == nil {
				go watchAllowList(ctx, client, *namespace, ref, *podName, p)
			}
		}
		if err != nil {
			// Closed, and unhealthy with the reason: the kubelet restarts it.
			p.RejectAllowList(ctx, fmt.Errorf("API client for the allow-list: %w", err))
		}
	}
	if err := p.Run(ctx); err != nil {
		logger.Error(err, "Removing proxy rules failed")
		return 1
	}
	logger.Info("Stopped proxy")
	return 0
}
