package dnsexport

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeSecondary answers NOTIFY on a loopback UDP port, ignoring the first
// `drop` messages, and reports each NOTIFY's serial.
func fakeSecondary(t *testing.T, drop int) (netip.AddrPort, <-chan uint32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	got := make(chan uint32, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:n]) != nil || m.Opcode != dns.OpcodeNotify || len(m.Answer) != 1 {
				continue
			}
			if drop > 0 {
				drop--
				continue
			}
			got <- m.Answer[0].(*dns.SOA).Serial
			r := new(dns.Msg)
			r.SetReply(m)
			b, _ := r.Pack()
			pc.WriteTo(b, from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), got
}

func TestNotifyRetries(t *testing.T) {
	sec, got := fakeSecondary(t, 2)
	metrics := NewMetrics()
	srv := startServer(t, Config{
		Secondaries:    []Secondary{{Addr: sec}},
		NotifyTimeout:  100 * time.Millisecond,
		NotifyAttempts: 4,
		Metrics:        metrics,
	}, testServices())
	select {
	case serial := <-got:
		if serial != srv.Zone().Serial() {
			t.Errorf("NOTIFY serial %d, want %d", serial, srv.Zone().Serial())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no NOTIFY acknowledged after two dropped ones")
	}
	deadline := time.Now().Add(2 * time.Second)
	for testutil.ToFloat64(metrics.Notifies.WithLabelValues("ok")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("notifies_total{ok} not 1")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

func TestNotifyGivesUp(t *testing.T) {
	sec, _ := fakeSecondary(t, 1000)
	metrics := NewMetrics()
	startServer(t, Config{
		Secondaries:    []Secondary{{Addr: sec}},
		NotifyTimeout:  50 * time.Millisecond,
		NotifyAttempts: 3,
		Metrics:        metrics,
	}, testServices())
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(metrics.Notifies.WithLabelValues("failed")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("notifies_total{failed} not 1 after the attempts ran out")
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
