package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
	stuck := watchdog(t, c, testLimit())
	t.Cleanup(func() {
		signal.Stop(sig)
		close(done)
		err := c.Stop(context.Background())
		if stuck() {
			t.Errorf("ran over its limit: the stacks of its goroutines are in %s", filepath.Join(c.Dir, "logs", "goroutines.txt"))
		}
		if err != nil {
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

// DefaultTestLimit is how long one test may hold a harness cluster before
// the watchdog calls it stuck. The longest scenario takes about 3 minutes
// on a loaded machine; PULSELB_TEST_LIMIT (a Go duration) overrides it.
const DefaultTestLimit = 15 * time.Minute

func testLimit() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PULSELB_TEST_LIMIT")); err == nil && d > 0 {
		return d
	}
	return DefaultTestLimit
}

// watchdog catches a test stuck on its cluster long before the test
// binary's own timeout, whose goroutine dump names no test near the end of
// a long log. Once t has run for limit, it writes every goroutine's stack
// to the cluster's logs, prints those that run harness or test code between
// "=== STUCK" and "=== END STUCK" lines (make e2e repeats them at the end),
// and stops the cluster, which ends the waits on it. A test still running
// two minutes later panics, naming itself. The returned function reports
// whether the watchdog fired; the caller stops it by calling it.
func watchdog(t testing.TB, c *Cluster, limit time.Duration) (fired func() bool) {
	var (
		mu       sync.Mutex
		over     bool
		finished bool
		last     *time.Timer
	)
	timer := time.AfterFunc(limit, func() {
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		over = true
		var all bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&all, 2)
		path := filepath.Join(c.Dir, "logs", "goroutines.txt")
		_ = os.WriteFile(path, all.Bytes(), 0o644)
		var b strings.Builder
		fmt.Fprintf(&b, "=== STUCK %s: still running after %v; all goroutines in %s; stopping its cluster\n", t.Name(), limit, path)
		for g := range strings.SplitSeq(all.String(), "\n\n") {
			if strings.Contains(g, "pulselb/test/") && !strings.Contains(g, "cluster.watchdog") {
				b.WriteString(g)
				b.WriteString("\n\n")
			}
		}
		fmt.Fprintf(&b, "=== END STUCK %s\n", t.Name())
		fmt.Fprint(os.Stderr, b.String())
		last = time.AfterFunc(2*time.Minute, func() {
			panic(fmt.Sprintf("%s is still running 2m after the watchdog stopped its cluster", t.Name()))
		})
		go func() { _ = c.Stop(context.Background()) }()
	})
	return func() bool {
		timer.Stop()
		mu.Lock()
		defer mu.Unlock()
		finished = true
		if last != nil {
			last.Stop()
		}
		return over
	}
}
