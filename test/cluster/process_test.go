package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// procState is the state letter of /proc/PID/stat: T when stopped.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: the state follows
	// the last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0]
}

func TestPauseStopsAndContinues(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	for _, tt := range []struct {
		name      string
		cancelled bool
	}{{"for its duration", false}, {"until ctx ends", true}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := startCommand(ctx, newRecord(dir), dir, "proc", nil, "sleep", "60")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.stop(time.Second) }()
			pid := p.cmd.Process.Pid
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			d := 600 * time.Millisecond
			if tt.cancelled {
				d = time.Hour
			}
			start := time.Now()
			errc := make(chan error, 1)
			go func() { errc <- p.pause(pctx, d) }()
			stopped := false
			for time.Since(start) < 400*time.Millisecond {
				if procState(t, pid) == "T" {
					stopped = true
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !stopped {
				t.Fatalf("process state %s during the pause, want T (stopped)", procState(t, pid))
			}
			if tt.cancelled {
				cancel()
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if !tt.cancelled && took < d {
				t.Errorf("pause returned after %s, want %s", took, d)
			}
			if tt.cancelled && took > 10*time.Second {
				t.Errorf("pause returned %s after its ctx ended", took)
			}
			// SIGCONT is delivered at once; give the scheduler a moment.
			deadline := time.Now().Add(2 * time.Second)
			for procState(t, pid) == "T" {
				if time.Now().After(deadline) {
					t.Fatal("still stopped after the pause")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

func TestPauseRefusesAnExitedProcess(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	p, err := startCommand(ctx, newRecord(dir), dir, "proc", nil, "true")
	if err != nil {
		t.Fatal(err)
	}
	<-p.done
	if err := p.pause(ctx, time.Millisecond); err == nil {
		t.Error("pausing an exited process succeeded")
	}
}
