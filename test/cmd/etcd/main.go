// Command etcd runs a single-member etcd server from go.etcd.io/etcd/server/v3/embed
// for the test harness in test/cluster. It serves clients on one loopback URL
// and stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL to serve clients on")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL to serve peers on")
	quota := flag.Int64("quota-backend-bytes", 2<<30, "backend size quota")
	flag.Parse()
	if *dataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return fmt.Errorf("parsing --listen-client-url: %w", err)
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return fmt.Errorf("parsing --listen-peer-url: %w", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "pulselb-test"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.QuotaBackendBytes = *quota
	// A throwaway test store: durability does not matter, write latency does.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		return fmt.Errorf("etcd was not ready after 60s")
	}
	fmt.Fprintln(os.Stderr, "etcd: ready on", cu.String())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd failed: %w", err)
	}
}
