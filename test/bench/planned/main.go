// Command planned counts the requests a client loses during each planned
// change (DESIGN.md, "Planned changes lose nothing"), for pulselb with its
// default drain delay and, in the same run and cluster, for a Service with
// `pulselb.io/drain-delay: 0s` (what K3s ServiceLB does: no delay). Run as
// root on a machine with the test harness binaries:
//
//	cd test && go run ./bench/planned [-nodes 4] [-dns-ttl 5]
//
// It starts a harness cluster (the last node runs the echo backend, the
// others proxies), the prober DaemonSet, two leader-elected
// `pulselb controller` processes serving DNS with --dns-ttl, and two
// LoadBalancer Services on the same backend: "pulselb" (no annotation, so
// a drain delay of the TTL plus 10 s) and "nodelay" (0s). During each
// change a client per Service in the harness' client namespace sends HTTP
// requests (up to 500 a second, each on a new connection), resolving the
// Service's name through the controllers' DNS servers and holding each
// answer for its TTL, round robin over its addresses. A change is measured
// from before it starts until every Service is settled again: as many
// ready proxies as asked for, none terminating, published in status and
// DNS.
//
// It prints, per change, requests sent and failed and the longest time
// without a successful request for both Services, and the ratios.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/planned"
	"github.com/pulselb/pulselb/test/traffic"
)

var (
	nodes  = flag.Int("nodes", 4, "cluster nodes: the last runs the backend, the others proxies")
	dnsTTL = flag.Int("dns-ttl", 5, "the controllers' --dns-ttl (pulselb's default: 5); pulselb's default drain delay is this plus 10 s")
	dir    = flag.String("dir", "", "cluster directory (kept for its logs); default a new temporary directory")
)

// The two Services: pulselb as installed, and without a drain delay.
var (
	withDelay = planned.ServiceConfig{Name: "pulselb", Port: 80}
	noDelay   = planned.ServiceConfig{Name: "nodelay", Port: 81, DrainDelay: "0s"}
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

// change is one planned change of the benchmark.
type change struct {
	name string
	run  func(ctx context.Context, e *planned.Env) error
	// restore, if set, undoes the change afterwards, unmeasured.
	restore func(ctx context.Context, e *planned.Env) error
}

var changes = []change{
	{name: "rolling upgrade of every proxy", run: func(ctx context.Context, e *planned.Env) error {
		return e.RollProxies(ctx, "ghcr.io/pulselb/pulselb:v2")
	}},
	{name: "maintenance label, then drain", run: func(ctx context.Context, e *planned.Env) error {
		return e.MaintainAndDrain(ctx, e.SharedProxyNode(ctx))
	}},
	{name: "kubectl drain of a proxy node", run: func(ctx context.Context, e *planned.Env) error {
		_, err := e.DrainNodes(ctx, e.SharedProxyNode(ctx))
		return err
	}},
	{name: "two proxy nodes drained at once", run: func(ctx context.Context, e *planned.Env) error {
		_, err := e.DrainNodes(ctx, e.ProxyNodesOf(ctx, withDelay.Name)...)
		return err
	}},
	{name: "replicas lowered from 2 to 1", run: func(ctx context.Context, e *planned.Env) error {
		return setReplicas(ctx, e, 1)
	}, restore: func(ctx context.Context, e *planned.Env) error {
		if err := setReplicas(ctx, e, 2); err != nil {
			return err
		}
		return e.WaitSettled(ctx, 3*time.Minute)
	}},
	{name: "leader killed, probers rolled", run: func(ctx context.Context, e *planned.Env) error {
		if err := e.KillLeader(ctx); err != nil {
			return err
		}
		return e.RollProbers(ctx)
	}},
}

func setReplicas(ctx context.Context, e *planned.Env, n int) error {
	for _, s := range e.Config.Services {
		if err := e.SetReplicas(ctx, s.Name, n); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context) error {
	c, err := cluster.Start(ctx, cluster.Options{Dir: *dir, Nodes: *nodes, WaitForMachine: 40 * time.Minute})
	if err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the cluster: %v", err)
		}
	}()
	log.Printf("cluster up in %s", c.Dir)
	e, err := planned.Setup(ctx, c, planned.Config{
		Services: []planned.ServiceConfig{withDelay, noDelay},
		DNSTTL:   *dnsTTL,
		Logf:     log.Printf,
	})
	if e != nil {
		defer func() {
			if err := e.Close(); err != nil {
				log.Print(err)
			}
		}()
	}
	if err != nil {
		return err
	}
	type row struct {
		name     string
		with, no traffic.Report
		took     time.Duration
		err      error
	}
	var rows []row
	for _, ch := range changes {
		start := time.Now()
		reports, err := e.Measure(ctx, func(ctx context.Context) error { return ch.run(ctx, e) })
		r := row{name: ch.name, with: reports[withDelay.Name], no: reports[noDelay.Name], took: time.Since(start), err: err}
		rows = append(rows, r)
		log.Printf("%s (%s): pulselb %s; no delay %s", ch.name, r.took.Round(time.Second), r.with, r.no)
		if err != nil {
			log.Printf("%s: %v", ch.name, err)
			if err := e.WaitSettled(ctx, 3*time.Minute); err != nil {
				return fmt.Errorf("after %s: %w", ch.name, err)
			}
		}
		if ch.restore != nil {
			if err := ch.restore(ctx, e); err != nil {
				return fmt.Errorf("restoring after %s: %w", ch.name, err)
			}
		}
	}

	fmt.Printf("\nDNS TTL %d s; pulselb's drain delay %d s (default), nodelay's 0 s; %d nodes\n\n", *dnsTTL, *dnsTTL+10, *nodes)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "change\tpulselb sent\tfailed\tlongest gap\tno delay sent\tfailed\tlongest gap\tfailed ratio\tgap ratio\t")
	for _, r := range rows {
		name := r.name
		if r.err != nil {
			name += " (change failed)"
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t\n", name,
			r.with.Sent, r.with.Failed, r.with.LongestGap.Round(time.Millisecond),
			r.no.Sent, r.no.Failed, r.no.LongestGap.Round(time.Millisecond),
			ratio(failedShare(r.no), failedShare(r.with)), ratio(r.no.LongestGap.Seconds(), r.with.LongestGap.Seconds()))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nfailed ratio: no-delay's share of failed requests over pulselb's; gap ratio likewise\nload average at the end: %s", load)
	return nil
}

func failedShare(r traffic.Report) float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.Failed) / float64(r.Sent)
}

// ratio formats a/b; "∞" when only b is zero, "-" when both are.
func ratio(a, b float64) string {
	switch {
	case b == 0 && a == 0:
		return "-"
	case b == 0:
		return "∞"
	}
	return fmt.Sprintf("%.1fx", a/b)
}
