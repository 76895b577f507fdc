// Package procstat reads the CPU and memory figures the benchmarks report
// from /proc: the machine's busy share, a process's CPU time, its peak RSS
// and its children.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Machine is the first line of /proc/stat: busy and total ticks of all
// CPUs.
type Machine struct{ busy, total int64 }

// ReadMachine reads /proc/stat.
func ReadMachine() (Machine, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return Machine{}, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var m Machine
	// user nice system idle iowait irq softirq steal; guest time is
	// already counted in user.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Machine{}, fmt.Errorf("parsing /proc/stat %q: %w", line, err)
		}
		m.total += n
		if i != 3 && i != 4 { // idle, iowait
			m.busy += n
		}
	}
	return m, nil
}

// BusyPercent is the share of CPU time that was busy between before and m.
func (m Machine) BusyPercent(before Machine) float64 {
	if m.total == before.total {
		return 0
	}
	return 100 * float64(m.busy-before.busy) / float64(m.total-before.total)
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds returns the user+system CPU time of process pid and its
// threads.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat %q", pid, b)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks, nil
}

// PeakRSSMiB returns VmHWM of process pid in MiB.
func PeakRSSMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// Children returns the command line (argv) of each child process of
// parent, by PID.
func Children(parent int) map[int][]string {
	out := map[int][]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || parentPID(pid) != parent {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // exited
		}
		out[pid] = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	}
	return out
}

// parentPID returns the parent of process pid (field 4 of
// /proc/PID/stat), or 0 when it cannot be read.
func parentPID(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
