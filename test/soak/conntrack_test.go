package soak

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestLeakedConntrack(t *testing.T) {
	// conntrack 1.4.7's -L output; 198.18.130.5 and 198.18.131.5 are
	// removed proxy pods' addresses, 198.18.130.6 a proxy pod's now.
	list := `tcp      6 117 SYN_SENT src=198.18.3.1 dst=198.18.2.2 sport=40404 dport=8082 [UNREPLIED] src=198.18.130.5 dst=198.18.3.1 sport=8082 dport=40404 mark=0 use=1
udp      17 112 src=198.18.3.1 dst=198.18.2.2 sport=51234 dport=5300 src=198.18.131.5 dst=198.18.3.1 sport=5300 dport=51234 [ASSURED] mark=0 use=1
tcp      6 86398 ESTABLISHED src=198.18.3.1 dst=198.18.2.2 sport=40405 dport=80 src=198.18.130.6 dst=198.18.3.1 sport=80 dport=40405 [ASSURED] mark=0 use=1
udp      17 28 src=198.18.132.9 dst=198.18.130.5 sport=5353 dport=40001 [UNREPLIED] src=198.18.130.5 dst=198.18.132.9 sport=40001 dport=5353 mark=0 use=1
tcp      6 98 TIME_WAIT src=198.18.130.5 dst=10.96.0.40 sport=40002 dport=8080 src=198.18.132.9 dst=198.18.130.5 sport=8080 dport=40002 [ASSURED] mark=0 use=1
conntrack v1.4.7 (conntrack-tools): 5 flow entries have been shown.
`
	removed := map[string]bool{"198.18.130.5": true, "198.18.131.5": true}
	got := leakedConntrack("node-2", list, removed)
	want := []string{"sport=40404 dport=8082", "sport=51234 dport=5300"}
	if len(got) != len(want) {
		t.Fatalf("leaked %q, want the entries with %q: the DNATs to removed addresses, not a reply sent to one or a removed pod's own connection", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) || !strings.HasPrefix(got[i], "on node-2, DNATed to removed proxy address 198.18.13") {
			t.Errorf("leaked[%d] = %q, want the entry with %q", i, got[i], w)
		}
	}
}

func TestRemovedProxies(t *testing.T) {
	pod := func(name string, proxy, hostNetwork bool, ip string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pulselb-system", Name: name, Labels: map[string]string{}},
			Spec: corev1.PodSpec{HostNetwork: hostNetwork}, Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
		if proxy {
			p.Labels[labelServiceNS] = Namespace
		}
		return p
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	a := &podAddresses{store: store, proxy: map[string]bool{}}
	for _, step := range []struct {
		p    *corev1.Pod
		live bool
	}{
		{pod("pulselb-web-1", true, false, "198.18.130.5"), false},         // removed
		{pod("pulselb-web-2", true, false, "198.18.130.6"), true},          // still there
		{pod("pulselb-dns-1", true, false, "198.18.131.5"), false},         // removed, its address then a controller's
		{pod("pulselb-controller-1", false, false, "198.18.131.5"), true},  // holds it now
		{pod("pulselb-churn-1", true, false, "198.18.129.7"), false},       // removed, then a controller's that went too
		{pod("pulselb-controller-2", false, false, "198.18.129.7"), false}, // not a proxy's address any more
		{pod("pulselb-prober-1", false, true, "198.18.2.2"), true},         // the node's address
	} {
		a.saw(step.p)
		if step.live {
			if err := store.Add(step.p); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := slices.Sorted(maps.Keys(a.removedProxies()))
	if want := []string{"198.18.130.5"}; !slices.Equal(got, want) {
		t.Errorf("removed proxy addresses %v, want %v", got, want)
	}
}
