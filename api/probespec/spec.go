package probespec

import (
	"regexp"
	"slices"
	"strings"
	"time"
)

// Protocol is the first word of a probe spec.
type Protocol string

// Protocols pulselb can probe.
const (
	TCP   Protocol = "tcp"
	UDP   Protocol = "udp"
	HTTP  Protocol = "http"
	HTTPS Protocol = "https"
	TLS   Protocol = "tls"
	MySQL Protocol = "mysql"
	DNS   Protocol = "dns"
)

// Silence says what a UDP probe that gets no answer means.
type Silence uint8

// Silence values. SilenceDefault resolves to SilenceDown when the spec sets
// an expectation and to SilenceUp otherwise.
const (
	SilenceDefault Silence = iota
	SilenceUp
	SilenceDown
)

// HexPattern matches bytes against hex digits where X (or x) matches any nibble.
type HexPattern struct {
	// Value holds the nibbles to match, Mask has 0xF for every nibble that
	// must match and 0 for a wildcard. Both have the same length.
	Value, Mask []byte
}

// Match reports whether b starts with the pattern.
func (h *HexPattern) Match(b []byte) bool {
	if len(b) < len(h.Value) {
		return false
	}
	for i := range h.Value {
		if b[i]&h.Mask[i] != h.Value[i]&h.Mask[i] {
			return false
		}
	}
	return true
}

// StatusRange is an inclusive range of status codes.
type StatusRange struct{ Min, Max int }

// StatusSet is a list of accepted status codes and ranges.
type StatusSet []StatusRange

// Contains reports whether code is in the set.
func (s StatusSet) Contains(code int) bool {
	for _, r := range s {
		if code >= r.Min && code <= r.Max {
			return true
		}
	}
	return false
}

// HeaderMatch requires a response header whose value matches Value.
type HeaderMatch struct {
	Name  string
	Value *regexp.Regexp
}

// Spec is a parsed probe spec. Fields that do not apply to Protocol are
// zero. Parse fills in the defaults the grammar documents.
type Spec struct {
	Protocol Protocol

	// Interval, Timeout, Rise and Fall override the Service-level values
	// when non-zero.
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int

	// Send is written after connecting (tcp, udp); binary-safe.
	Send []byte
	// Expect is a regular expression the answer must match (tcp, udp).
	Expect *regexp.Regexp
	// ExpectHex is a byte pattern the answer must start with (tcp, udp).
	ExpectHex *HexPattern
	// Silence is what no answer means (udp).
	Silence Silence

	// Path, Method and Host shape the HTTP request; Host is also the
	// default SNI for https.
	Path   string
	Method string
	Host   string
	// Status lists the accepted HTTP status codes (default 200-399).
	Status StatusSet
	// Body must match the first 64 KiB of the response body (http).
	Body *regexp.Regexp
	// Headers must each match a response header (http).
	Headers []HeaderMatch
	// Follow makes the http probe follow redirects (up to 10).
	Follow bool

	// Verify checks the server certificate chain and name (https, tls).
	Verify bool
	// SNI is the TLS server name (https, tls).
	SNI string
	// ALPN lists the application protocols offered (tls).
	ALPN []string
	// MinValid fails the probe when the leaf certificate expires sooner (tls, https).
	MinValid time.Duration

	// User, Secret and Database are the mysql credentials; Secret names a
	// Secret whose key "password" holds the password.
	User     string
	Secret   string
	Database string

	// ProxyProtocol sends a PROXY protocol header first on every connection
	// to the target (tcp, http, https, tls, mysql): version 2's LOCAL
	// command or version 1's UNKNOWN, as a health check does.
	ProxyProtocol ProxyProtocol

	// Name, Type and Rcode describe the DNS query and the accepted rcode;
	// Answer requires at least one answer record of Type.
	Name   string
	Type   uint16
	Rcode  int
	Answer bool
}

// String returns the spec in canonical form: the protocol, then every option
// that differs from its default, in the order of the option table Parse
// reads (the protocol's options, then the common ones), quoted where
// needed. Parse(s.String()) returns a spec equal to s.
func (s Spec) String() string {
	var b strings.Builder
	b.WriteString(string(s.Protocol))
	def := defaults(s.Protocol)
	for _, key := range slices.Concat(protocolOptions[s.Protocol], commonOptions) {
		for _, value := range options[key].format(&s, &def) {
			b.WriteByte(' ')
			b.WriteString(key)
			b.WriteByte('=')
			if value == "" || strings.ContainsFunc(value, func(r rune) bool {
				return r <= ' ' || r == '"' || r >= 0x7f
			}) {
				value = quote(value)
			}
			b.WriteString(value)
		}
	}
	return b.String()
}
