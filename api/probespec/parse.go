// Package probespec holds the probe-spec grammar: the typed Spec, its
// parser (Parse) and its printer (Spec.String), both driven by one option
// table, and the bounds and defaults of a probe's timing. The Service
// contract and the probe engine both read it; it imports nothing of
// pulselb's but the DNS label rule, and no protocol library.
package probespec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pulselb/pulselb/api/dnsname"
)

// ErrSpec is wrapped by every error Parse returns.
var ErrSpec = errors.New("invalid probe spec")

// specError is a Parse error: it reads as its message and matches ErrSpec.
type specError struct{ msg string }

func (e *specError) Error() string        { return e.msg }
func (e *specError) Is(target error) bool { return target == ErrSpec }

func specErrorf(format string, args ...any) error {
	return &specError{msg: fmt.Sprintf(format, args...)}
}

// option describes one key of the grammar: how Parse reads it and how
// Spec.String prints it.
type option struct {
	// repeatable options may appear more than once.
	repeatable bool
	set        func(s *Spec, v string) error
	// format returns the values String prints for the option: none when s
	// holds def's value (def is the spec of s's protocol with no options),
	// one per occurrence otherwise.
	format func(s, def *Spec) []string
}

// shown returns the one value of an option held as a pointer, or none when
// it is nil.
func shown[T any, P interface {
	*T
	String() string
}](v P) []string {
	if v == nil {
		return nil
	}
	return []string{v.String()}
}

// value returns v as the one value of an option, or none when unset.
func value(set bool, v string) []string {
	if !set {
		return nil
	}
	return []string{v}
}

var commonOptions = []string{"interval", "timeout", "rise", "fall"}

// protocolOptions lists, in canonical order, the options of each protocol
// besides the common ones.
var protocolOptions = map[Protocol][]string{
	TCP:   {"send", "expect", "expect-hex", "proxy-protocol"},
	UDP:   {"send", "expect", "expect-hex", "silence"},
	HTTP:  {"method", "path", "host", "status", "body", "header", "follow", "proxy-protocol"},
	HTTPS: {"method", "path", "host", "status", "body", "header", "follow", "verify", "sni", "min-valid", "proxy-protocol"},
	TLS:   {"sni", "verify", "alpn", "min-valid", "proxy-protocol"},
	MySQL: {"user", "secret", "database", "proxy-protocol"},
	DNS:   {"name", "type", "rcode", "answer"},
}

// protocolNames lists the protocols in the order they are documented.
var protocolNames = []Protocol{TCP, UDP, HTTP, HTTPS, TLS, MySQL, DNS}

var options = map[string]option{
	"interval": {set: func(s *Spec, v string) error {
		d, err := parseDuration(v, MinInterval, MaxInterval)
		s.Interval = d
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Interval != 0, s.Interval.String()) }},
	"timeout": {set: func(s *Spec, v string) error {
		d, err := parseDuration(v, MinTimeout, MaxTimeout)
		s.Timeout = d
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Timeout != 0, s.Timeout.String()) }},
	"rise": {set: func(s *Spec, v string) error {
		n, err := parseCount(v)
		s.Rise = n
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Rise != 0, strconv.Itoa(s.Rise)) }},
	"fall": {set: func(s *Spec, v string) error {
		n, err := parseCount(v)
		s.Fall = n
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Fall != 0, strconv.Itoa(s.Fall)) }},
	"send": {set: func(s *Spec, v string) error {
		if len(v) > 64<<10 {
			return errors.New("longer than 64 KiB")
		}
		s.Send = []byte(v)
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.Send != nil, string(s.Send)) }},
	"expect": {set: func(s *Spec, v string) error {
		re, err := compileRegexp(v)
		s.Expect = re
		return err
	}, format: func(s, _ *Spec) []string { return shown(s.Expect) }},
	"expect-hex": {set: func(s *Spec, v string) error {
		h, err := parseHexPattern(v)
		s.ExpectHex = h
		return err
	}, format: func(s, _ *Spec) []string { return shown(s.ExpectHex) }},
	"silence": {set: func(s *Spec, v string) error {
		switch v {
		case "up":
			s.Silence = SilenceUp
		case "down":
			s.Silence = SilenceDown
		default:
			return errors.New(`want "up" or "down"`)
		}
		return nil
	}, format: func(s, _ *Spec) []string {
		switch s.Silence {
		case SilenceUp:
			return []string{"up"}
		case SilenceDown:
			return []string{"down"}
		}
		return nil
	}},
	"method": {set: func(s *Spec, v string) error {
		if v == "" || !isToken(v) {
			return errors.New("not an HTTP method")
		}
		s.Method = strings.ToUpper(v)
		return nil
	}, format: func(s, def *Spec) []string { return value(s.Method != def.Method, s.Method) }},
	"path": {set: func(s *Spec, v string) error {
		if !strings.HasPrefix(v, "/") {
			return errors.New(`must start with "/"`)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return errors.New("must not contain spaces or control characters")
		}
		if strings.Contains(v, "#") {
			return errors.New("must not contain a fragment (#)")
		}
		if strings.HasPrefix(v, "//") {
			return errors.New(`must not start with "//" (a URL reads what follows as a host name)`)
		}
		if _, err := url.Parse(v); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return fmt.Errorf("not a URL path: %w", err)
		}
		s.Path = v
		return nil
	}, format: func(s, def *Spec) []string { return value(s.Path != def.Path, s.Path) }},
	"host": {set: func(s *Spec, v string) error {
		name := v
		if h, p, err := net.SplitHostPort(v); err == nil {
			if _, err := strconv.ParseUint(p, 10, 16); err != nil {
				return fmt.Errorf("bad port %q", p)
			}
			name = h
		}
		if !isHostname(name) && net.ParseIP(name) == nil {
			return errors.New("not a host name")
		}
		s.Host = v
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.Host != "", s.Host) }},
	"status": {set: func(s *Spec, v string) error {
		set, err := parseStatusSet(v)
		s.Status = set
		return err
	}, format: func(s, def *Spec) []string { return value(s.Status.String() != def.Status.String(), s.Status.String()) }},
	"body": {set: func(s *Spec, v string) error {
		re, err := compileRegexp(v)
		s.Body = re
		return err
	}, format: func(s, _ *Spec) []string { return shown(s.Body) }},
	"header": {repeatable: true, set: func(s *Spec, v string) error {
		name, expr, ok := strings.Cut(v, ":")
		if !ok {
			return errors.New("want Name:regex")
		}
		if name == "" || !isToken(name) {
			return fmt.Errorf("%q is not a header name", name)
		}
		re, err := compileRegexp(expr)
		if err != nil {
			return err
		}
		s.Headers = append(s.Headers, HeaderMatch{Name: name, Value: re})
		return nil
	}, format: func(s, _ *Spec) []string {
		var out []string
		for _, h := range s.Headers {
			out = append(out, h.Name+":"+h.Value.String())
		}
		return out
	}},
	"follow": {set: func(s *Spec, v string) error {
		b, err := parseBool(v)
		s.Follow = b
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Follow, "true") }},
	"verify": {set: func(s *Spec, v string) error {
		b, err := parseBool(v)
		s.Verify = b
		return err
	}, format: func(s, def *Spec) []string { return value(s.Verify != def.Verify, strconv.FormatBool(s.Verify)) }},
	"sni": {set: func(s *Spec, v string) error {
		if !isHostname(v) {
			return errors.New("not a host name")
		}
		s.SNI = v
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.SNI != "", s.SNI) }},
	"alpn": {set: func(s *Spec, v string) error {
		s.ALPN = nil
		for p := range strings.SplitSeq(v, ",") {
			if p == "" || len(p) > 255 {
				return errors.New("want a comma-separated list of protocol names, such as h2,http/1.1")
			}
			s.ALPN = append(s.ALPN, p)
		}
		return nil
	}, format: func(s, _ *Spec) []string { return value(len(s.ALPN) > 0, strings.Join(s.ALPN, ",")) }},
	"min-valid": {set: func(s *Spec, v string) error {
		d, err := parseDuration(v, time.Second, 100*365*24*time.Hour)
		s.MinValid = d
		return err
	}, format: func(s, _ *Spec) []string { return value(s.MinValid != 0, s.MinValid.String()) }},
	"proxy-protocol": {set: func(s *Spec, v string) error {
		pp, err := ParseProxyProtocol(v)
		s.ProxyProtocol = pp
		return err
	}, format: func(s, _ *Spec) []string { return value(s.ProxyProtocol != ProxyNone, s.ProxyProtocol.String()) }},
	"user": {set: func(s *Spec, v string) error {
		if v == "" || utf8.RuneCountInString(v) > 80 {
			return errors.New("want 1 to 80 characters")
		}
		s.User = v
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.User != "", s.User) }},
	"secret": {set: func(s *Spec, v string) error {
		if !secretName.MatchString(v) || len(v) > 253 {
			return errors.New("not a Secret name (lower-case letters, digits, '-' and '.')")
		}
		s.Secret = v
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.Secret != "", s.Secret) }},
	"database": {set: func(s *Spec, v string) error {
		if v == "" || utf8.RuneCountInString(v) > 64 {
			return errors.New("want 1 to 64 characters")
		}
		s.Database = v
		return nil
	}, format: func(s, _ *Spec) []string { return value(s.Database != "", s.Database) }},
	"name": {set: func(s *Spec, v string) error {
		fq, err := domainName(v)
		s.Name = fq
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Name != "", s.Name) }},
	"type": {set: func(s *Spec, v string) error {
		t, ok := recordTypes[strings.ToUpper(v)]
		if !ok || t == typeNone {
			return errors.New("not a DNS record type")
		}
		s.Type = t
		return nil
	}, format: func(s, def *Spec) []string { return value(s.Type != def.Type, recordTypeNames[s.Type]) }},
	"rcode": {set: func(s *Spec, v string) error {
		r, ok := rcodes[strings.ToUpper(v)]
		if !ok {
			return errors.New("not a DNS rcode (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, ...)")
		}
		s.Rcode = r
		return nil
	}, format: func(s, def *Spec) []string { return value(s.Rcode != def.Rcode, rcodeNames[s.Rcode]) }},
	"answer": {set: func(s *Spec, v string) error {
		b, err := parseBool(v)
		s.Answer = b
		return err
	}, format: func(s, _ *Spec) []string { return value(s.Answer, "true") }},
}

var secretName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// Parse parses a probe spec such as `http path=/healthz status=200-299`.
// Errors wrap ErrSpec, name the option and, for a misspelt one, suggest the
// closest valid option.
func Parse(text string) (Spec, error) {
	words, err := split(text)
	if err != nil {
		return Spec{}, err
	}
	if len(words) == 0 {
		return Spec{}, specErrorf("empty probe spec")
	}
	proto := Protocol(strings.ToLower(words[0].key))
	if words[0].hasValue {
		return Spec{}, specErrorf("probe spec must start with a protocol (%s), not %q", joinProtocols(), words[0].raw)
	}
	allowed, ok := protocolOptions[proto]
	if !ok {
		return Spec{}, specErrorf("unknown protocol %q%s", words[0].key, Suggest(string(proto), protocolStrings()))
	}
	spec := defaults(proto)
	seen := map[string]bool{}
	for _, w := range words[1:] {
		key := strings.ToLower(w.key)
		valid := append(slices.Clone(commonOptions), allowed...)
		if !slices.Contains(valid, key) {
			if owner := optionOwner(key); owner != "" {
				return Spec{}, specErrorf("option %q does not apply to %s (it is a %s option)", w.key, proto, owner)
			}
			return Spec{}, specErrorf("unknown option %q for %s%s", w.key, proto, Suggest(key, valid))
		}
		if !w.hasValue {
			return Spec{}, specErrorf("option %q has no value (want %s=VALUE)", w.key, key)
		}
		opt := options[key]
		if seen[key] && !opt.repeatable {
			return Spec{}, specErrorf("option %q given twice", key)
		}
		seen[key] = true
		if err := opt.set(&spec, w.value); err != nil {
			return Spec{}, specErrorf("option %s=%q: %v", key, w.value, err)
		}
	}
	if seen["expect"] && seen["expect-hex"] {
		return Spec{}, specErrorf("options expect and expect-hex cannot be combined")
	}
	if proto == MySQL && spec.Secret != "" && spec.User == "" {
		return Spec{}, specErrorf("option secret needs user")
	}
	if proto == MySQL && spec.Database != "" && spec.User == "" {
		return Spec{}, specErrorf("option database needs user")
	}
	return spec, nil
}

// MustParse is Parse for specs known to be valid; it panics on error.
func MustParse(text string) Spec {
	s, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return s
}

// defaults returns the Spec of a protocol with no options.
func defaults(proto Protocol) Spec {
	s := Spec{Protocol: proto}
	switch proto {
	case HTTP, HTTPS:
		s.Method = "GET"
		s.Path = "/"
		s.Status = StatusSet{{200, 399}}
		s.Verify = true
	case TLS:
		s.Verify = true
	case DNS:
		s.Type = typeA
		s.Rcode = rcodeSuccess
	}
	return s
}

// optionOwner names a protocol that has the option, for a clearer error.
func optionOwner(key string) Protocol {
	for _, p := range protocolNames {
		if slices.Contains(protocolOptions[p], key) {
			return p
		}
	}
	return ""
}

func protocolStrings() []string {
	out := make([]string, len(protocolNames))
	for i, p := range protocolNames {
		out[i] = string(p)
	}
	return out
}

func joinProtocols() string { return strings.Join(protocolStrings(), ", ") }

// word is one whitespace-separated element of a spec.
type word struct {
	raw      string
	key      string
	value    string
	hasValue bool
}

// split tokenises a spec: words separated by blanks, each either a bare
// word or key=value where value may be double-quoted with escapes.
func split(text string) ([]word, error) {
	var words []word
	i := 0
	for {
		for i < len(text) && isBlank(text[i]) {
			i++
		}
		if i >= len(text) {
			return words, nil
		}
		start := i
		for i < len(text) && !isBlank(text[i]) && text[i] != '=' {
			if text[i] == '"' {
				return nil, specErrorf("unexpected quote in option name at offset %d", i)
			}
			i++
		}
		w := word{key: text[start:i]}
		if i < len(text) && text[i] == '=' {
			if w.key == "" {
				return nil, specErrorf("option with no name at offset %d", start)
			}
			i++
			w.hasValue = true
			if i < len(text) && text[i] == '"' {
				v, n, err := unquote(text[i:])
				if err != nil {
					return nil, specErrorf("option %s: %v", w.key, err)
				}
				i += n
				if i < len(text) && !isBlank(text[i]) {
					return nil, specErrorf("option %s: text after closing quote", w.key)
				}
				w.value = v
			} else {
				vs := i
				for i < len(text) && !isBlank(text[i]) {
					if text[i] == '"' {
						return nil, specErrorf("option %s: quote inside an unquoted value (quote the whole value)", w.key)
					}
					i++
				}
				w.value = text[vs:i]
			}
		}
		w.raw = text[start:i]
		words = append(words, w)
	}
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// unquote decodes a double-quoted value at the start of s and returns it
// with the number of bytes consumed.
func unquote(s string) (string, int, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 >= len(s) {
				return "", 0, errors.New("unterminated escape")
			}
			i++
			switch s[i] {
			case '"', '\\':
				b.WriteByte(s[i])
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'x':
				if i+2 >= len(s) {
					return "", 0, errors.New(`\x needs two hex digits`)
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", 0, fmt.Errorf(`bad escape \x%s`, s[i+1:i+3])
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				return "", 0, fmt.Errorf(`unknown escape \%c (use \", \\, \n, \r, \t or \xNN)`, s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, errors.New("unterminated quote")
}

// quote encodes v so that unquote returns it.
func quote(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// parseDuration accepts Go durations plus a "d" (day) unit, within [lo, hi].
func parseDuration(v string, lo, hi time.Duration) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(v, "d"); ok && n != "" {
		days, err := strconv.ParseFloat(n, 64)
		if err != nil || !(days >= 0 && days <= 36500) {
			return 0, errors.New("not a duration (such as 500ms, 2s, 7d)")
		}
		d = time.Duration(days * float64(24*time.Hour))
	} else {
		var err error
		d, err = time.ParseDuration(v)
		if err != nil {
			if _, nerr := strconv.ParseFloat(v, 64); nerr == nil {
				return 0, fmt.Errorf("missing unit (such as %ss)", v)
			}
			return 0, errors.New("not a duration (such as 500ms, 2s, 7d)")
		}
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("want between %v and %v", lo, hi)
	}
	return d, nil
}

func parseCount(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, errors.New("want a whole number from 1 to 100")
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, errors.New(`want "true" or "false"`)
}

func compileRegexp(v string) (*regexp.Regexp, error) {
	if v == "" {
		return nil, errors.New("empty regular expression")
	}
	re, err := regexp.Compile(v)
	if err != nil {
		var re2 *syntax.Error
		if errors.As(err, &re2) {
			return nil, fmt.Errorf("bad regular expression: %s", re2.Code)
		}
		return nil, fmt.Errorf("bad regular expression: %w", err)
	}
	if n := RegexpInsts(re); n > maxRegexpInsts {
		return nil, fmt.Errorf("regular expression too large (%d instructions, at most %d; use smaller repetition counts)", n, maxRegexpInsts)
	}
	return re, nil
}

// RegexpInsts returns the number of instructions re compiles to, which
// bounds the work of matching one byte.
func RegexpInsts(re *regexp.Regexp) int {
	// re compiled, so its text parses and compiles again.
	parsed, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// maxRegexpInsts bounds the size of a compiled expect=, body= or header=
// regular expression. Matching costs up to the program size for every byte
// of input, so a{1000}b spends half a second of CPU on a 64 KiB body; 256
// instructions (a{250}b) leave room for any realistic pattern, such as a
// UUID or a JSON field, and keep the worst case near 0.1 s.
const maxRegexpInsts = 256

// parseHexPattern parses hex digits, where X matches any nibble; blanks are
// not allowed, so write "0A0Bxx" rather than "0a 0b".
func parseHexPattern(v string) (*HexPattern, error) {
	if v == "" || len(v)%2 != 0 {
		return nil, errors.New("want an even number of hex digits (X for any nibble)")
	}
	h := &HexPattern{Value: make([]byte, len(v)/2), Mask: make([]byte, len(v)/2)}
	for i := 0; i < len(v); i++ {
		var val, mask byte
		c := v[i]
		switch {
		case c == 'X' || c == 'x':
		case c >= '0' && c <= '9':
			val, mask = c-'0', 0xF
		case c >= 'a' && c <= 'f':
			val, mask = c-'a'+10, 0xF
		case c >= 'A' && c <= 'F':
			val, mask = c-'A'+10, 0xF
		default:
			return nil, fmt.Errorf("%q is not a hex digit or X", string(c))
		}
		if i%2 == 0 {
			val, mask = val<<4, mask<<4
		}
		h.Value[i/2] |= val
		h.Mask[i/2] |= mask
	}
	return h, nil
}

// String formats the pattern as parseHexPattern reads it.
func (h *HexPattern) String() string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 2*len(h.Value))
	for i, v := range h.Value {
		for _, shift := range []uint{4, 0} {
			if (h.Mask[i]>>shift)&0xF == 0 {
				b = append(b, 'X')
			} else {
				b = append(b, digits[(v>>shift)&0xF])
			}
		}
	}
	return string(b)
}

// parseStatusSet parses "200-399" or "200,204,300-302".
func parseStatusSet(v string) (StatusSet, error) {
	var set StatusSet
	for part := range strings.SplitSeq(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseStatus(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseStatus(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, fmt.Errorf("range %s is backwards", part)
			}
		}
		set = append(set, StatusRange{a, b})
	}
	return set, nil
}

func parseStatus(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 || n > 599 {
		return 0, fmt.Errorf("%q is not an HTTP status code (100-599)", v)
	}
	return n, nil
}

// String formats the set as parseStatusSet reads it.
func (s StatusSet) String() string {
	parts := make([]string, len(s))
	for i, r := range s {
		if r.Min == r.Max {
			parts[i] = strconv.Itoa(r.Min)
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r.Min, r.Max)
		}
	}
	return strings.Join(parts, ",")
}

// isToken reports whether v is an RFC 9110 token.
func isToken(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// isHostname reports whether v is a host name a probe may send as its
// Host header or TLS server name: labels as in a hostname pulselb publishes
// (dnsname.Label), except that upper-case letters and underscores, which
// some backends' names carry, are accepted too.
func isHostname(v string) bool {
	if v == "" || len(v) > dnsname.MaxName {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(v, "."), ".") {
		if dnsname.Label(strings.Map(hostnameRune, label)) != nil {
			return false
		}
	}
	return true
}

// hostnameRune maps the characters isHostname accepts beyond a hostname's
// onto ones a hostname has.
func hostnameRune(r rune) rune {
	switch {
	case r == '_':
		return 'x'
	case r >= 'A' && r <= 'Z':
		return r + 'a' - 'A'
	}
	return r
}

// Suggest returns ` (did you mean "x"?)` for the candidate closest to word
// within a small edit distance (a swapped pair of letters is one edit, and
// a prefix of three or more letters counts as close), or "". Error messages
// about misspelt keys elsewhere use it too, so they read alike.
func Suggest(word string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		d := editDistance(word, c)
		if strings.HasPrefix(c, word) && len(word) >= 3 {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance, so a swapped pair of letters counts as one edit.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
