package probespec

import (
	"errors"
	"maps"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec string
		want Spec
	}{
		{"tcp", Spec{Protocol: TCP}},
		{"  TCP  ", Spec{Protocol: TCP}},
		{`tcp send="PING\r\n" expect=^\+PONG`, Spec{Protocol: TCP, Send: []byte("PING\r\n"), Expect: regexp.MustCompile(`^\+PONG`)}},
		{`tcp send="\x00\x01\xff" expect-hex=0001Xf`, Spec{Protocol: TCP, Send: []byte{0, 1, 0xff},
			ExpectHex: &HexPattern{Value: []byte{0x00, 0x01, 0x0f}, Mask: []byte{0xff, 0xff, 0x0f}}}},
		{"udp", Spec{Protocol: UDP}},
		{"udp send=ping expect=pong silence=up", Spec{Protocol: UDP, Send: []byte("ping"), Expect: regexp.MustCompile("pong"), Silence: SilenceUp}},
		{"http", Spec{Protocol: HTTP, Method: "GET", Path: "/", Status: StatusSet{{200, 399}}, Verify: true}},
		{`http path=/healthz method=head host=example.test:8080 status=200,204,300-302 body="ok|ready" header=Content-Type:^text/ header=X-A:b follow=true`,
			Spec{Protocol: HTTP, Method: "HEAD", Path: "/healthz", Host: "example.test:8080",
				Status: StatusSet{{200, 200}, {204, 204}, {300, 302}}, Body: regexp.MustCompile("ok|ready"),
				Headers: []HeaderMatch{{"Content-Type", regexp.MustCompile("^text/")}, {"X-A", regexp.MustCompile("b")}},
				Follow:  true, Verify: true}},
		{"https verify=false sni=api.example.test min-valid=7d", Spec{Protocol: HTTPS, Method: "GET", Path: "/",
			Status: StatusSet{{200, 399}}, Verify: false, SNI: "api.example.test", MinValid: 7 * 24 * time.Hour}},
		{"tls sni=db.example.test alpn=h2,http/1.1 min-valid=36h", Spec{Protocol: TLS, Verify: true, SNI: "db.example.test",
			ALPN: []string{"h2", "http/1.1"}, MinValid: 36 * time.Hour}},
		{"mysql", Spec{Protocol: MySQL}},
		{"mysql user=probe secret=db-probe database=app", Spec{Protocol: MySQL, User: "probe", Secret: "db-probe", Database: "app"}},
		{"dns", Spec{Protocol: DNS, Type: dns.TypeA}},
		{"dns name=example.test type=aaaa rcode=nxdomain answer=true", Spec{Protocol: DNS, Name: "example.test.", Type: dns.TypeAAAA, Rcode: dns.RcodeNameError, Answer: true}},
		{"tcp interval=5s timeout=300ms rise=3 fall=1", Spec{Protocol: TCP, Interval: 5 * time.Second, Timeout: 300 * time.Millisecond, Rise: 3, Fall: 1}},
		{"tcp\tinterval=0.5d", Spec{Protocol: TCP, Interval: 12 * time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := Parse(tt.spec)
			if err != nil {
				t.Fatalf("Parse(%q) error: %v", tt.spec, err)
			}
			if !specEqual(got, tt.want) {
				t.Errorf("Parse(%q) =\n  %#v\nwant\n  %#v", tt.spec, got, tt.want)
			}
			again, err := Parse(got.String())
			if err != nil {
				t.Fatalf("Parse(String()=%q) error: %v", got.String(), err)
			}
			if !specEqual(again, got) {
				t.Errorf("round trip through %q changed the spec", got.String())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		spec string
		want string
	}{
		{"", "empty probe spec"},
		{"htp", `unknown protocol "htp" (did you mean "http"?)`},
		{"gopher", `unknown protocol "gopher"`},
		{"path=/ http", `must start with a protocol`},
		{"http stauts=200", `unknown option "stauts" for http (did you mean "status"?)`},
		{"http hdr=A:b", `unknown option "hdr" for http`},
		{"http sttus=200", `(did you mean "status"?)`},
		{"http alpn=h2", `option "alpn" does not apply to http (it is a tls option)`},
		{"tcp silence=up", `option "silence" does not apply to tcp (it is a udp option)`},
		{"http verify=false", `option "verify" does not apply to http (it is a https option)`},
		{"http path", `option "path" has no value (want path=VALUE)`},
		{"http path=/a path=/b", `option "path" given twice`},
		{"http path=healthz", `option path="healthz": must start with "/"`},
		{"http status=200-99", `option status="200-99": "99" is not an HTTP status code`},
		{"http status=399-200", `range 399-200 is backwards`},
		{"http status=", `"" is not an HTTP status code`},
		{"http header=Content-Type", `want Name:regex`},
		{"http body=(", `bad regular expression: missing closing )`},
		{"http body=a{1000}b", `option body="a{1000}b": regular expression too large (1003 instructions, at most 256; use smaller repetition counts)`},
		{"tcp expect=(a{0,30}){30}", `option expect="(a{0,30}){30}": regular expression too large`},
		{"http header=X:[a-z]{500}", `regular expression too large`},
		{"http follow=maybe", `want "true" or "false"`},
		{"tcp expect=a expect-hex=00", `expect and expect-hex cannot be combined`},
		{"tcp expect-hex=0", `even number of hex digits`},
		{"tcp expect-hex=0g", `"g" is not a hex digit or X`},
		{`tcp send="abc`, `unterminated quote`},
		{`tcp send="a\q"`, `unknown escape \q`},
		{`tcp send="\x4"`, `bad escape \x4`}, {`tcp send="\x`, `\x needs two hex digits`},
		{`tcp send="\xzz"`, `bad escape \xzz`},
		{`tcp send="a"b`, `text after closing quote`},
		{`tcp send=a"b`, `quote inside an unquoted value`},
		{`tcp =x`, `option with no name`},
		{"tcp interval=5", `option interval="5": missing unit (such as 5s)`},
		{"tcp interval=10ms", `want between 100ms and 24h0m0s`},
		{"tcp interval=soon", `not a duration`},
		{"tls min-valid=NaNd", `not a duration`},
		{"tcp rise=0", `want a whole number from 1 to 100`},
		{"udp silence=maybe", `want "up" or "down"`},
		{"tls sni=bad_host!", `not a host name`},
		{"tls alpn=h2,", `comma-separated list`},
		{"mysql secret=Bad_Name", `not a Secret name`},
		{"mysql secret=probe", `option secret needs user`},
		{"mysql database=app", `option database needs user`},
		{"dns type=BOGUS", `not a DNS record type`},
		{"dns rcode=MAYBE", `not a DNS rcode`},
		{"dns name=a..b", `not a domain name`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			_, err := Parse(tt.spec)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want error containing %q", tt.spec, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.spec, err, tt.want)
			}
			if !errors.Is(err, ErrSpec) {
				t.Errorf("Parse(%q) error does not wrap ErrSpec", tt.spec)
			}
		})
	}
}

func TestHexPatternMatch(t *testing.T) {
	h, err := parseHexPattern("0aXXfX")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   []byte
		want bool
	}{
		{[]byte{0x0a, 0x00, 0xf0}, true},
		{[]byte{0x0a, 0xff, 0xff, 0x99}, true},
		{[]byte{0x0b, 0x00, 0xf0}, false},
		{[]byte{0x0a, 0x00, 0xe0}, false},
		{[]byte{0x0a, 0x00}, false},
	}
	for _, tt := range tests {
		if got := h.Match(tt.in); got != tt.want {
			t.Errorf("Match(% x) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	opts := []string{"method", "path", "host", "status", "body", "header"}
	for in, want := range map[string]string{
		"stauts": "status", "pth": "path", "headr": "header", "bdy": "body", "stat": "status", "zzzzzz": "",
	} {
		got := Suggest(in, opts)
		if want == "" && got != "" || want != "" && !strings.Contains(got, `"`+want+`"`) {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// specEqual compares specs, treating regular expressions by their source.
func specEqual(a, b Spec) bool {
	na, ha := normal(a)
	nb, hb := normal(b)
	return a.String() == b.String() && reflect.DeepEqual(na, nb) && reflect.DeepEqual(ha, hb)
}

func normal(s Spec) (Spec, []string) {
	s.Expect, s.Body = nil, nil
	names := make([]string, len(s.Headers))
	for i, h := range s.Headers {
		names[i] = h.Name
	}
	s.Headers = nil
	return s, names
}

// FuzzParse checks that Parse never panics, and that every spec it accepts
// formats to a canonical string that parses back to the same spec.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"tcp", `tcp send="PING\r\n" expect=^\+PONG`, "udp expect-hex=00XXff silence=down",
		"http path=/healthz status=200-299,404 header=Server:nginx", `https host=a.test verify=false min-valid=7d`,
		"tls sni=a.test alpn=h2", "mysql user=probe secret=db database=x", "dns name=a.test type=AAAA rcode=NXDOMAIN answer=true",
		`tcp send="\x00\"\\" interval=2s timeout=1s rise=3 fall=2`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err != nil {
			if !errors.Is(err, ErrSpec) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrSpec", text, err)
			}
			return
		}
		canon := s.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its canonical form %q fails: %v", text, canon, err)
		}
		if again.String() != canon {
			t.Fatalf("canonical form is not stable: %q → %q", canon, again.String())
		}
	})
}

// TestDNSTables: the record types and rcodes the grammar reads and prints
// are those of the DNS library the probe runs on.
func TestDNSTables(t *testing.T) {
	if !maps.Equal(recordTypes, dns.StringToType) {
		t.Error("recordTypes differ from dns.StringToType")
	}
	if !maps.Equal(recordTypeNames, dns.TypeToString) {
		t.Error("recordTypeNames differ from dns.TypeToString")
	}
	if !maps.Equal(rcodes, dns.StringToRcode) {
		t.Error("rcodes differ from dns.StringToRcode")
	}
	if !maps.Equal(rcodeNames, dns.RcodeToString) {
		t.Error("rcodeNames differ from dns.RcodeToString")
	}
	if typeNone != dns.TypeNone || typeA != dns.TypeA || rcodeSuccess != dns.RcodeSuccess {
		t.Error("typeNone, typeA or rcodeSuccess differ from the DNS library's")
	}
}

// TestDomainName: name= accepts exactly the names the DNS library does, and
// qualifies them as it does.
func TestDomainName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, v := range []string{
		"", ".", "a", "a.", "example.test", "EXAMPLE.test.", "a..b", ".a", "a.b..", `a\.b`, `a\`, `a\\`, `a\\\`,
		`a\065b`, `a\06`, `\`, `\\.`, long, long + "a", strings.Repeat(long+".", 4), strings.Repeat(long+".", 3) + strings.Repeat("a", 61),
		strings.Repeat(long+".", 3) + strings.Repeat("a", 62), `a\.`, `a\\.`, "a b", "*.a", "_srv._tcp.a",
	} {
		checkDomainName(t, v)
	}
}

// FuzzDomainName compares domainName with the DNS library's rules.
func FuzzDomainName(f *testing.F) {
	for _, s := range []string{"a.b", `a\065.b\.`, `\\\`, "..", strings.Repeat("ab.", 90)} {
		f.Add(s)
	}
	f.Fuzz(checkDomainName)
}

func checkDomainName(t *testing.T, v string) {
	got, err := domainName(v)
	want := ""
	if _, ok := dns.IsDomainName(v); ok && v != "" && dns.IsFqdn(dns.Fqdn(v)) {
		want = dns.Fqdn(v)
	}
	if got != want || (err == nil) != (want != "") {
		t.Errorf("domainName(%q) = %q, %v; the DNS library's rules give %q", v, got, err, want)
	}
}

func TestParseProxyProtocolOption(t *testing.T) {
	for _, tt := range []struct {
		spec    string
		want    ProxyProtocol
		errHas  string
		canonic string
	}{
		{spec: "tcp proxy-protocol=v1", want: ProxyV1, canonic: "tcp proxy-protocol=v1"},
		{spec: "https path=/x proxy-protocol=v2", want: ProxyV2, canonic: "https path=/x proxy-protocol=v2"},
		{spec: "mysql proxy-protocol=v2 user=probe", want: ProxyV2, canonic: "mysql user=probe proxy-protocol=v2"},
		{spec: "tcp proxy-protocol=v3", errHas: `option proxy-protocol="v3": want v1 or v2`},
		{spec: "tcp proxy-protocol=V2", errHas: "want v1 or v2"},
		{spec: "tcp proxy-protocol=", errHas: "want v1 or v2"},
		{spec: "udp proxy-protocol=v2", errHas: `option "proxy-protocol" does not apply to udp`},
		{spec: "dns proxy-protocol=v2", errHas: `option "proxy-protocol" does not apply to dns`},
		{spec: "tcp proxy-protocol=v1 proxy-protocol=v2", errHas: "given twice"},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			s, err := Parse(tt.spec)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || !errors.Is(err, ErrSpec) {
					t.Fatalf("error %v, want one containing %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.ProxyProtocol != tt.want || s.String() != tt.canonic {
				t.Errorf("ProxyProtocol %s, String %q; want %s, %q", s.ProxyProtocol, s.String(), tt.want, tt.canonic)
			}
		})
	}
}
