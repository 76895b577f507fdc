package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("version: exit %d, stderr %q", code, errOut.String())
	}
	for _, want := range []string{"pulselb " + version + "\n", "commit:   ", "go:       " + runtime.Version() + "\n", "platform: " + runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version printed %q, want it to contain %q", out.String(), want)
		}
	}
	out.Reset()
	if code := run([]string{"version", "--short"}, &out, &errOut); code != 0 || out.String() != version+"\n" {
		t.Errorf("version --short: exit %d, %q; want %q", code, out.String(), version+"\n")
	}
	if code := run([]string{"version", "extra"}, &out, &errOut); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
