package contract

import (
	"testing"
	"time"
)

func TestHeartbeatSeconds(t *testing.T) {
	for _, tt := range []struct {
		in   time.Duration
		want int32
	}{{0, 1}, {500 * time.Millisecond, 1}, {time.Second, 1}, {1900 * time.Millisecond, 2}, {10 * time.Second, 10}} {
		if got := HeartbeatSeconds(tt.in); got != tt.want {
			t.Errorf("HeartbeatSeconds(%s) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
