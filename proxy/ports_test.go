package proxy

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParsePorts(t *testing.T) {
	tests := []struct {
		in      string
		want    []Port
		wantErr string
	}{
		{in: "TCP:80", want: []Port{{TCP, 80}}},
		{in: "tcp:80, UDP:53,udp:65535", want: []Port{{TCP, 80}, {UDP, 53}, {UDP, 65535}}},
		{in: "TCP:53,UDP:53", want: []Port{{TCP, 53}, {UDP, 53}}},
		{in: "", wantErr: "no ports"},
		{in: "80", wantErr: `port "80": want PROTOCOL:PORT`},
		{in: "SCTP:80", wantErr: `protocol "SCTP" is not TCP or UDP`},
		{in: "TCP:0", wantErr: `"0" is not a number from 1 to 65535`},
		{in: "TCP:65536", wantErr: `"65536" is not a number`},
		{in: "TCP:http", wantErr: `"http" is not a number`},
		{in: "TCP:80,tcp:80", wantErr: `port "tcp:80": listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePorts(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePorts(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParsePorts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSourceRanges(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		allowed []string
		refused []string
		wantErr string
	}{
		{name: "empty allows all", in: "", allowed: []string{"192.0.2.1", "2001:db8::1"}},
		{name: "ipv4 only refuses ipv6", in: "192.0.2.0/24",
			allowed: []string{"192.0.2.1", "::ffff:192.0.2.9"}, refused: []string{"192.0.3.1", "2001:db8::1"}},
		{name: "host bits cleared", in: "10.1.2.3/8", allowed: []string{"10.200.0.1"}, refused: []string{"11.0.0.1"}},
		{name: "both families", in: " 192.0.2.0/24 , 2001:db8::/64",
			allowed: []string{"192.0.2.1", "2001:db8::5"}, refused: []string{"2001:db9::5"}},
		{name: "bare address", in: "192.0.2.1", wantErr: `source range "192.0.2.1": want a CIDR`},
		{name: "bad length", in: "192.0.2.0/33", wantErr: `source range "192.0.2.0/33"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := ParseSourceRanges(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range tt.allowed {
				if !rs.Allows(netip.MustParseAddr(a)) {
					t.Errorf("%s refused, want allowed", a)
				}
			}
			for _, a := range tt.refused {
				if rs.Allows(netip.MustParseAddr(a)) {
					t.Errorf("%s allowed, want refused", a)
				}
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"auto", "iptables", "userspace"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseMode("ipvs"); err == nil || !strings.Contains(err.Error(), "want auto, iptables or userspace") {
		t.Errorf("ParseMode(ipvs) error = %v", err)
	}
}

func TestParseNodePorts(t *testing.T) {
	tests := []struct {
		in      string
		want    map[Port]uint16
		wantErr string
	}{
		{in: "", want: nil},
		{in: "TCP:80=30080, udp:53=30053", want: map[Port]uint16{{TCP, 80}: 30080, {UDP, 53}: 30053}},
		{in: "TCP:80", wantErr: `node-port target "TCP:80": want PROTOCOL:PORT=NODEPORT`},
		{in: "TCP:80=0", wantErr: `node-port target "TCP:80=0": NodePort "0" is not a number from 1 to 65535`},
		{in: "SCTP:80=30080", wantErr: `protocol "SCTP" is not TCP or UDP`},
		{in: "TCP:80=30080,TCP:80=30081", wantErr: "TCP:80 listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseNodePorts(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
