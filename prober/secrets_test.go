package prober

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirSecrets(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "db-probe"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "db-probe", "password"), []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := DirSecrets(dir)
	got, err := src.Password(context.Background(), "db-probe")
	if err != nil || got != "s3cret" {
		t.Fatalf("Password(db-probe) = %q, %v; want s3cret", got, err)
	}
	for _, name := range []string{"missing", "../db-probe", "..", ""} {
		_, err := src.Password(context.Background(), name)
		if err == nil {
			t.Errorf("Password(%q) succeeded, want error", name)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Password(%q) error leaks the secret: %v", name, err)
		}
	}
}
