package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `pulselb demo` with shortened timings and checks that its
// summary shows host b leaving the DNS answer and coming back.
func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	start := time.Now()
	code := run([]string{"demo", "--interval=200ms", "--settle=300ms", "--down=300ms", "--wait=10s"}, &out, &errOut)
	took := time.Since(start)
	t.Logf("demo output:\n%s", out.String())
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
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
	if strings.Contains(errOut.String(), "E1") {
		t.Errorf("errors logged:\n%s", errOut.String())
	}
}

func TestDemoFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--interval=10ms"}, "--interval=10ms: want at least 100ms"},
		{[]string{"--down=-1s"}, "must not be negative"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"demo"}, tt.args...), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tt.want) {
			t.Errorf("demo %v: exit %d, stderr %q; want 2 and %q", tt.args, code, errOut.String(), tt.want)
		}
	}
}
