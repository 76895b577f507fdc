package main

import (
	"bytes"
	"strings"
	"testing"
)

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
