package scenario

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPollUntil(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		cond func(n int) (bool, error)
		want string // "" for nil, else a part of the error
	}{
		{"holds at the third check", func(n int) (bool, error) { return n == 3, nil }, ""},
		{"cond's error ends the wait", func(n int) (bool, error) { return false, boom }, "boom"},
		{"never holds", func(int) (bool, error) { return false, nil }, "timed out after 50ms waiting for the thing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := PollUntil(context.Background(), time.Millisecond, 50*time.Millisecond, "the thing", func() (bool, error) {
				n++
				return tc.cond(n)
			})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := PollUntil(ctx, time.Millisecond, time.Minute, "the thing", func() (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("with ctx done: err = %v, want context.Canceled", err)
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
		{"", 3, ""},
	} {
		if got := Tail(tc.in, tc.n); got != tc.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
