package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/test/cluster"
)

// TestQuickSpecs runs the quick upstream specs (Spec.Quick) with the
// sig-network e2e binary (lbspecs) on a cluster of real kubelet nodes,
// as `make test` does; `make conformance` runs all 17 with the full
// upstream e2e.test. The binaries come from `make -C test bin
// conformance-bin` (in $PULSELB_TEST_BIN/conformance) and CoreDNS from
// $PULSELB_COREDNS.
func TestQuickSpecs(t *testing.T) {
	bin := os.Getenv("PULSELB_TEST_BIN")
	b := Binaries{
		E2ETest: filepath.Join(bin, "conformance", "lbspecs.test"),
		Kubectl: filepath.Join(bin, "conformance", "kubectl"),
		Agnhost: filepath.Join(bin, "conformance", "agnhost"),
		CoreDNS: os.Getenv("PULSELB_COREDNS"),
		Pause:   filepath.Join(bin, "static", "pulselb-pause"),
	}
	for _, p := range []string{b.E2ETest, b.Kubectl, b.Agnhost, b.CoreDNS, b.Pause} {
		if _, err := os.Stat(p); bin == "" || b.CoreDNS == "" || err != nil {
			msg := "the conformance binaries are missing (make -C test bin conformance-bin; PULSELB_COREDNS): " + p
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	specs, err := Select("", "", true)
	if err != nil {
		t.Fatal(err)
	}
	copts, err := ClusterOptions(b, "")
	if err != nil {
		t.Fatal(err)
	}
	c := cluster.ForTest(t, copts)
	var out strings.Builder
	results, err := RunOn(t.Context(), c, Options{
		Binaries: b, Specs: specs, Base: filepath.Join("..", "..", "deploy", "base"),
		SpecTimeout: 10 * time.Minute, Out: &out,
	})
	t.Logf("\n%s%s", out.String(), Summary(results))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Outcome != Passed {
			t.Errorf("%s: %s (%s)", r.Spec.Text, r.Outcome, r.Message)
		}
	}
}
