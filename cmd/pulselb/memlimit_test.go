package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2 limit", map[string]string{"memory.max": "268435456\n"}, 268435456, true},
		{"v2 no limit", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "201326592\n"}, 201326592, true},
		{"v1 no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"no cgroup files", nil, 0, false},
		{"garbage", map[string]string{"memory.max": "lots"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for f, content := range tt.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := cgroupMemoryLimit(root)
			if got != tt.want || ok != tt.ok {
				t.Errorf("cgroupMemoryLimit = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestSetMemoryLimit: the runtime's soft limit is 90 % of the container's,
// and GOMEMLIMIT set by the user wins.
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("268435456\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMEMLIMIT", "")
	if got := setMemoryLimit(root); got != 241591910 || debug.SetMemoryLimit(-1) != got {
		t.Errorf("soft limit %d (runtime %d), want 241591910", got, debug.SetMemoryLimit(-1))
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got := setMemoryLimit(root); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: soft limit %d, runtime %d; want both left alone", got, debug.SetMemoryLimit(-1))
	}
}
