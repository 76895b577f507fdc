// Package scenario is the kit the end-to-end scenarios (test/e2e), the
// benchmarks (test/bench) and the soak (test/soak) share, so that none of
// them copies another's helpers from a _test.go file: polling for a
// condition, listing pods, recording a Service's status as it changes,
// reading the probers' ProbeReports, installing pulselb from deploy/base,
// running `pulselb controller` as a process (StartController) and cutting
// a node off until its addresses leave the status (BlackholeNode).
package scenario
