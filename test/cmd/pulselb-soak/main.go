// Command pulselb-soak runs the randomized fault soak (test/soak) on a
// cluster of its own: `make soak` at the root runs it for an hour with a
// random seed. It prints the seed first (-seed replays the run) and a
// summary at the end, and exits 1 when an invariant broke.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/soak"
)

var (
	seed     = flag.Uint64("seed", 0, "the schedule's seed; 0: a random one (printed)")
	duration = flag.Duration("duration", time.Hour, "how long faults are injected")
	base     = flag.String("base", "../deploy/base", "path of deploy/base")
	dir      = flag.String("dir", "", "the cluster's directory; default a new one under /tmp")
	nodes    = flag.Int("nodes", 4, "cluster nodes: the last runs the backend, the others the proxies")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if *seed == 0 {
		*seed = rand.Uint64N(1 << 32)
	}
	log.Printf("soak seed %d, duration %s (replay: -seed %d -duration %s)", *seed, *duration, *seed, *duration)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res)
	for _, f := range res.Failures {
		fmt.Println(f)
	}
	if len(res.Failures) > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context) (*soak.Result, error) {
	c, err := cluster.Start(ctx, cluster.Options{Dir: *dir, Nodes: *nodes, WaitForMachine: 40 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	defer func() {
		if err := c.Stop(context.Background()); err != nil {
			log.Printf("stopping the cluster: %v", err)
		}
	}()
	log.Printf("cluster up in %s", c.Dir)
	return soak.Run(ctx, c, soak.Config{Seed: *seed, Duration: *duration, Base: *base, Logf: log.Printf})
}
