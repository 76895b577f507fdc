package files

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "ok")
	if err := os.WriteFile(regular, []byte("42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, wantErr string
	}{
		{regular, ""},
		{big, "larger than 4 KiB, the most a test file may hold"},
		{fifo, "not a regular file but a named pipe"},
		{"/dev/zero", "not a regular file but a character device"},
		{dir, "not a regular file but a directory"},
		{filepath.Join(dir, "missing"), "no such file"},
	}
	for _, tt := range tests {
		done := make(chan error, 1)
		go func() {
			_, err := Read(tt.path, 4<<10, "a test file")
			done <- err
		}()
		select {
		case err := <-done:
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Read(%s): %v", tt.path, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path)):
				t.Errorf("Read(%s) = %v, want an error naming the file and %q", tt.path, err, tt.wantErr)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Read(%s) did not return within 5s", tt.path)
		}
	}
}
