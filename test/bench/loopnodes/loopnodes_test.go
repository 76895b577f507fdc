package loopnodes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestIPsAreDistinctLoopbackAddresses(t *testing.T) {
	seen := map[string]int{}
	for i := range 70000 {
		ip := net.ParseIP(IP(i))
		if ip == nil || !ip.IsLoopback() {
			t.Fatalf("IP(%d) = %q, want a loopback address", i, IP(i))
		}
		if j, dup := seen[IP(i)]; dup {
			t.Fatalf("IP(%d) = IP(%d) = %s", i, j, IP(i))
		}
		seen[IP(i)] = i
	}
}

// TestListenThenBlackhole: a node answers on its beacon and proxy ports
// until it is blackholed, then refuses them.
func TestListenThenBlackhole(t *testing.T) {
	ports := make([]int, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	n := &Node{IP: "127.0.0.1", Ports: ports[1:]}
	if err := n.Listen(t.Context(), ports[0]); err != nil {
		t.Fatal(err)
	}
	dial := func(port int) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(n.IP, strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, p := range ports {
		if err := dial(p); err != nil {
			t.Errorf("port %d before the blackhole: %v", p, err)
		}
	}
	n.Blackhole()
	for _, p := range ports {
		if err := dial(p); err == nil {
			t.Errorf("port %d answers after the blackhole", p)
		}
	}
}

// TestParallel: every index is called once; after an error no more are
// started and the error is returned.
func TestParallel(t *testing.T) {
	var calls [100]atomic.Int32
	if err := Parallel(context.Background(), 8, len(calls), func(i int) error { calls[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Errorf("f(%d) called %d times, want once", i, n)
		}
	}
	boom := errors.New("boom")
	var started atomic.Int32
	err := Parallel(context.Background(), 1, 1000, func(i int) error {
		started.Add(1)
		if i == 10 {
			return fmt.Errorf("at %d: %w", i, boom)
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
	if n := started.Load(); n != 11 {
		t.Errorf("%d calls started with one worker failing at the 11th, want 11", n)
	}
}
