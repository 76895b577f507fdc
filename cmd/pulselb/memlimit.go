package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit the Go
// runtime aims to stay under. The rest is for what the runtime does not
// count (thread stacks outside the heap, page-cache pages charged to the
// cgroup) and for the time the collector needs to catch up.
const memoryLimitShare = 0.9

// cgroupMemoryLimit returns the memory limit of the cgroup mounted at root
// (cgroup v2's memory.max, else v1's memory.limit_in_bytes), and false
// when there is none.
func cgroupMemoryLimit(root string) (int64, bool) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" on v2; v1 says "no limit" with a number near 2^63.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// setMemoryLimit gives the Go runtime a soft memory limit below the
// container's, so that the collector works harder as the limit nears
// instead of the kernel's OOM killer ending the process: with the default
// GOGC alone the heap may grow to twice what is live. GOMEMLIMIT, when set,
// wins. It returns the limit set, or 0.
func setMemoryLimit(root string) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit, ok := cgroupMemoryLimit(root)
	if !ok {
		return 0
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	return soft
}
