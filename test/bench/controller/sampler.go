package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// sampler follows a process' CPU time and peak RSS.
type sampler struct {
	pid     int
	mu      sync.Mutex
	ticks   int64 // utime+stime, clock ticks
	rss     int64 // KiB
	peakHWM int64 // KiB
}

// run samples every period until ctx is done.
func (s *sampler) run(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(context.Context) { s.sample() }, every)
}

// sample reads /proc/PID/stat and /proc/PID/status; a process that exited
// keeps its last values.
func (s *sampler) sample() {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.pid))
	if err != nil {
		return
	}
	// Fields after the command, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	var rss, hwm int64
	if st, err := os.Open(fmt.Sprintf("/proc/%d/status", s.pid)); err == nil {
		sc := bufio.NewScanner(st)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "VmRSS":
				rss = n
			case "VmHWM":
				hwm = n
			}
		}
		st.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticks = utime + stime
	s.rss = rss
	s.peakHWM = max(s.peakHWM, hwm)
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func (s *sampler) cpu() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Duration(s.ticks) * time.Second / clockTicks
}

func (s *sampler) rssMiB() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rss / 1024
}

func (s *sampler) peakMiB() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakHWM / 1024
}

func newSampler(pid int) *sampler {
	s := &sampler{pid: pid}
	s.sample()
	return s
}
