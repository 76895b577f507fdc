package prober

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/pulselb/pulselb/api/probespec"
)

// systemRoots is the pool tls and https probes verify certificates against;
// nil means the host's system roots. It is a test hook: tests set it to the
// pool of a CA they made up. Constructors read it, so a Prober keeps the
// pool it was built with.
var systemRoots *x509.CertPool

// clientTLSConfig is the client side of a probe's TLS handshake.
//
// With verify and a serverName, crypto/tls checks the chain and the name.
// With verify but no serverName the probe targets a bare IP, which backend
// certificates rarely name, and crypto/tls refuses to verify without a
// name; so the chain alone is verified in VerifyConnection, which still
// catches untrusted and expired certificates.
func clientTLSConfig(serverName string, verify bool, alpn []string, roots *x509.CertPool) *tls.Config {
	if roots == nil {
		roots = systemRoots
	}
	cfg := &tls.Config{
		ServerName: serverName,
		NextProtos: alpn,
		RootCAs:    roots,
	}
	switch {
	case !verify:
		cfg.InsecureSkipVerify = true
	case serverName == "":
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyChain(cs.PeerCertificates, roots)
		}
	}
	return cfg
}

// verifyChain verifies a peer chain, leaf first, against roots (nil: the
// system roots) without checking any name.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool) error {
	if len(chain) == 0 {
		return errors.New("server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: err}
	}
	return nil
}

// tlsInfo summarises a finished handshake.
func tlsInfo(cs tls.ConnectionState, verified bool) *CertInfo {
	info := NewCertInfo(cs.PeerCertificates)
	if info == nil {
		info = &CertInfo{}
	}
	info.Version = tls.VersionName(cs.Version)
	info.ALPN = cs.NegotiatedProtocol
	info.Verified = verified
	return info
}

// checkMinValid fails when the leaf certificate expires in less than minValid.
func checkMinValid(info *CertInfo, minValid time.Duration, now time.Time) error {
	if minValid <= 0 || info == nil {
		return nil
	}
	left := info.NotAfter.Sub(now)
	if left >= minValid {
		return nil
	}
	if left < 0 {
		return fmt.Errorf("certificate expired %s ago, want at least %s left", ApproxDuration(-left), ApproxDuration(minValid))
	}
	return fmt.Errorf("certificate expires in %s, want at least %s", ApproxDuration(left), ApproxDuration(minValid))
}

// expiryDetail says when the leaf expires, such as "expires 2027-03-01 (89d)".
func expiryDetail(info *CertInfo, now time.Time) string {
	if info == nil || info.NotAfter.IsZero() {
		return "no certificate"
	}
	left := info.NotAfter.Sub(now)
	day := info.NotAfter.UTC().Format(time.DateOnly)
	if left < 0 {
		return fmt.Sprintf("expired %s (%s ago)", day, ApproxDuration(-left))
	}
	return fmt.Sprintf("expires %s (%s)", day, ApproxDuration(left))
}

// ApproxDuration formats d in days and hours, or smaller units when short,
// rounded so that a certificate made "2 days" ago reads "2d" rather than
// "1d23h".
func ApproxDuration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= 10*day:
		return fmt.Sprintf("%dd", int64(math.Round(float64(d)/float64(day))))
	case d >= day:
		d = d.Round(time.Hour)
		return joinUnits(int64(d/day), "d", int64(d%day/time.Hour), "h")
	case d >= time.Hour:
		d = d.Round(time.Minute)
		return joinUnits(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "m")
	default:
		d = d.Round(time.Second)
		if d < time.Minute {
			return fmt.Sprintf("%ds", int64(d/time.Second))
		}
		return joinUnits(int64(d/time.Minute), "m", int64(d%time.Minute/time.Second), "s")
	}
}

// joinUnits writes "3d4h", or "3d" when the smaller unit is zero.
func joinUnits(big int64, bigUnit string, small int64, smallUnit string) string {
	if small == 0 {
		return fmt.Sprintf("%d%s", big, bigUnit)
	}
	return fmt.Sprintf("%d%s%d%s", big, bigUnit, small, smallUnit)
}

// tlsProber completes a TLS handshake and checks the certificate.
type tlsProber struct {
	cfg      *tls.Config
	verify   bool
	alpn     []string
	minValid time.Duration
	opts     Options
}

// newTLS builds the tls prober.
func newTLS(spec probespec.Spec, opts Options) (Prober, error) {
	return &tlsProber{
		cfg:      clientTLSConfig(spec.SNI, spec.Verify, spec.ALPN, opts.RootCAs),
		verify:   spec.Verify,
		alpn:     spec.ALPN,
		minValid: spec.MinValid,
		opts:     opts,
	}, nil
}

// Probe connects to target, completes a TLS handshake, checks ALPN and the
// leaf certificate's remaining validity, and closes with close_notify.
func (p *tlsProber) Probe(ctx context.Context, target netip.AddrPort) Result {
	return timed(ctx, func(ctx context.Context, start time.Time) Result {
		return p.probe(ctx, target, start)
	})
}

func (p *tlsProber) probe(ctx context.Context, target netip.AddrPort, start time.Time) Result {
	var res Result
	conn := connect(ctx, "tcp", p.opts, target, start, &res)
	if conn == nil {
		return res
	}
	tc := tls.Client(conn, p.cfg)
	// Close sends close_notify when the handshake finished, so the server
	// sees an orderly end rather than a reset; the deadline bounds it.
	defer func() { _ = tc.Close() }()
	if err := tc.HandshakeContext(ctx); err != nil {
		res.Outcome, res.Err = L6ERR, fmt.Errorf("tls handshake: %w", err)
		if isTimeout(err) {
			res.Outcome = L6TOUT
		}
		return res
	}
	res.Timings.TLS = time.Since(start)
	cs := tc.ConnectionState()
	res.TLS = tlsInfo(cs, p.verify)
	now := time.Now()
	res.Detail = res.TLS.Version
	if cs.NegotiatedProtocol != "" {
		res.Detail += ", " + cs.NegotiatedProtocol
	}
	res.Detail += ", " + expiryDetail(res.TLS, now)
	if len(p.alpn) > 0 && cs.NegotiatedProtocol == "" {
		res.Outcome = L6ERR
		res.Err = fmt.Errorf("server selected no ALPN protocol, offered %s", strings.Join(p.alpn, ","))
		return res
	}
	if err := checkMinValid(res.TLS, p.minValid, now); err != nil {
		res.Outcome, res.Err = L6ERR, err
		return res
	}
	res.Outcome = L6OK
	return res
}
