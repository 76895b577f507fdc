package dnsexport

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseFlags(t *testing.T) {
	nsTests := []struct {
		in   string
		want NameServer
		ok   bool
	}{
		{"ns.example.net", NameServer{Name: "ns.example.net"}, true},
		{"ns1.lb.example.com=192.0.2.53,2001:db8::53", NameServer{Name: "ns1.lb.example.com", Addrs: addrs("192.0.2.53", "2001:db8::53")}, true},
		{"ns1.lb.example.com=not-an-ip", NameServer{}, false},
		{"bad..name", NameServer{}, false},
	}
	for _, tc := range nsTests {
		t.Run("ns/"+tc.in, func(t *testing.T) {
			got, err := ParseNameServer(tc.in)
			if (err == nil) != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseNameServer(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
	secTests := []struct {
		in   string
		want Secondary
		ok   bool
	}{
		{"192.0.2.10:5353", Secondary{Addr: netip.MustParseAddrPort("192.0.2.10:5353")}, true},
		{"192.0.2.10/xfr", Secondary{Addr: netip.MustParseAddrPort("192.0.2.10:53"), Key: "xfr"}, true},
		{"[2001:db8::1]:53/xfr", Secondary{Addr: netip.MustParseAddrPort("[2001:db8::1]:53"), Key: "xfr"}, true},
		{"ns.example.net:53", Secondary{}, false},
	}
	for _, tc := range secTests {
		t.Run("secondary/"+tc.in, func(t *testing.T) {
			got, err := ParseSecondary(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("ParseSecondary(%q) = %v, %v", tc.in, got, err)
			}
		})
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	os.WriteFile(good, []byte(testSecret+"\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("c2hvcnQ=\n"), 0o600)
	keyTests := []struct {
		in string
		ok bool
	}{
		{"xfr:" + good, true},
		{"xfr:" + short, false},
		{"xfr:" + filepath.Join(dir, "missing"), false},
		{"xfr", false},
	}
	for _, tc := range keyTests {
		t.Run("key/"+tc.in, func(t *testing.T) {
			k, err := ReadTSIGKey(tc.in)
			if (err == nil) != tc.ok {
				t.Errorf("ReadTSIGKey(%q) = %v, %v", tc.in, k, err)
			}
			if tc.ok && k.Secret != testSecret {
				t.Errorf("secret %q", k.Secret)
			}
		})
	}
}
