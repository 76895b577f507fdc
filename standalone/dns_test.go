package standalone

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

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
