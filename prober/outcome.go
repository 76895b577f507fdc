package prober

import (
	"crypto/x509"
	"fmt"
	"time"
)

// Outcome is the typed result of one probe, named after the layer that
// decided it, as HAProxy's health checks name theirs.
type Outcome uint8

// Outcomes. The zero value is never returned by a Prober.
const (
	OutcomeUnknown Outcome = iota
	// L4OK: the transport connected (or, for UDP, nothing said no) and no
	// higher layer was asked to check anything.
	L4OK
	// L4CON: the connection was refused or reset (TCP RST, ICMP port unreachable).
	L4CON
	// L4TOUT: the transport did not connect before the deadline.
	L4TOUT
	// L4UNREACH: the host or network is unreachable (ICMP, no route).
	L4UNREACH
	// L6OK: the TLS handshake succeeded and the certificate checks passed.
	L6OK
	// L6ERR: the TLS handshake failed or a certificate check failed.
	L6ERR
	// L6TOUT: the TLS handshake did not finish before the deadline.
	L6TOUT
	// L7OK: the application answered as expected.
	L7OK
	// L7STS: the application answered with a failing status (HTTP status,
	// DNS rcode, MySQL error).
	L7STS
	// L7RSP: the application answered something that is not what was expected.
	L7RSP
	// L7TOUT: the application did not answer before the deadline.
	L7TOUT
	// SOCKERR: the prober could not open or use its own socket (out of
	// file descriptors or socket memory; see LocalFailure). It is the
	// prober's failure, not the target's: the scheduler sets it in place
	// of the outcome a Prober returned, and it counts neither for nor
	// against the target. No Prober returns it.
	SOCKERR
)

var outcomeNames = [...]string{
	OutcomeUnknown: "UNKNOWN",
	L4OK:           "L4OK",
	L4CON:          "L4CON",
	L4TOUT:         "L4TOUT",
	L4UNREACH:      "L4UNREACH",
	L6OK:           "L6OK",
	L6ERR:          "L6ERR",
	L6TOUT:         "L6TOUT",
	L7OK:           "L7OK",
	L7STS:          "L7STS",
	L7RSP:          "L7RSP",
	L7TOUT:         "L7TOUT",
	SOCKERR:        "SOCKERR",
}

// Outcomes lists every outcome a Prober can return, in order.
var Outcomes = []Outcome{L4OK, L4CON, L4TOUT, L4UNREACH, L6OK, L6ERR, L6TOUT, L7OK, L7STS, L7RSP, L7TOUT}

// String returns the outcome's name, such as "L7STS".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Up reports whether the outcome means the target works.
func (o Outcome) Up() bool { return o == L4OK || o == L6OK || o == L7OK }

// MarshalText encodes the outcome as its name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText decodes an outcome name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range outcomeNames {
		if n == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("unknown outcome %q", b)
}

// Timings are the durations of a probe's phases, each measured from the
// start of the probe. A phase that did not happen is zero.
type Timings struct {
	// Connect is when the transport connected (TCP handshake done, UDP socket connected).
	Connect time.Duration `json:"connect,omitempty"`
	// TLS is when the TLS handshake finished.
	TLS time.Duration `json:"tls,omitempty"`
	// FirstByte is when the first byte of the answer arrived.
	FirstByte time.Duration `json:"firstByte,omitempty"`
	// Total is the whole probe.
	Total time.Duration `json:"total"`
}

// CertInfo summarises the certificates a TLS server presented.
type CertInfo struct {
	Subject  string    `json:"subject"`
	Issuer   string    `json:"issuer"`
	DNSNames []string  `json:"dnsNames,omitempty"`
	NotAfter time.Time `json:"notAfter"`
	// ChainNotAfter is the earliest expiry among the other certificates the
	// server sent (intermediates); zero when it sent only the leaf.
	ChainNotAfter time.Time `json:"chainNotAfter,omitzero"`
	// Verified is true when the chain was verified against the system roots.
	Verified bool `json:"verified"`
	// Version is the negotiated TLS version, such as "TLS 1.3".
	Version string `json:"version"`
	// ALPN is the negotiated application protocol, if any.
	ALPN string `json:"alpn,omitempty"`
}

// NewCertInfo summarises a peer certificate chain, leaf first.
func NewCertInfo(chain []*x509.Certificate) *CertInfo {
	if len(chain) == 0 {
		return nil
	}
	leaf := chain[0]
	ci := &CertInfo{
		Subject:  leaf.Subject.String(),
		Issuer:   leaf.Issuer.String(),
		DNSNames: leaf.DNSNames,
		NotAfter: leaf.NotAfter,
	}
	for _, c := range chain[1:] {
		if ci.ChainNotAfter.IsZero() || c.NotAfter.Before(ci.ChainNotAfter) {
			ci.ChainNotAfter = c.NotAfter
		}
	}
	return ci
}

// Result is what one probe found.
type Result struct {
	// Outcome is never OutcomeUnknown in a Result returned by a Prober.
	Outcome Outcome `json:"outcome"`
	// Err says why the probe failed; nil when Outcome is up.
	Err error `json:"-"`
	// Detail is a short, secret-free description of what was seen, such as
	// "HTTP 200" or "rcode NOERROR, 2 answers".
	Detail  string  `json:"detail,omitempty"`
	Timings Timings `json:"timings"`
	// TLS is set by probes that completed a TLS handshake.
	TLS *CertInfo `json:"tls,omitempty"`
	// ServerVersion is set by the mysql probe from the server greeting.
	ServerVersion string `json:"serverVersion,omitempty"`
}

// Up reports whether the probe found the target working.
func (r Result) Up() bool { return r.Outcome.Up() }

// Message is the reason for a failed probe, or the detail of a good one.
func (r Result) Message() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	return r.Detail
}
