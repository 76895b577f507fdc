package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/miekg/dns"
)

// corefile serves the cluster's zone from the API (the kubernetes plugin,
// as a cluster's CoreDNS does) on addr:53 and nothing else: a name outside
// the cluster is refused, never forwarded.
const corefile = `cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %[1]s
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`

// startClusterDNS runs CoreDNS (binary bin) as the cluster's DNS on
// addr:53, reading the API with kubeconfig, with its Corefile and log in
// dir, and returns once it answers for the kubernetes Service.
func startClusterDNS(ctx context.Context, bin, addr, kubeconfig, dir string) (*exec.Cmd, error) {
	cf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(cf, fmt.Appendf(nil, corefile, addr, kubeconfig), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "coredns.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "-conf", cf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting CoreDNS: %w", err)
	}
	q := new(dns.Msg)
	q.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	c := &dns.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, _, err := c.ExchangeContext(ctx, q, net.JoinHostPort(addr, "53"))
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return cmd, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stopProcess(cmd)
			if err == nil {
				err = fmt.Errorf("answer %s", dns.RcodeToString[r.Rcode])
			}
			return nil, fmt.Errorf("CoreDNS on %s does not answer for the kubernetes Service (log %s): %w", addr, log.Name(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopProcess kills cmd and waits for it.
func stopProcess(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	_ = cmd.Wait()
}
