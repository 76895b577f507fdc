package standalone

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.yaml.in/yaml/v3"

	"github.com/pulselb/pulselb/dnsexport"
)

const dnsTestHead = "zone: lb.example.test.\ninstance: a\n"
const dnsTestServices = "services:\n  - name: web\n    hosts: [{name: a, address: 127.0.0.11}]\n    ports: [{port: 80}]\n"

func TestConfigRateLimit(t *testing.T) {
	tests := []struct {
		name string
		dns  string
		want dnsexport.RateLimit
		err  string
	}{
		{"default: on, as in the controller", `{listen: "127.0.0.1:0"}`, dnsexport.DefaultRateLimit, ""},
		{"all set", `{listen: "127.0.0.1:0", rate-limit: {responses-per-second: 20, burst: 30, slip: 0}}`,
			dnsexport.RateLimit{ResponsesPerSecond: 20, Burst: 30, Slip: 0}, ""},
		{"burst defaults to twice the rate", `{listen: "127.0.0.1:0", rate-limit: {responses-per-second: 50}}`,
			dnsexport.RateLimit{ResponsesPerSecond: 50, Burst: 100, Slip: 2}, ""},
		{"0 turns it off", `{listen: "127.0.0.1:0", rate-limit: {responses-per-second: 0}}`, dnsexport.RateLimit{}, ""},
		{"unknown key", `{listen: "127.0.0.1:0", rate-limit: {rate: 5}}`, dnsexport.RateLimit{},
			`pulselb.yaml:3: dns.rate-limit.rate: unknown key`},
		{"negative", `{listen: "127.0.0.1:0", rate-limit: {responses-per-second: -1}}`, dnsexport.RateLimit{},
			`pulselb.yaml:3: dns.rate-limit.responses-per-second: -1 is out of range: want 0 to 1000000`},
		{"burst below one", `{listen: "127.0.0.1:0", rate-limit: {burst: 0}}`, dnsexport.RateLimit{},
			`pulselb.yaml:3: dns.rate-limit.burst: 0 is out of range: want 1 to 1000000`},
		{"not a mapping", `{listen: "127.0.0.1:0", rate-limit: 100}`, dnsexport.RateLimit{},
			`pulselb.yaml:3: dns.rate-limit: want a mapping of responses-per-second, burst, slip`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("pulselb.yaml", []byte(dnsTestHead+"dns: "+tc.dns+"\n"+dnsTestServices))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DNS.RateLimit != tc.want {
				t.Errorf("rate limit %+v, want %+v", cfg.DNS.RateLimit, tc.want)
			}
		})
	}
}

// TestRateLimitByDefault blasts one name at an instance from one source
// over UDP, as an amplification attack would: with the defaults, no more
// than the burst plus the rate over the blast's duration get an answer,
// and some limited queries get an empty truncated answer (slip) so that a
// real client retries over TCP, which still answers.
func TestRateLimitByDefault(t *testing.T) {
	h := startHosts(t, "127.0.0.202")
	dir := t.TempDir()
	in := instance{name: "solo", hosts: []string{"a=127.0.0.202"}}
	r := start(t, in.load(t, dir, h.port))
	waitFor(t, 10*time.Second, "an answer", func() bool { return answer(t, r.Runner) != nil })

	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.DNSAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const sent = 3000
	m := new(dns.Msg)
	m.SetQuestion("web.lb.example.test.", dns.TypeA)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	answered, truncated := 0, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			// The read ends 1s after the last response: the limiter
			// sends nothing for the dropped queries.
			c.SetReadDeadline(time.Now().Add(time.Second))
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Error(err)
				}
				return
			}
			resp := new(dns.Msg)
			if resp.Unpack(buf[:n]) != nil {
				continue
			}
			if resp.Truncated {
				truncated++
			} else if len(resp.Answer) > 0 {
				answered++
			}
		}
	}()
	begin := time.Now()
	for range sent {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(begin)
	<-done
	rl := dnsexport.DefaultRateLimit
	limit := rl.Burst + int(rl.ResponsesPerSecond*(elapsed.Seconds()+1)) // +1s: the drain
	t.Logf("%d queries in %s: %d answered, %d truncated", sent, elapsed, answered, truncated)
	if answered > limit {
		t.Errorf("%d of %d queries answered in %s, want at most %d (burst %d, %.0f/s)", answered, sent, elapsed, limit, rl.Burst, rl.ResponsesPerSecond)
	}
	if answered == 0 || truncated == 0 {
		t.Errorf("answered %d, truncated %d: want both (the burst answered, then limited ones truncated at slip %d)", answered, truncated, rl.Slip)
	}
	tcp := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	if resp, _, err := tcp.Exchange(m, r.DNSAddr().String()); err != nil || len(resp.Answer) == 0 {
		t.Errorf("TCP while UDP is limited: %v, %v", resp, err)
	}
}

// TestCorruptSerialFile starts an instance whose dns.serial-file holds
// no serial: like a corrupt state file, it is ignored (and logged by the
// DNS server) and the instance serves.
func TestCorruptSerialFile(t *testing.T) {
	h := startHosts(t, "127.0.0.201")
	for name, content := range map[string]string{"empty": "", "garbage": "x\x00y", "truncated": "17"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "serial"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			in := instance{name: "solo", hosts: []string{"a=127.0.0.201"}}
			cfg := in.load(t, dir, h.port)
			cfg.DNS.SerialFile = filepath.Join(dir, "serial")
			r := start(t, cfg)
			waitFor(t, 10*time.Second, "an answer", func() bool { return answer(t, r.Runner) != nil })
			soa := query(t, r.Runner, "lb.example.test.", dns.TypeSOA)
			if s := soa[0].(*dns.SOA).Serial; s < uint32(time.Now().Add(-time.Hour).Unix()) {
				t.Errorf("serial %d: want one from the clock", s)
			}
		})
	}
}

// TestConfigZoneAndHostnames is the table of zones and hostnames that
// passed the configuration check and were then never served (every
// query REFUSED, or the name dropped by the zone builder with a log line).
// Each is a configuration error naming the line and field, and the zone
// builder that runs the instance refuses the same input: what the check
// accepts is what is served.
func TestConfigZoneAndHostnames(t *testing.T) {
	const listen = "dns: {listen: \"127.0.0.1:0\"}\n"
	svc := func(name string, hostnames ...string) string {
		s := "  - name: " + name + "\n"
		if len(hostnames) > 0 {
			s += "    hostnames: [" + strings.Join(hostnames, ", ") + "]\n"
		}
		return s + "    hosts: [{name: a, address: 127.0.0.11}]\n    ports: [{port: 80}]\n"
	}
	tests := []struct {
		name string
		zone string
		// services, after "services:\n".
		services string
		want     string
		// hostname is the bad hostname of the first service, given to
		// the zone builder directly; empty for a bad zone.
		hostname string
	}{
		{"zone with a trailing space", `'lb.example.test. '`, svc("web"),
			`pulselb.yaml:1: zone: "lb.example.test. " is not a zone name: it has spaces around it`, ""},
		{"zone with a space inside", `'lb example.test'`, svc("web"),
			`pulselb.yaml:1: zone: "lb example.test" is not a zone name: label "lb example" has ' '`, ""},
		{"wildcard zone", `'*.lb.example.test'`, svc("web"),
			`pulselb.yaml:1: zone: "*.lb.example.test" is not a zone name: a zone is not a wildcard`, ""},
		{"zone with an underscore", `lb_1.example.test`, svc("web"),
			`pulselb.yaml:1: zone: "lb_1.example.test" is not a zone name: label "lb_1" has '_'`, ""},
		{"wildcard hostname", "lb.example.test.", svc("web", `"*.lb.example.test"`),
			`pulselb.yaml:6: services[0].hostnames[0]: "*.lb.example.test" is not served: wildcard names are not served`, "*.lb.example.test"},
		{"another service's name", "lb.example.test.", svc("web", "db.lb.example.test") + svc("db"),
			`pulselb.yaml:6: services[0].hostnames[0]: "db.lb.example.test" is not served: hostname already served for another service (db)`, "db.lb.example.test"},
		{"another service's hostname", "lb.example.test.", svc("web", "www.lb.example.test") + svc("db", "www.lb.example.test"),
			`pulselb.yaml:6: services[0].hostnames[0]: "www.lb.example.test" is not served: hostname already served for another service (db)`, ""},
		{"the name server's name", "lb.example.test.", svc("web", "ns.lb.example.test"),
			`pulselb.yaml:6: services[0].hostnames[0]: "ns.lb.example.test" is not served: hostname already served for another service (name server)`, "ns.lb.example.test"},
		{"a service named like the name server", "lb.example.test.", svc("ns"),
			`pulselb.yaml:5: services[0].name: "ns" is not served: ns.lb.example.test.: hostname already served for another service (name server)`, ""},
		{"a hostname with a space", "lb.example.test.", svc("web", `"w w.lb.example.test"`),
			`pulselb.yaml:6: services[0].hostnames[0]: "w w.lb.example.test" is not a hostname: label "w w" has ' '`, "w w.lb.example.test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("pulselb.yaml", []byte("zone: "+tc.zone+"\ninstance: a\n"+listen+"services:\n"+tc.services))
			if err == nil {
				t.Fatal("accepted")
			}
			if first := strings.Split(err.Error(), "\n")[0]; !strings.HasPrefix(first, tc.want) {
				t.Errorf("error\n  %s\nwant\n  %s", err, tc.want)
			}
			// The zone builder the instance runs refuses the same.
			zone := dnsexport.ZoneConfig{Origin: "lb.example.test.", NameServers: []dnsexport.NameServer{
				{Name: "ns.lb.example.test.", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}}}
			if tc.hostname == "" {
				if strings.HasPrefix(tc.want, "pulselb.yaml:1: zone:") {
					var y struct{ Zone string }
					if err := yaml.Unmarshal([]byte("zone: "+tc.zone), &y); err != nil {
						t.Fatal(err)
					}
					zone.Origin = y.Zone
					if _, _, err := dnsexport.Build(zone, nil); err == nil {
						t.Errorf("the zone builder serves zone %q", y.Zone)
					}
				}
				return
			}
			z, problems, err := dnsexport.Build(zone, []dnsexport.Service{
				{Name: "web", Hostnames: []string{tc.hostname}, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}},
				{Name: "db", IPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 1 {
				t.Errorf("zone builder problems %v, want one about %q", problems, tc.hostname)
			}
			for _, rr := range z.Records() {
				if a, ok := rr.(*dns.A); ok && strings.EqualFold(rr.Header().Name, dns.Fqdn(tc.hostname)) && a.A.String() == "192.0.2.1" {
					t.Errorf("the zone builder serves %q for web: %v", tc.hostname, rr)
				}
			}
		})
	}
}
