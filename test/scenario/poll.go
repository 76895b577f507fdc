package scenario

import (
	"context"
	"fmt"
	"time"
)

// PollInterval is how often Poll checks its condition.
const PollInterval = 200 * time.Millisecond

// Poll checks cond every PollInterval until it holds, and returns an error
// naming what when it did not within timeout or ctx ended.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	return PollEvery(ctx, PollInterval, timeout, what, cond)
}

// PollEvery is Poll checking every interval.
func PollEvery(ctx context.Context, interval, timeout time.Duration, what string, cond func() bool) error {
	return PollUntil(ctx, interval, timeout, what, func() (bool, error) { return cond(), nil })
}

// PollUntil checks cond every interval until it holds or returns an
// error, which PollUntil returns; it returns an error naming what when
// cond did not hold within timeout or ctx ended.
func PollUntil(ctx context.Context, interval, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}
