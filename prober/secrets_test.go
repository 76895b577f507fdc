package prober

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestDirSecretsRefusesSpecialFiles: a password file that is a named pipe
// or a device is an error naming it, at once: reading a pipe would block
// the probe forever, reading /dev/zero would fill memory.
func TestDirSecretsRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	for name, target := range map[string]string{"fifo": "", "zero": "/dev/zero"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, name, "password")
		var err error
		if target == "" {
			err = syscall.Mkfifo(file, 0o600)
		} else {
			err = os.Symlink(target, file)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"fifo": "is not a regular file but a named pipe", "zero": "is not a regular file but a character device"} {
		done := make(chan error, 1)
		go func() {
			_, err := DirSecrets(dir).Password(context.Background(), name)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, name, "password")+" "+want) {
				t.Errorf("Password(%s) = %v; want an error naming the file: %s", name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Password(%s) did not return within 5s", name)
		}
	}
}
