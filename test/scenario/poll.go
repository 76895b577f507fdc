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
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: not within %s", what, timeout)
		case <-t.C:
		}
	}
}
