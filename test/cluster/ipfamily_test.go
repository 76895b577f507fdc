package cluster

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseIPFamilies(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tc := range []struct {
		in      string
		want    []corev1.IPFamily
		wantErr bool
	}{
		{in: "ipv4", want: []corev1.IPFamily{v4}},
		{in: "ipv4,ipv6", want: []corev1.IPFamily{v4, v6}},
		{in: "IPv6, IPv4", want: []corev1.IPFamily{v6, v4}},
		{in: "ipv6", want: []corev1.IPFamily{v6}},
		{in: "ipv4,ipv4", wantErr: true},
		{in: "ipv4,ipv6,ipv4", wantErr: true},
		{in: "ipv5", wantErr: true},
		{in: "", wantErr: true},
	} {
		got, err := ParseIPFamilies(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("ParseIPFamilies(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestAddressing checks what Kubernetes is told in each family order: a
// node's addresses and the Service ranges follow the primary family.
func TestAddressing(t *testing.T) {
	n := &simNode{internalIP4: nodeInternalIP(2), internalIP6: nodeInternalIP6(2), externalIP4: nodeExternalIP(2), externalIP6: nodeExternalIP6(2)}
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	for _, tc := range []struct {
		fams                  []corev1.IPFamily
		wantAddrs             []string
		wantServices, wantAPI string
	}{
		{nil, []string{"198.18.1.2", "198.18.2.2"}, "198.19.0.0/16", "198.18.0.1"},
		{[]corev1.IPFamily{v4, v6}, []string{"198.18.1.2", "fd00:198:18::1:2", "198.18.2.2", "fd00:198:18::2:2"}, "198.19.0.0/16,fd00:198:19::/112", "198.18.0.1"},
		{[]corev1.IPFamily{v6, v4}, []string{"fd00:198:18::1:2", "198.18.1.2", "fd00:198:18::2:2", "198.18.2.2"}, "fd00:198:19::/112,198.19.0.0/16", "fd00:198:18::1"},
		{[]corev1.IPFamily{v6}, []string{"fd00:198:18::1:2", "fd00:198:18::2:2"}, "fd00:198:19::/112", "fd00:198:18::1"},
	} {
		o := &Options{IPFamilies: tc.fams}
		var got []string
		for _, a := range o.nodeAddresses(n) {
			got = append(got, a.Address)
		}
		if !slices.Equal(got, tc.wantAddrs) {
			t.Errorf("%v: node addresses %v, want %v", tc.fams, got, tc.wantAddrs)
		}
		if got := o.serviceCIDRs(); got != tc.wantServices {
			t.Errorf("%v: service CIDRs %q, want %q", tc.fams, got, tc.wantServices)
		}
		if got := o.apiServerIP(); got != tc.wantAPI {
			t.Errorf("%v: API server on %q, want %q", tc.fams, got, tc.wantAPI)
		}
	}
}

func TestPodIP6(t *testing.T) {
	for in, want := range map[string]string{
		"198.18.129.2":  "fd00:198:18:101::2", // node-1's pod CIDR
		"198.18.191.17": "fd00:198:18:163::17",
		"198.18.192.2":  "fd00:198:18:1192::2", // a light node's pod
		"not an IP":     "",
	} {
		if got := podIP6(in); got != want {
			t.Errorf("podIP6(%q) = %q, want %q", in, got, want)
		}
	}
}
