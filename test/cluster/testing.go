package cluster

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// ForTest starts a cluster for t and stops it when t ends, also when t
// panics or the test binary is interrupted. Without root it skips t, or
// fails it when the environment variable CI is "true". The cluster
// directory (logs included) is kept when t fails and removed otherwise.
func ForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI runs as root", ErrNotRoot)
		}
		t.Skipf("skipping: %v", ErrNotRoot)
	}
	logger, ctx := ktesting.NewTestContext(t)
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "pulselb-testcluster-")
		if err != nil {
			t.Fatalf("creating cluster dir: %v", err)
		}
		opts.Dir = d
	}
	c, err := Start(ctx, opts)
	if err != nil {
		if errors.Is(err, ErrNotRoot) {
			t.Skip(err)
		}
		t.Fatalf("starting test cluster (logs in %s): %v", opts.Dir, err)
	}

	// An interrupted test binary runs no cleanups: tear down on the signal.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			logger.Info("Interrupted, tearing down the test cluster", "signal", s.String())
			_ = c.Stop(context.Background())
			os.Exit(1)
		case <-done:
		}
	}()
	t.Cleanup(func() {
		signal.Stop(sig)
		close(done)
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("stopping test cluster: %v", err)
		}
		if t.Failed() {
			t.Logf("test cluster logs kept in %s/logs", c.Dir)
			return
		}
		_ = os.RemoveAll(c.Dir)
	})
	return c
}
