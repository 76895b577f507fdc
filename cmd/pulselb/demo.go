package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/pulselb/pulselb/api/probespec"

	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/standalone"
	"github.com/pulselb/pulselb/standalone/demo"
)

const demoUsage = `Usage: pulselb demo [flags]

Starts three loopback hosts (127.0.0.11, 127.0.0.12, 127.0.0.13), each with
an HTTP backend (/healthz), a TCP echo and a UDP echo, and runs standalone
mode against them with its DNS server on a free loopback port. After a few
seconds it takes host b down (closes its listeners), shows the DNS answer
losing 127.0.0.12, brings the host back, shows the address returning, and
prints a summary. Needs no root and no configuration; on Linux every
127.0.0.0/8 address is loopback (elsewhere, add aliases for the three).

With --serve it keeps running afterwards and prints the dashboard URL.

Flags:
`

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts demo.Options
	fs.DurationVar(&opts.Interval, "interval", 500*time.Millisecond, "probe interval")
	fs.DurationVar(&opts.Settle, "settle", 3*time.Second, "how long all hosts run before host b goes down")
	fs.DurationVar(&opts.Down, "down", 3*time.Second, "how long host b stays down")
	fs.DurationVar(&opts.Wait, "wait", 15*time.Second, "longest wait for DNS to follow a change")
	fs.BoolVar(&opts.Serve, "serve", false, "keep running after the demo and print the dashboard URL; stop with Ctrl-C")
	fs.StringVar(&opts.HTTPListen, "http-listen", "127.0.0.1:0", "dashboard address")
	verbosity := fs.Int("v", -1, "log verbosity; -1 logs errors only")
	if code, ok := parseArgs(fs, demoUsage, args, stderr); !ok {
		return code
	}
	var bad string
	switch {
	case opts.Interval < probespec.MinInterval:
		bad = fmt.Sprintf("--interval=%s: want at least %s", opts.Interval, probespec.MinInterval)
	case opts.Settle < 0:
		bad = fmt.Sprintf("--settle=%s: want 0s or more, such as 3s", opts.Settle)
	case opts.Down < 0:
		bad = fmt.Sprintf("--down=%s: want 0s or more, such as 3s", opts.Down)
	case opts.Wait <= 0:
		bad = fmt.Sprintf("--wait=%s: want more than 0s, such as 15s", opts.Wait)
	}
	if err := standalone.CheckListen(opts.HTTPListen); bad == "" && err != nil {
		bad = fmt.Sprintf("--http-listen=%q: want IP:PORT such as 127.0.0.1:8080 (port 0 picks a free one): %v", opts.HTTPListen, err)
	}
	if bad != "" {
		fmt.Fprintln(stderr, "pulselb demo: "+bad)
		return 2
	}
	// Quiet by default: the demo's own output tells the story, and only
	// errors are logged (a logger's Error ignores its verbosity).
	logger := klog.Background().WithName("demo").V(10)
	if *verbosity >= 0 {
		setVerbosity(*verbosity)
		logger = klog.Background().WithName("demo")
	}
	ctx, stop := signalContext(logger)
	defer stop()
	if err := demo.Run(ctx, opts, stdout); err != nil {
		fmt.Fprintf(stdout, "pulselb demo: %v\n", err)
		return 1
	}
	return 0
}
