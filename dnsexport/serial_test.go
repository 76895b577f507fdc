package dnsexport

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestServerCorruptSerialFile starts a server whose serial file is
// empty, garbage or cut short: it starts, logs a warning naming the
// file, serves a time-based serial and writes a good file.
func TestServerCorruptSerialFile(t *testing.T) {
	tests := []struct {
		name, content, why string
	}{
		{"empty", "", "empty"},
		{"garbage", "not a serial\n", "not a serial number"},
		{"binary", "\x00\xff\x13", "not a serial number"},
		{"truncated", "17648", "cut short"},
		{"too large", "99999999999\n", "not a serial number"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "serial")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			srv, err := NewServer(Config{Zone: testZoneConfig, Listen: "127.0.0.1:0", SerialFile: path})
			if err != nil {
				t.Fatalf("NewServer with a %s serial file: %v", tc.name, err)
			}
			before := uint32(time.Now().Unix())
			if _, err := srv.Update(testServices()); err != nil {
				t.Fatal(err)
			}
			if err := srv.Listen(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			r := exchange(t, "udp", srv.Addr(), query(testOrigin, dns.TypeSOA))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("SOA query: %v", r)
			}
			if got := r.Answer[0].(*dns.SOA).Serial; serialLess(got, before) {
				t.Errorf("serial %d, want a time-based serial of at least %d", got, before)
			}
			b, _ := os.ReadFile(path)
			if v, err := strconv.ParseUint(strings.TrimSuffix(string(b), "\n"), 10, 32); err != nil || uint32(v) != srv.Zone().Serial() {
				t.Errorf("serial file holds %q after the first change, want %d", b, srv.Zone().Serial())
			}
			text := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(text, "Ignoring the serial file") || !strings.Contains(text, path) || !strings.Contains(text, tc.why) {
				t.Errorf("log does not say the serial file %s was ignored and why (%q):\n%s", path, tc.why, text)
			}
		})
	}
}

// TestCorruptSerialFileAsksSecondaries: with the serial file unreadable,
// the last serial is unknown, but a secondary knows the one it holds.
// When that serial is ahead of the clock (changes came faster than one a
// second before the restart), the first serial passes it, so that the
// secondary takes the new zone.
func TestCorruptSerialFileAsksSecondaries(t *testing.T) {
	ahead := uint32(time.Now().Unix()) + 5000
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secondary := &dns.Server{PacketConn: pc, TsigProvider: keyring{"xfr.": []byte("0123456789abcdef0123456789abcdef")},
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(r)
			m.Authoritative = true
			if r.Question[0].Qtype == dns.TypeSOA && w.TsigStatus() == nil {
				m.Answer = []dns.RR{&dns.SOA{Hdr: hdr(testOrigin, dns.TypeSOA, 60), Ns: "ns1.lb.example.test.",
					Mbox: "hostmaster.lb.example.test.", Serial: ahead}}
			}
			if t := r.IsTsig(); t != nil {
				m.SetTsig(t.Hdr.Name, dns.HmacSHA256, 300, time.Now().Unix())
			}
			w.WriteMsg(m)
		})}
	go secondary.ActivateAndServe()
	t.Cleanup(func() { secondary.Shutdown() })

	path := filepath.Join(t.TempDir(), "serial")
	os.WriteFile(path, []byte("garbage"), 0o600)
	cfg := transferConfig()
	cfg.SerialFile = path
	cfg.Secondaries = []Secondary{{Addr: netip.MustParseAddrPort(pc.LocalAddr().String()), Key: "xfr"}}
	srv := startServer(t, cfg, testServices())
	if got := srv.Zone().Serial(); got != ahead+1 {
		t.Errorf("first serial %d, want %d: one past the secondary's", got, ahead+1)
	}
}

// A serial file that is a device or a named pipe is refused at once, naming
// it, instead of filling memory or blocking the start.
func TestSerialFileNotRegular(t *testing.T) {
	for _, path := range []string{"/dev/zero", t.TempDir()} {
		_, _, err := newSerials(path, time.Now)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("newSerials(%s): %v, want an error naming it", path, err)
		}
	}
}
