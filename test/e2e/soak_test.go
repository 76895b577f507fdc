package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
	"github.com/pulselb/pulselb/test/soak"
)

// TestSoak is the short form of the randomized fault soak (test/soak):
// pulselb installed from deploy/base on 4 nodes with an external vantage
// in the client namespace, a fixed seed's two minutes of overlapping
// faults (every kind but node-down, a maintenance and an upgrade among
// them), every invariant checked throughout, then every Service deleted
// and nothing left (no workload, report entry, iptables rule or conntrack
// entry to a removed proxy). `make soak` runs the long form.
func TestSoak(t *testing.T) {
	// It waits longer for a machine other tests share, as the install tests do.
	c := cluster.ForTest(t, cluster.Options{Nodes: 4, WaitForMachine: 20 * time.Minute})
	res, err := soak.Run(t.Context(), c, soak.Config{Seed: soak.ShortSeed, Duration: soak.ShortDuration,
		Base: filepath.Join("..", "..", "deploy", "base"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Checks == 0 || len(res.Faults) == 0 {
		t.Errorf("the soak checked %d times and injected %v: it tested nothing", res.Checks, res.Faults)
	}
	for _, f := range res.Failures {
		t.Errorf("%s", f)
	}
}
