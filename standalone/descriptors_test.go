package standalone

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestOutOfDescriptorsIsNoDownVote runs an instance that runs out of file
// descriptors (as under a flood of idle HTTP connections): every probe
// then fails to open its socket ("socket: too many open files"). That is
// the prober's failure, not the hosts': the host must stay Up and
// published, the probes be counted as SOCKERR, and probing go on when
// descriptors are free again. Before, every host went Down within a few
// probes. It runs in a child process, whose descriptor limit it lowers.
func TestOutOfDescriptorsIsNoDownVote(t *testing.T) {
	if os.Getenv("PULSELB_TEST_FD_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOutOfDescriptorsIsNoDownVote$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "PULSELB_TEST_FD_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		return
	}
	h := startHosts(t, "127.0.0.68")
	in := instance{name: "solo", hosts: []string{"a=127.0.0.68"}, interval: 100 * time.Millisecond}
	r := start(t, in.load(t, t.TempDir(), h.port))
	waitFor(t, 10*time.Second, "a up", allUp(r.Runner, "a"))

	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 512, Max: 512}); err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	t.Logf("holding %d descriptors: the process is at its limit", len(files))
	before := gatheredOutcome(t, r.Runner, "")
	waitFor(t, 10*time.Second, "20 probes at the limit", func() bool { return gatheredOutcome(t, r.Runner, "") >= before+20 })
	if n := gatheredOutcome(t, r.Runner, "SOCKERR"); n < 20 {
		t.Errorf("%v probes counted as SOCKERR, want the 20 at the limit", n)
	}
	tg := target(r.Runner, "a")
	if tg.State != "Up" {
		t.Errorf("a is %s (%s) while the instance is out of descriptors, want Up", tg.State, tg.Reason)
	}
	if pub := r.State().Services[0].Published; !slices.Equal(pub, []string{"127.0.0.68"}) {
		t.Errorf("published %v while out of descriptors, want a's 127.0.0.68", pub)
	}
	for _, f := range files {
		f.Close()
	}
	ok := gatheredOutcome(t, r.Runner, "L4OK")
	waitFor(t, 10*time.Second, "probes that run again", func() bool { return gatheredOutcome(t, r.Runner, "L4OK") >= ok+3 })
	if v := verdict(r.Runner, "a"); v != "Up" {
		t.Errorf("a is %s after descriptors were freed, want Up", v)
	}
}

// gatheredOutcome is pulselb_prober_probes_total{outcome} summed over
// protocols, or over every outcome when outcome is empty.
func gatheredOutcome(t *testing.T, r *Runner, outcome string) float64 {
	t.Helper()
	mfs, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "pulselb_prober_probes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && (outcome == "" || l.GetValue() == outcome) {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
