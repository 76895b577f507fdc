package demo

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestRun runs the demo with shortened timings and checks that its
// summary shows host b leaving the DNS answer and coming back, without
// an error logged.
func TestRun(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	var out bytes.Buffer
	start := time.Now()
	err := Run(ctx, Options{
		Interval:   200 * time.Millisecond,
		Settle:     300 * time.Millisecond,
		Down:       300 * time.Millisecond,
		Wait:       10 * time.Second,
		HTTPListen: "127.0.0.1:0",
	}, &out)
	took := time.Since(start)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took > 60*time.Second {
		t.Errorf("demo took %s, more than a minute", took)
	}
	text := out.String()
	for _, re := range []string{
		`(?m)^  failover: host b left the DNS answer \d+(\.\d+)?m?s after its listeners closed`,
		`(?m)^  recovery: host b returned \d+(\.\d+)?m?s after its listeners reopened`,
		`(?m)^    before    127\.0\.0\.11 127\.0\.0\.12 127\.0\.0\.13$`,
		`(?m)^    host down 127\.0\.0\.11 127\.0\.0\.13$`,
		`(?m)^    recovered 127\.0\.0\.11 127\.0\.0\.12 127\.0\.0\.13$`,
		`web b 127\.0\.0\.12:\d+/(TCP|UDP)  Up -> Down  \(down by 1 of 1 probers: L4CON`,
		`web b 127\.0\.0\.12:\d+/(TCP|UDP)  Down -> Up`,
		`dashboard  http://127\.0\.0\.1:\d+/`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output lacks %s", re)
		}
	}
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Type == ktesting.LogError {
			t.Errorf("error logged: %s %v", e.Message, e.Err)
		}
	}
}
