package proxy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestBuildRules(t *testing.T) {
	tcp80 := []Port{{TCP, 80}}
	tests := []struct {
		name      string
		clusterIP string
		ports     []Port
		ranges    string
		target    NodePortTarget
		want      []string
	}{
		{
			name: "ipv4 open to all", clusterIP: "10.96.0.10", ports: tcp80,
			want: []string{
				"-t nat -A PULSELB-PREROUTING -p tcp -m tcp --dport 80 -m addrtype --dst-type LOCAL -m comment --comment pulselb TCP:80 -j DNAT --to-destination 10.96.0.10:80",
				"-t nat -A PULSELB-POSTROUTING -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s 10.96.0.10/32 -p tcp -m tcp --sport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j ACCEPT",
			},
		},
		{
			name: "ipv4 source ranges of both families", clusterIP: "10.96.0.10", ports: []Port{{UDP, 53}},
			ranges: "192.0.2.0/24,2001:db8::/32,198.51.100.7/32",
			want: []string{
				"-t nat -A PULSELB-PREROUTING -p udp -m udp --dport 53 -m addrtype --dst-type LOCAL -m comment --comment pulselb UDP:53 -j DNAT --to-destination 10.96.0.10:53",
				"-t nat -A PULSELB-POSTROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -s 192.0.2.0/24 -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s 198.51.100.7/32 -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s 10.96.0.10/32 -p udp -m udp --sport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j DROP",
			},
		},
		{
			// Kubernetes semantics: a list without IPv6 prefixes refuses
			// every IPv6 client, it does not leave IPv6 open.
			name: "ipv6 with only ipv4 ranges drops all", clusterIP: "fd00::10", ports: tcp80,
			ranges: "192.0.2.0/24",
			want: []string{
				"-t nat -A PULSELB-PREROUTING -p tcp -m tcp --dport 80 -m addrtype --dst-type LOCAL -m comment --comment pulselb TCP:80 -j DNAT --to-destination [fd00::10]:80",
				"-t nat -A PULSELB-POSTROUTING -d fd00::10/128 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -s fd00::10/128 -p tcp -m tcp --sport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -d fd00::10/128 -p tcp -m tcp --dport 80 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j DROP",
			},
		},
		{
			// externalTrafficPolicy Local: TCP:80 goes to the node's NodePort,
			// UDP:53 (no NodePort) still to the ClusterIP.
			name: "ipv4 node-port target", clusterIP: "10.96.0.10", ports: []Port{{TCP, 80}, {UDP, 53}},
			ranges: "192.0.2.0/24",
			target: NodePortTarget{NodeIP: netip.MustParseAddr("198.18.0.1"), NodePorts: map[Port]uint16{{TCP, 80}: 30080}},
			want: []string{
				"-t nat -A PULSELB-PREROUTING -p tcp -m tcp --dport 80 -m addrtype --dst-type LOCAL -m comment --comment pulselb TCP:80 -j DNAT --to-destination 198.18.0.1:30080",
				"-t nat -A PULSELB-POSTROUTING -d 198.18.0.1/32 -p tcp -m tcp --dport 30080 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -s 192.0.2.0/24 -d 198.18.0.1/32 -p tcp -m tcp --dport 30080 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s 198.18.0.1/32 -p tcp -m tcp --sport 30080 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -d 198.18.0.1/32 -p tcp -m tcp --dport 30080 -m conntrack --ctstate DNAT -m comment --comment pulselb TCP:80 -j DROP",
				"-t nat -A PULSELB-PREROUTING -p udp -m udp --dport 53 -m addrtype --dst-type LOCAL -m comment --comment pulselb UDP:53 -j DNAT --to-destination 10.96.0.10:53",
				"-t nat -A PULSELB-POSTROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -s 192.0.2.0/24 -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s 10.96.0.10/32 -p udp -m udp --sport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -d 10.96.0.10/32 -p udp -m udp --dport 53 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j DROP",
			},
		},
		{
			name: "ipv6 node-port target", clusterIP: "fd00::10", ports: []Port{{UDP, 53}},
			target: NodePortTarget{NodeIP: netip.MustParseAddr("fd00:198:18::1"), NodePorts: map[Port]uint16{{UDP, 53}: 30053}},
			want: []string{
				"-t nat -A PULSELB-PREROUTING -p udp -m udp --dport 53 -m addrtype --dst-type LOCAL -m comment --comment pulselb UDP:53 -j DNAT --to-destination [fd00:198:18::1]:30053",
				"-t nat -A PULSELB-POSTROUTING -d fd00:198:18::1/128 -p udp -m udp --dport 30053 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j MASQUERADE",
				"-t filter -A PULSELB-FORWARD -d fd00:198:18::1/128 -p udp -m udp --dport 30053 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
				"-t filter -A PULSELB-FORWARD -s fd00:198:18::1/128 -p udp -m udp --sport 30053 -m conntrack --ctstate DNAT -m comment --comment pulselb UDP:53 -j ACCEPT",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ranges, err := ParseSourceRanges(tt.ranges)
			if err != nil {
				t.Fatal(err)
			}
			rs := BuildRules(netip.MustParseAddr(tt.clusterIP), tt.ports, AllowList{Ranges: ranges}, tt.target)
			var got []string
			for _, r := range rs.Rules {
				got = append(got, r.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if len(rs.Jumps) != 3 || len(rs.Chains) != 3 {
				t.Errorf("got %d jumps and %d chains, want 3 and 3", len(rs.Jumps), len(rs.Chains))
			}
			for _, r := range rs.Rules {
				if !strings.HasPrefix(r.Name, "PULSELB-") {
					t.Errorf("rule %s is outside pulselb's chains", r)
				}
			}
		})
	}
}

// TestBuildRulesManyPorts checks that every port gets its own DNAT, and the
// FORWARD chain keeps each port's allow rules ahead of its drop rule.
func TestBuildRulesManyPorts(t *testing.T) {
	ports, err := ParsePorts("TCP:80,TCP:443,UDP:53")
	if err != nil {
		t.Fatal(err)
	}
	rs := BuildRules(netip.MustParseAddr("10.96.0.10"), ports, AllowList{Ranges: SourceRanges{netip.MustParsePrefix("192.0.2.0/24")}}, NodePortTarget{})
	var dnat int
	lastAccept, firstDrop := map[string]int{}, map[string]int{}
	for i, r := range rs.Rules {
		s := r.String()
		if strings.Contains(s, "-j DNAT") {
			dnat++
		}
		for _, p := range ports {
			if !strings.Contains(s, "--comment pulselb "+p.String()+" ") || r.Name != chainForward {
				continue
			}
			if strings.HasSuffix(s, "-j ACCEPT") {
				lastAccept[p.String()] = i
			}
			if _, ok := firstDrop[p.String()]; !ok && strings.HasSuffix(s, "-j DROP") {
				firstDrop[p.String()] = i
			}
		}
	}
	if dnat != len(ports) {
		t.Errorf("got %d DNAT rules, want %d", dnat, len(ports))
	}
	for _, p := range ports {
		if firstDrop[p.String()] < lastAccept[p.String()] {
			t.Errorf("port %s: DROP at %d precedes ACCEPT at %d", p, firstDrop[p.String()], lastAccept[p.String()])
		}
	}
}
