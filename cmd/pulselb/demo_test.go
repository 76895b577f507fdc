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
		{[]string{"--down=-1s"}, "--down=-1s: want 0s or more, such as 3s"},
		{[]string{"--settle=-2s"}, "--settle=-2s: want 0s or more, such as 3s"},
		{[]string{"--wait", "0s"}, "--wait=0s: want more than 0s, such as 15s"},
		{[]string{"--http-listen", "nonsense"}, `--http-listen="nonsense": want IP:PORT such as 127.0.0.1:8080 (port 0 picks a free one)`},
		{[]string{"--http-listen", "localhost:80"}, `--http-listen="localhost:80": want IP:PORT`},
		{[]string{"--http-listen", "127.0.0.1:99999"}, `--http-listen="127.0.0.1:99999": want IP:PORT`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := run(append([]string{"demo"}, tt.args...), &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), tt.want) || strings.Contains(errOut.String(), "demo.yaml") {
			t.Errorf("demo %v: exit %d, stderr %q; want 2 and %q, naming the flag and no internal file", tt.args, code, errOut.String(), tt.want)
		}
	}
}
