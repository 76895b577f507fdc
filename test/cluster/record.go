package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// recordFile is the file in a cluster directory listing, one JSON object a
// line, everything the harness made outside its own process: child process
// groups, network namespaces, links and root-namespace routes and rules.
// Teardown replays it backwards, so `pulselb-testcluster down` removes what
// a crashed or interrupted harness left behind.
const recordFile = "created.jsonl"

// currentFile, in stateDir, names the directory of the cluster that owns the
// machine-wide bridge, so a new cluster can remove a predecessor's leftovers.
const currentFile = "current"

// stateDir holds machine-wide harness state. Only one cluster can own the
// bridge and the 198.18.0.0/15 addresses at a time.
var stateDir = "/run/pulselb-testcluster"

// item is one thing the harness made.
type item struct {
	Kind string `json:"kind"` // harness, process, netns, link, route, command, kubelet-node
	// Name is the namespace or link name, or for route and iptables the
	// arguments that delete it.
	Name string   `json:"name,omitempty"`
	Args []string `json:"args,omitempty"`
	// PID is a process-group leader; Start is its start time in clock ticks,
	// so a reused pid is never signalled.
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// record appends items to a cluster directory's record file.
type record struct {
	mu   sync.Mutex
	path string
}

func newRecord(dir string) *record { return &record{path: filepath.Join(dir, recordFile)} }

func (r *record) add(it item) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := json.Marshal(it)
	if err != nil {
		return fmt.Errorf("encoding record item: %w", err)
	}
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("opening record: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing record: %w", err)
	}
	return f.Sync()
}

func readRecord(dir string) ([]item, error) {
	f, err := os.Open(filepath.Join(dir, recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening record: %w", err)
	}
	defer f.Close()
	var items []item
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it item
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			// A torn last line after a crash: everything before it still counts.
			continue
		}
		items = append(items, it)
	}
	return items, sc.Err()
}

// Teardown removes everything recorded in the cluster directory dir, newest
// first, and then the record itself. It is safe to call more than once and
// on a directory whose harness crashed.
func Teardown(ctx context.Context, dir string) error {
	logger := klog.FromContext(ctx)
	items, err := readRecord(dir)
	if err != nil {
		return err
	}
	var errs []error
	// Processes first, all of them, so nothing recreates state we remove.
	var groups []item
	for _, it := range items {
		// The harness process of a cluster left running (pulselb-testcluster
		// serve, a hung test binary) would keep writing heartbeats.
		if it.Kind == "harness" && it.PID != os.Getpid() && processAlive(it) {
			_ = syscall.Kill(it.PID, syscall.SIGKILL)
		}
	}
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Kind == "process" && processAlive(items[i]) {
			groups = append(groups, items[i])
			_ = syscall.Kill(-items[i].PID, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, g := range groups {
		for processAlive(g) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // polling for exit with a deadline
		}
		if processAlive(g) {
			_ = syscall.Kill(-g.PID, syscall.SIGKILL)
		}
	}
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		switch it.Kind {
		case "netns":
			killNetnsPIDs(it.Name)
			if netnsExists(it.Name) {
				if err := run(ctx, "ip", "netns", "delete", it.Name); err != nil {
					errs = append(errs, err)
				}
			}
		case "link":
			if linkExists(it.Name) {
				if err := run(ctx, "ip", "link", "delete", it.Name); err != nil {
					errs = append(errs, err)
				}
			}
		case "kubelet-node":
			if err := teardownKubeletNode(ctx, it); err != nil {
				errs = append(errs, err)
			}
		case "route", "iptables", "command":
			// Deleting what is already gone fails harmlessly.
			_ = run(ctx, it.Args[0], it.Args[1:]...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tearing down %s: %w", dir, err)
	}
	if err := os.Remove(filepath.Join(dir, recordFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing record: %w", err)
	}
	logger.V(2).Info("Tore down test cluster", "dir", dir, "items", len(items))
	return nil
}

// claimMachine waits (up to wait) until no other live cluster owns the
// machine, removes the leftovers of the cluster that last owned it, and
// records dir as the owner. Ownership is an flock on a file in stateDir,
// held through the returned file until Stop; the kernel releases it when
// its holder dies, so a crashed harness never blocks the next one.
func claimMachine(ctx context.Context, dir string, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", stateDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening machine lock: %w", err)
	}
	cur := filepath.Join(stateDir, currentFile)
	logged := false
	err = poll(ctx, wait, 500*time.Millisecond, func() (bool, error) {
		err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if !logged {
				owner, _ := os.ReadFile(cur)
				klog.FromContext(ctx).Info("Waiting for another test cluster to stop", "dir", strings.TrimSpace(string(owner)))
				logged = true
			}
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		lock.Close()
		owner, _ := os.ReadFile(cur)
		return nil, fmt.Errorf("another test cluster (%s) owns this machine: %w", strings.TrimSpace(string(owner)), err)
	}
	if prev, err := os.ReadFile(cur); err == nil {
		p := strings.TrimSpace(string(prev))
		if p != "" {
			klog.FromContext(ctx).Info("Removing leftovers of a previous test cluster", "dir", p)
			if err := Teardown(ctx, p); err != nil {
				lock.Close()
				return nil, fmt.Errorf("removing leftovers of previous cluster: %w", err)
			}
		}
	}
	if err := os.WriteFile(cur, []byte(dir+"\n"), 0o644); err != nil {
		lock.Close()
		return nil, fmt.Errorf("recording machine owner: %w", err)
	}
	return lock, nil
}

// processStart returns a process's start time in clock ticks from
// /proc/PID/stat, or 0 when it is gone.
func processStart(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

func processAlive(it item) bool {
	st := processStart(it.PID)
	return st != 0 && st == it.Start
}

// killNetnsPIDs kills every process still in network namespace ns.
func killNetnsPIDs(ns string) {
	out, err := output(context.Background(), "ip", "netns", "pids", ns)
	if err != nil {
		return
	}
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Leftovers lists harness-made network namespaces, links and root routes
// that still exist, and live processes recorded in dir. After Stop or
// Teardown it is empty.
func Leftovers(dir string) []string {
	var left []string
	items, _ := readRecord(dir)
	for _, it := range items {
		if it.Kind == "process" && processAlive(it) {
			left = append(left, fmt.Sprintf("process %s (pid %d)", it.Name, it.PID))
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "plt-") {
				left = append(left, "netns "+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "plt-") {
				left = append(left, "link "+e.Name())
			}
		}
	}
	for _, family := range []string{"-4", "-6"} {
		out, err := output(context.Background(), "ip", family, "route", "show")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "metric "+guardMetric) || strings.Contains(l, "via 198.18.1.") || strings.Contains(l, "via fd00:198:18::1:") {
				left = append(left, "route "+strings.TrimSpace(l))
			}
		}
	}
	return append(left, kubeletLeftovers(dir)...)
}
