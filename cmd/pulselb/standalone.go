package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/standalone"
)

const standaloneUsage = `Usage: pulselb standalone --config FILE [flags]

Probes the services and hosts listed in FILE (YAML, see docs/standalone.md),
serves the healthy hosts' addresses as an authoritative DNS zone, and serves
the dashboard, this instance's report for its peers and /metrics over HTTP.
SIGHUP re-reads FILE: targets that remain keep their state, and a file with
errors is logged and ignored. With --check, only checks FILE and exits.

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

	reg, err := newRegistry()
	if err != nil {
		return failed(logger, err)
	}
	r, err := standalone.New(ctx, cfg, standalone.Options{Registry: reg})
	if err != nil {
		logger.Error(err, "Starting failed")
		return 1
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
