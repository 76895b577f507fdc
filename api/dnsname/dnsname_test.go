package dnsname

import (
	"strings"
	"testing"
)

func TestLabel(t *testing.T) {
	for _, tt := range []struct {
		label string
		want  string // part of the error; "" for a label
	}{
		{"a", ""},
		{"web-1", ""},
		{strings.Repeat("a", MaxLabel), ""},
		{"", "empty label"},
		{strings.Repeat("a", MaxLabel+1), "longer than 63 characters"},
		{"-a", "starts or ends with a hyphen"},
		{"a-", "starts or ends with a hyphen"},
		{"Web", `has 'W'`},
		{"a_b", `has '_'`},
		{"ü", `has 'ü'`},
	} {
		err := Label(tt.label)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Label(%q) = %v, want %q", tt.label, err, tt.want)
		}
	}
}
