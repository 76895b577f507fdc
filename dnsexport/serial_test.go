package dnsexport

import (
	"context"
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
