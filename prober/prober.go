// Package prober owns the probe engine: the probe spec grammar, one prober per
// protocol (tcp, udp, http, https, tls, mysql, dns), typed outcomes with
// per-phase timings, and the scheduler that probes many targets with
// intervals, jitter, hysteresis and bounded concurrency.
package prober

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// DefaultTimeout bounds a probe whose context carries no deadline.
const DefaultTimeout = 2 * time.Second

// Prober checks one target. Probe returns a Result whose Outcome is never
// zero, and returns by ctx's deadline.
type Prober interface {
	Probe(ctx context.Context, target netip.AddrPort) Result
}

// Func adapts a function to the Prober interface.
type Func func(ctx context.Context, target netip.AddrPort) Result

// Probe calls f.
func (f Func) Probe(ctx context.Context, target netip.AddrPort) Result { return f(ctx, target) }

// SecretSource resolves the secret= option of the mysql probe.
type SecretSource interface {
	// Password returns the password stored in the named Secret. It never
	// logs the value.
	Password(ctx context.Context, name string) (string, error)
}

// ErrNoSecrets is returned when a spec names a secret but no SecretSource
// was configured.
var ErrNoSecrets = errors.New("no secret source configured")

// Options are what a Prober needs beyond its Spec.
type Options struct {
	// Secrets resolves secret= for mysql probes; nil means none are available.
	Secrets SecretSource
	// LocalAddr, when valid, is the source address of every probe.
	LocalAddr netip.Addr
	// RootCAs, when not nil, is the pool tls and https probes verify
	// certificates against instead of the system roots.
	RootCAs *x509.CertPool

	// proxyHeader, set by New from the spec's proxy-protocol=, is written
	// first on every TCP connection to the target.
	proxyHeader []byte
}

// constructors is the protocol table: adding a protocol adds one line here.
var constructors = map[probespec.Protocol]func(probespec.Spec, Options) (Prober, error){
	probespec.TCP:   newTCP,
	probespec.UDP:   newUDP,
	probespec.HTTP:  newHTTP,
	probespec.HTTPS: newHTTP,
	probespec.TLS:   newTLS,
	probespec.MySQL: newMySQL,
	probespec.DNS:   newDNS,
}

// New returns the Prober for spec.
func New(spec probespec.Spec, opts Options) (Prober, error) {
	mk, ok := constructors[spec.Protocol]
	if !ok {
		return nil, fmt.Errorf("unknown protocol %q", spec.Protocol)
	}
	opts.proxyHeader = healthHeader(spec.ProxyProtocol)
	p, err := mk(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("building %s prober: %w", spec.Protocol, err)
	}
	return p, nil
}

// timed is the frame of every prober's Probe: it bounds ctx by
// DefaultTimeout when it has no deadline, hands probe the start time its
// phase timings count from, and records the total time in the Result.
func timed(ctx context.Context, probe func(ctx context.Context, start time.Time) Result) Result {
	var cancel context.CancelFunc
	if _, ok := ctx.Deadline(); ok {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
	}
	defer cancel()
	start := time.Now()
	res := probe(ctx, start)
	res.Timings.Total = time.Since(start)
	return res
}
