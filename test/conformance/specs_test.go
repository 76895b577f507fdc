package conformance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestMissingCommands(t *testing.T) {
	log := filepath.Join(t.TempDir(), "e2e.log")
	out := "  + wget -T 5 -qO- 198.18.1.1\n  /bin/sh: 1: wget: not found\n  /bin/sh: 1: wget: not found\n  /bin/sh: nc: not found\n  curl: (7) Failed to connect\n"
	if err := os.WriteFile(log, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := missingCommands(log), []string{"wget", "nc"}; !slices.Equal(got, want) {
		t.Errorf("missingCommands = %v, want %v", got, want)
	}
}

func TestSelect(t *testing.T) {
	all, err := Select("", "", false)
	if err != nil || len(all) != 17 {
		t.Fatalf("Select all = %d specs, %v; want 17", len(all), err)
	}
	some, err := Select("session affinity", "Local", false)
	if err != nil || len(some) != 2 {
		t.Fatalf("Select(session affinity, skip Local) = %d specs, %v; want 2", len(some), err)
	}
	if _, err := Select("(", "", false); err == nil {
		t.Error("Select accepted a bad regular expression")
	}
}

func TestSelectLongLast(t *testing.T) {
	all, err := Select("", "", false)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range all {
		if s.Long && i < len(all)-2 {
			t.Errorf("long spec %q at %d of %d, want last", s.Text, i, len(all))
		}
	}
}
