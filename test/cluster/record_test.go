package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func TestTeardownReplaysRecordNewestFirst(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	rec := newRecord(dir)
	out := filepath.Join(dir, "order")
	for _, step := range []string{"first", "second"} {
		if err := rec.add(item{Kind: "command", Args: []string{"sh", "-c", "echo " + step + " >> " + out}}); err != nil {
			t.Fatal(err)
		}
	}
	// A torn last line, as after a crash mid-write, must not hide the rest.
	f, err := os.OpenFile(filepath.Join(dir, recordFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"kind":"comm`); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if err := Teardown(ctx, dir); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(b)), []string{"second", "first"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("teardown order = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, recordFile)); !os.IsNotExist(err) {
		t.Errorf("record not removed after teardown: %v", err)
	}
	// Idempotent: a second teardown has nothing to do.
	if err := Teardown(ctx, dir); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
}

func TestTeardownKillsRecordedProcessGroups(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	rec := newRecord(dir)
	// A shell with a child: the whole group must go.
	p, err := startCommand(ctx, rec, dir, "sleeper", nil, "sh", "-c", "sleep 300 & sleep 300; wait")
	if err != nil {
		t.Fatal(err)
	}
	items, err := readRecord(dir)
	if err != nil || len(items) != 1 || items[0].PID != p.cmd.Process.Pid || items[0].Start == 0 {
		t.Fatalf("record = %+v, %v; want the sleeper's pid and start time", items, err)
	}
	if err := Teardown(ctx, dir); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("recorded process still running after Teardown")
	}
	if left := Leftovers(dir); len(left) > 0 {
		for _, l := range left {
			if strings.HasPrefix(l, "process") {
				t.Errorf("leftover: %s", l)
			}
		}
	}
}

func TestTeardownSparesReusedPID(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	// Our own pid with a wrong start time stands for a pid reused by an
	// unrelated process: Teardown must not signal it.
	if err := newRecord(dir).add(item{Kind: "process", Name: "stale", PID: os.Getpid(), Start: processStart(os.Getpid()) + 1}); err != nil {
		t.Fatal(err)
	}
	if err := Teardown(ctx, dir); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
}

func TestClaimMachineWaitsForTheOwner(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	old := stateDir
	stateDir = t.TempDir()
	t.Cleanup(func() { stateDir = old })

	first, err := claimMachine(ctx, "/tmp/first", time.Second)
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if _, err := claimMachine(ctx, "/tmp/second", time.Second); err == nil || !strings.Contains(err.Error(), "/tmp/first") {
		t.Fatalf("second claim while the first holds the machine: err = %v, want one naming /tmp/first", err)
	}
	first.Close() // as when the first harness stops or dies
	second, err := claimMachine(ctx, "/tmp/second", time.Second)
	if err != nil {
		t.Fatalf("claim after the owner released: %v", err)
	}
	second.Close()
}
