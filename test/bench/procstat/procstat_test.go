package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// TestChildren: a process this test starts is listed with its command
// line, and the test's own process is not.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	got := Children(os.Getpid())
	if argv := got[cmd.Process.Pid]; !slices.Equal(argv, []string{"sleep", "30"}) {
		t.Errorf("child %d: argv %q, want [sleep 30] (children %v)", cmd.Process.Pid, argv, got)
	}
	if _, ok := got[os.Getpid()]; ok {
		t.Errorf("the test's own process is listed among its children")
	}
}
