package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/test/bench/apimetrics"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
	"github.com/pulselb/pulselb/test/bench/procstat"
)

// statusWatch records, from a watch on the API server, every status of the
// bench Services with the time this process received it.
type statusWatch struct {
	mu      sync.Mutex
	history map[string][]seen
}

type seen struct {
	at  time.Time
	ips []string
}

func newStatusWatch() *statusWatch { return &statusWatch{history: map[string][]seen{}} }

// run lists and watches the Services until ctx is done, watching again
// when a watch ends.
func (w *statusWatch) run(ctx context.Context, cs kubernetes.Interface) {
	svcs := cs.CoreV1().Services(benchNS)
	listAndWatch(ctx, func(ctx context.Context) ([]*corev1.Service, string, error) {
		l, err := svcs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		return pointers(l.Items), l.ResourceVersion, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	}, func(t watch.EventType, svc *corev1.Service, at time.Time) {
		if t == watch.Added || t == watch.Modified {
			w.add(svc, at)
		}
	})
}

func (w *statusWatch) add(svc *corev1.Service, at time.Time) {
	ips := ingressIPs(svc)
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.history[svc.Name]
	if len(h) > 0 && slices.Equal(h[len(h)-1].ips, ips) {
		return
	}
	w.history[svc.Name] = append(h, seen{at: at, ips: ips})
}

// published counts the Services published on both their proxy nodes.
func (w *statusWatch) published(l *layout) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for s, p := range l.proxies {
		h := w.history[serviceName(s)]
		if len(h) > 0 && slices.Contains(h[len(h)-1].ips, loopnodes.IP(p[0])) && slices.Contains(h[len(h)-1].ips, loopnodes.IP(p[1])) {
			n++
		}
	}
	return n
}

// firstWithout returns when svc's status first went without ip after t0.
func (w *statusWatch) firstWithout(svc, ip string, t0 time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.history[svc] {
		if s.at.After(t0) && !slices.Contains(s.ips, ip) {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (w *statusWatch) allWithout(svcs []string, ip string, t0 time.Time) bool {
	for _, s := range svcs {
		if _, ok := w.firstWithout(s, ip, t0); !ok {
			return false
		}
	}
	return true
}

// allWith says whether every one of svcs has ip in its status now.
func (w *statusWatch) allWith(svcs []string, ip string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range svcs {
		h := w.history[s]
		if len(h) == 0 || !slices.Contains(h[len(h)-1].ips, ip) {
			return false
		}
	}
	return true
}

// voteWatch records, from a watch on the ProbeReports, when each report
// starts and stops saying a target is Down: a node's beacon
// (contract.BeaconKey) or a Service port on a node (contract.TargetKey).
type voteWatch struct {
	mu     sync.Mutex
	down   map[string]map[string]bool // target -> reporter -> Down now
	events map[string][]vote          // target -> changes
}

type vote struct {
	at       time.Time
	reporter string
	down     bool
}

func newVoteWatch() *voteWatch {
	return &voteWatch{down: map[string]map[string]bool{}, events: map[string][]vote{}}
}

func (w *voteWatch) run(ctx context.Context, reports *v1alpha1.Client) {
	listAndWatch(ctx, func(ctx context.Context) ([]*v1alpha1.ProbeReport, string, error) {
		l, err := reports.List(ctx, systemNS, metav1.ListOptions{})
		if err != nil {
			return nil, "", err
		}
		return pointers(l.Items), l.ResourceVersion, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return reports.Watch(ctx, systemNS, metav1.ListOptions{ResourceVersion: rv})
	}, func(t watch.EventType, r *v1alpha1.ProbeReport, at time.Time) {
		if t == watch.Added || t == watch.Modified {
			w.add(r, at)
		}
	})
}

func (w *voteWatch) add(r *v1alpha1.ProbeReport, at time.Time) {
	now := map[string]bool{}
	for _, b := range r.Status.Beacons {
		if b.State == v1alpha1.StateDown {
			now[contract.BeaconKey(b.Node)] = true
		}
	}
	for _, res := range r.Status.Results {
		if res.State == v1alpha1.StateDown {
			now[contract.TargetKey(res.Service, res.PortProtocol, res.Port, res.Node)] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for target, m := range w.down {
		if m[r.Name] && !now[target] {
			delete(m, r.Name)
			w.events[target] = append(w.events[target], vote{at: at, reporter: r.Name})
		}
	}
	for target := range now {
		if w.down[target] == nil {
			w.down[target] = map[string]bool{}
		}
		if !w.down[target][r.Name] {
			w.down[target][r.Name] = true
			w.events[target] = append(w.events[target], vote{at: at, reporter: r.Name, down: true})
		}
	}
}

// second returns when a second report said target was Down after t0.
func (w *voteWatch) second(target string, t0 time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := map[string]bool{}
	for _, v := range w.events[target] {
		if v.down {
			set[v.reporter] = true
		} else {
			delete(set, v.reporter)
		}
		if v.at.After(t0) && len(set) >= 2 {
			return v.at, true
		}
	}
	return time.Time{}, false
}

// earliest returns the earliest of the times found, and whether any was.
func earliest(found ...func() (time.Time, bool)) (time.Time, bool) {
	var first time.Time
	for _, f := range found {
		if at, ok := f(); ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// verdictLog reads the controller's log as it grows and keeps its Down
// verdicts: the target's key and klog's header time (this machine's
// clock).
type verdictLog struct {
	path   string
	offset int64
	downs  []verdict
}

type verdict struct {
	at     time.Time
	target string
}

// read reads what the log gained since the last read.
func (v *verdictLog) read() {
	f, err := os.Open(v.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(v.offset, io.SeekStart); err != nil {
		return
	}
	rd := bufio.NewReaderSize(f, 1<<16)
	year := time.Now().Year()
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return // a partial line is read again next time
		}
		v.offset += int64(len(line))
		if !strings.Contains(line, `"Verdict changed"`) || !strings.Contains(line, `to="Down"`) || len(line) < 21 {
			continue
		}
		_, rest, _ := strings.Cut(line, ` target="`)
		target, _, _ := strings.Cut(rest, `"`)
		at, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		v.downs = append(v.downs, verdict{at: at.AddDate(year, 0, 0), target: target})
	}
}

// first returns the first Down verdict after t0 on a target whose key
// ends in suffix: "beacon@NODE" for a node's beacon, "@NODE" for its
// beacon or any of its ports.
func (v *verdictLog) first(suffix string, t0 time.Time) (time.Time, bool) {
	v.read()
	for _, d := range v.downs {
		if d.at.After(t0) && strings.HasSuffix(d.target, suffix) {
			return d.at, true
		}
	}
	return time.Time{}, false
}

// apiWrites returns the API server's write requests so far (POST, PUT,
// PATCH, DELETE) by resource and subresource.
func apiWrites(ctx context.Context, cs kubernetes.Interface) (map[string]float64, error) {
	m, err := apimetrics.Read(ctx, cs)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range m["apiserver_request_total"] {
		switch s.Labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE":
		default:
			continue
		}
		res := s.Labels["resource"]
		if sub := s.Labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[res] += s.Value
	}
	return out, nil
}

func total(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

func formatWrites(m map[string]float64) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := []string{fmt.Sprintf("total %.1f", total(m))}
	for _, k := range keys {
		if m[k] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// queueStats are the controller's own timings over a window: per queue,
// the syncs, their total time, and the time items waited in the queue.
type queueStats map[string]queueStat

type queueStat struct {
	syncs, syncSeconds, adds, waitSeconds, waits float64
}

// readQueues reads the controller's queue and sync metrics.
func readQueues(ctx context.Context, url string) (queueStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the controller's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return nil, fmt.Errorf("parsing the controller's metrics: %w", err)
	}
	out := queueStats{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			q := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" {
					q = l.GetValue()
				}
			}
			s := out[q]
			switch name {
			case "pulselb_controller_sync_duration_seconds":
				s.syncs += float64(m.GetHistogram().GetSampleCount())
				s.syncSeconds += m.GetHistogram().GetSampleSum()
			case "pulselb_controller_workqueue_queue_duration_seconds":
				s.waits += float64(m.GetHistogram().GetSampleCount())
				s.waitSeconds += m.GetHistogram().GetSampleSum()
			case "pulselb_controller_writes_total":
				q = "writes"
				s = out[q]
				s.adds += m.GetCounter().GetValue()
			case "pulselb_controller_workqueue_adds_total":
				s.adds += m.GetCounter().GetValue()
			default:
				continue
			}
			out[q] = s
		}
	}
	return out, nil
}

// writes is the controller's writes to the API server so far.
func (q queueStats) writes() float64 { return q["writes"].adds }

func (q queueStats) sub(b queueStats) queueStats {
	out := queueStats{}
	for k, a := range q {
		o := b[k]
		out[k] = queueStat{a.syncs - o.syncs, a.syncSeconds - o.syncSeconds, a.adds - o.adds, a.waitSeconds - o.waitSeconds, a.waits - o.waits}
	}
	return out
}

func (q queueStats) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(q)) {
		s := q[k]
		if k == "writes" {
			parts = append(parts, fmt.Sprintf("%.0f writes", s.adds))
			continue
		}
		if s.syncs == 0 && s.adds == 0 {
			continue
		}
		syncMean, waitMean := 0.0, 0.0
		if s.syncs > 0 {
			syncMean = s.syncSeconds / s.syncs
		}
		if s.waits > 0 {
			waitMean = s.waitSeconds / s.waits
		}
		parts = append(parts, fmt.Sprintf("queue %s: %.0f syncs, mean %.1f ms each (%.1f s in all), mean wait in queue %.1f ms",
			k, s.syncs, 1000*syncMean, s.syncSeconds, 1000*waitMean))
	}
	return strings.Join(parts, "; ")
}

// processCPU returns the CPU seconds used so far by this program and each of
// its child processes (the control plane, the controller), by name.
func processCPU() map[string]float64 {
	self := os.Getpid()
	out := map[string]float64{}
	if v, err := procstat.CPUSeconds(self); err == nil {
		out["bench (agents, cheap nodes, listeners)"] = v
	}
	for pid, argv := range procstat.Children(self) {
		name := filepath.Base(argv[0])
		if name == "pulselb" && len(argv) > 1 {
			name += " " + argv[1]
		}
		if v, err := procstat.CPUSeconds(pid); err == nil {
			out[name] += v
		}
	}
	return out
}

func formatCPU(m map[string]float64, window time.Duration) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, m[k]/window.Seconds()))
	}
	return strings.Join(parts, ", ")
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
