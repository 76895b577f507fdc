package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestProberExternalFlagErrors: an external vantage's flags are checked
// before anything starts, exit 2, naming the flag and what it wants.
func TestProberExternalFlagErrors(t *testing.T) {
	kc := unreachableKubeconfig(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no vantage name", []string{"--external", "--kubeconfig", kc}, "--external needs --vantage-name"},
		{"no kubeconfig", []string{"--external", "--vantage-name", "vps"}, "--external needs --kubeconfig"},
		{"with a node name", []string{"--external", "--vantage-name", "vps", "--node-name", "n1", "--kubeconfig", kc}, "--node-name and --external exclude each other"},
		{"bad vantage name", []string{"--external", "--vantage-name", "My VPS", "--kubeconfig", kc}, "--vantage-name: vantage name \"My VPS\": want lower-case"},
		{"vantage name without external", []string{"--vantage-name", "vps", "--node-name", "n1"}, "--vantage-name needs --external"},
		{"neither", nil, "--node-name is required (or --external with --vantage-name)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PULSELB_NODE_NAME", "")
			var out, errOut bytes.Buffer
			code := run(append([]string{"prober", "--metrics-address", ""}, tt.args...), &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tt.want)
			}
		})
	}
}
