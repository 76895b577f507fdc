package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestBridgeKeepsItsMAC: a bridge made by addBridge keeps its MAC when a
// port with a lower MAC joins, while a bridge made without one takes that
// port's MAC (which is what cut a node off from the API server for 45 s:
// its ARP entry for the bridge went stale).
func TestBridgeKeepsItsMAC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx := t.Context()
	ns := fmt.Sprintf("plt-macTest-%d", os.Getpid())
	if err := run(ctx, "ip", "netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run(context.Background(), "ip", "netns", "delete", ns) })

	mac := func(link string) string {
		out, err := output(ctx, "ip", "-n", ns, "-br", "link", "show", "dev", link)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		if len(f) < 3 {
			t.Fatalf("unexpected ip -br link output %q", out)
		}
		return f[2]
	}
	// join adds a veth whose bridge end has a MAC lower than any other.
	join := func(bridge, veth string) {
		for _, s := range [][]string{
			{"ip", "-n", ns, "link", "add", veth, "address", "00:00:00:00:00:01", "type", "veth", "peer", "name", veth + "p"},
			{"ip", "-n", ns, "link", "set", veth, "master", bridge, "up"},
		} {
			if err := run(ctx, s[0], s[1:]...); err != nil {
				t.Fatal(err)
			}
		}
	}

	if err := run(ctx, "ip", "-n", ns, "link", "add", "plain", "type", "bridge"); err != nil {
		t.Fatal(err)
	}
	before := mac("plain")
	join("plain", "vplain")
	if after := mac("plain"); after == before {
		t.Fatalf("a bridge without a set MAC kept %s when a lower port joined; the kernel's rule changed and this test no longer shows the failure", after)
	}

	cmd := addBridge(ns, "fixed", 7)
	if err := run(ctx, cmd[0], cmd[1:]...); err != nil {
		t.Fatal(err)
	}
	join("fixed", "vfixed")
	if got, want := mac("fixed"), bridgeMAC(7); got != want {
		t.Errorf("bridge made by addBridge has MAC %s after a lower port joined, want %s", got, want)
	}
}
