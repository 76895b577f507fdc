package dnsexport

import (
	"context"
	"testing"
	"time"
)

// TestRunStopsRightAfterStart cancels Run as soon as it starts, many
// times: Run must return every time, even when the TCP server had not
// marked itself started when the shutdown came.
func TestRunStopsRightAfterStart(t *testing.T) {
	for range 50 {
		s, err := NewServer(Config{Zone: testZoneConfig, Listen: "127.0.0.1:0", UDPSockets: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	}
}
