package main

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// report prints the run's results.
func (m controllerRun) report() {
	fmt.Println()
	fmt.Printf("pulselb controller, %d LoadBalancer Services on %d light nodes (%s)\n", *services, *lightNodes, setting())
	fmt.Printf("  Services created in        %8.1f s (client limit %.0f/s, %d in parallel, NodePorts %v)\n", m.created.Seconds(), *createQPS, *creators, *nodePorts)
	fmt.Printf("  every status set after     %8.1f s (target %s) %s\n", m.total.Seconds(), *targetTime, verdict(m.total <= *targetTime))
	fmt.Printf("  per Service, creation to status: %s\n", quantiles(m.latencies))
	fmt.Printf("  controller CPU             %8.1f s (%.2f cores on average)\n", m.cpu.Seconds(), m.cpu.Seconds()/m.total.Seconds())
	fmt.Printf("  controller peak RSS        %8d MiB (target %d MiB) %s\n", m.peakMiB, *targetRSS, verdict(m.peakMiB <= int64(*targetRSS)))
	printUsage(m.before, m.after, m.loadavg)
	if m.anchorOK {
		anchor := m.anchorEnd.Sub(m.anchorStart)
		fmt.Printf("  anchor: proxy Deployments all ready %8.1f s after the first was created (kube-controller-manager + scheduler)\n", anchor.Seconds())
		fmt.Printf("  ratio: every status / anchor = %.2f; first Deployment %.1f s after the first Service\n",
			m.total.Seconds()/anchor.Seconds(), m.anchorStart.Sub(m.start).Seconds())
	} else {
		fmt.Println("  anchor: not every proxy Deployment reported ready replicas; no ratio")
	}
	if m.metricsErr == nil {
		var writes, syncs float64
		var detail []string
		for series, v := range m.metrics {
			switch {
			case strings.HasPrefix(series, "pulselb_controller_writes_total{"):
				writes += v
				detail = append(detail, fmt.Sprintf("%s=%.0f", strings.TrimPrefix(series, "pulselb_controller_writes_total"), v))
			case strings.HasPrefix(series, `pulselb_controller_sync_duration_seconds_count{queue="services"`):
				syncs += v
			}
		}
		slices.Sort(detail)
		fmt.Printf("  controller: %.0f syncs, %.0f writes (%.1f per Service, Events not counted): %s\n",
			syncs, writes, writes/float64(*services), strings.Join(detail, " "))
	} else {
		fmt.Printf("  controller metrics: %v\n", m.metricsErr)
	}
	fmt.Printf("  controller log: %s\n", m.logPath)
}

// printUsage prints the machine's, the processes' and the API server's
// use from before to after, and the load average after.
func printUsage(before, after usage, loadavg string) {
	fmt.Printf("  machine CPU busy           %8.0f %% of %d CPUs over the run; load average after: %s\n",
		after.machine.BusyPercent(before.machine), runtime.NumCPU(), loadavg)
	fmt.Printf("  CPU by process over the run: %s\n", cpuByProcess(before.procs, after.procs))
	fmt.Printf("  API server requests over the run: %s\n", after.requests.summary(before.requests))
}

// cpuByProcess formats each process' CPU time between two processCPU
// readings, largest first.
func cpuByProcess(before, after map[string]time.Duration) string {
	type use struct {
		name string
		cpu  time.Duration
	}
	var uses []use
	for name, t := range after {
		uses = append(uses, use{name, t - before[name]})
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.cpu, a.cpu) })
	parts := make([]string, len(uses))
	for i, u := range uses {
		parts[i] = fmt.Sprintf("%s %.1f s", u.name, u.cpu.Seconds())
	}
	return strings.Join(parts, ", ")
}

// setting describes the machine and the control plane for a result's
// title.
func setting() string {
	return fmt.Sprintf("%d CPUs, %s; scheduler and controller-manager at %g requests/s", runtime.NumCPU(), runtime.Version(), *cpQPS)
}

// quantiles formats the p50, p90, p99 and max of sorted durations.
func quantiles(sorted []time.Duration) string {
	return fmt.Sprintf("p50 %.1f s, p90 %.1f s, p99 %.1f s, max %.1f s",
		quantile(sorted, 0.5).Seconds(), quantile(sorted, 0.9).Seconds(), quantile(sorted, 0.99).Seconds(), quantile(sorted, 1).Seconds())
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
