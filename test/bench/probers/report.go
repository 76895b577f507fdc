package main

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
)

func printResults(base rates, results []result) {
	fmt.Printf("\nbench/probers: %d agents, %d Services (%d proxy targets, probe interval %s, beacons %s), window %s, on %d CPUs\n",
		*agents, *services, 2**services, *probeInterval, *beaconInterval, *window, runtime.NumCPU())
	fmt.Printf("baseline (control plane alone, subtracted below): leases %.2f writes/s\n\n", base["leases"].writes)
	fmt.Println("| mode | window | resource | writes/s | writes per node per 10 s | bytes sent per write | bytes written/s | watch events/s | watch bytes/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	row := func(mode, win string, r rates) {
		for _, res := range []string{"leases", "probereports"} {
			c := r[res]
			per := 0.0
			if c.writes > 0 {
				per = c.bodyBytes / c.writes
			}
			fmt.Printf("| %s | %s | %s | %.2f | %.3f | %.0f | %.0f | %.1f | %.0f |\n", mode, win, res, c.writes,
				c.writes*10/float64(*agents), per, c.bodyBytes, c.watchEvents, c.watchBytes)
		}
	}
	for _, r := range results {
		row(r.mode, "steady", r.steady)
		row(r.mode, "failover", r.failover)
	}
	fmt.Println()
	fmt.Println("| mode | 2 of 3 vantages report the node Down after | controller CPU (cores, steady) | agent heap each | process RSS before → with agents |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %.2f s | %.3f | %.0f KiB | %d → %d MiB |\n", r.mode, r.failoverTime.Seconds(), r.controllerCPU,
			float64(r.heapPerAgent)/1024, r.rssBase>>20, r.rssAgents>>20)
	}
	fmt.Println()
	fmt.Println("| mode | window | target recomputations per agent | report writes by the agents' reason (start, heartbeat, retry; or what changed: targets, state, detail) |")
	fmt.Println("|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | steady | %.2f | %s |\n", r.mode, r.steadyRefreshes/float64(*agents), formatReasons(r.steadyReasons))
		fmt.Printf("| %s | failover | %.2f | %s |\n", r.mode, r.failoverRefreshes/float64(*agents), formatReasons(r.failoverReasons))
	}
}

func formatReasons(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}
