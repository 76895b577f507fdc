package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/trim"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober/agent"
	"github.com/pulselb/pulselb/standalone"
)

const standaloneUsage = `Usage: pulselb standalone --config FILE [flags]

Probes the services and hosts listed in FILE (YAML, see docs/standalone.md),
serves the healthy hosts' addresses as an authoritative DNS zone, and serves
the dashboard, this instance's report for its peers and /metrics over HTTP.
SIGHUP re-reads FILE: targets that remain keep their state, and a file with
errors is logged and ignored. With --check, only checks FILE and exits.
With an external-vantage section it is also an external vantage of a
cluster, as 'pulselb prober --external' (docs/external-vantages.md); that
section is read at start only.

Flags:
`

func runStandalone(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("standalone", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", "", "configuration file; required")
	check := fs.Bool("check", false, "check the configuration file and exit")
	verbosity := fs.Int("v", 0, "log verbosity: 2 decisions, 4 detail")
	if _, code, ok := parseFlags(fs, standaloneUsage, args, stderr); !ok {
		return code
	}
	if *file == "" {
		fmt.Fprintln(stderr, "pulselb standalone: --config is required")
		return 2
	}
	cfg, err := standalone.Load(*file)
	if err != nil {
		fmt.Fprintf(stderr, "pulselb standalone: %v\n", err)
		return 2
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok (%d services, %d peers)\n", *file, len(cfg.Services), len(cfg.Peers))
		return 0
	}
	setVerbosity(*verbosity)
	logger := klog.Background().WithName("standalone")
	ctx, stop := signalContext(logger)
	defer stop()

	vantageMetrics := agent.NewMetrics()
	var register []func(prometheus.Registerer) error
	if cfg.ExternalVantage != nil {
		register = append(register, vantageMetrics.RegisterMetrics)
	}
	reg, err := newRegistry(register...)
	if err != nil {
		return failed(logger, err)
	}
	r, err := standalone.New(ctx, cfg, standalone.Options{Registry: reg, HTTPMetrics: httpMetrics})
	if err != nil {
		logger.Error(err, "Starting failed")
		return 1
	}
	if ev := cfg.ExternalVantage; ev != nil {
		kube := &kubeFlags{kubeconfig: ev.Kubeconfig, qps: 5, burst: 10}
		client, dyn, err := kube.clients("pulselb-standalone", true)
		if err != nil {
			return failed(logger, err)
		}
		a, factory, err := newExternalVantage(ctx, ev, client, v1alpha1.NewClient(dyn), vantageMetrics)
		if err != nil {
			logger.Error(err, "Creating the external vantage failed")
			return 1
		}
		factory.Start(ctx.Done())
		defer factory.Shutdown()
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := a.Run(klog.NewContext(ctx, logger.WithName("external-vantage"))); err != nil {
				logger.Error(err, "External vantage stopped")
			}
		}()
		defer func() { stop(); <-done }()
		logger.Info("Acting as an external vantage", "vantage", ev.Name, "server", kube.host)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnSignal(ctx, *file, r, hup)
	if err := r.Run(ctx); err != nil {
		logger.Error(err, "Stopped")
		return 1
	}
	return 0
}

// newExternalVantage returns the prober agent that makes a standalone
// instance the external vantage ev of the cluster client reaches, and the
// informer factory it reads, which the caller starts.
func newExternalVantage(ctx context.Context, ev *standalone.ExternalVantage, client kubernetes.Interface, reports agent.Reports,
	metrics *agent.Metrics) (*agent.Agent, informers.SharedInformerFactory, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trim.Object))
	a, err := agent.New(ctx, factory, nil, reports, agent.Config{
		Node:      ev.Name,
		External:  true,
		Namespace: ev.Namespace,
		Services:  contract.Selection{ClassOnly: ev.ClassOnly},
		Leases:    client.CoordinationV1().Leases(ev.Namespace),
		Metrics:   metrics,
	})
	return a, factory, err
}

// reloadOnSignal re-reads file and applies it to r on every signal from
// hup until ctx is done. A file with errors is logged and the running
// configuration stays.
func reloadOnSignal(ctx context.Context, file string, r *standalone.Runner, hup <-chan os.Signal) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := r.ReloadFile(ctx, file); err != nil {
				logger.Error(err, "Reloading configuration failed; the previous one keeps running", "file", file)
			}
		}
	}
}
