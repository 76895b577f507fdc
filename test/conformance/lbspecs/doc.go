// Package lbspecs builds a smaller e2e binary for `make test`: Kubernetes'
// own e2e suite (k8s.io/kubernetes/test/e2e, RunE2ETests, its flags and
// framework setup) with only the sig-network specs linked in, which hold
// the [Feature:LoadBalancer] specs. The specs' code is upstream's,
// unchanged; only the set of packages compiled in is smaller than the full
// e2e.test that `make conformance` runs, so it builds in a fraction of the
// time. Build it with `go test -c`; package conformance runs it as it runs
// e2e.test.
package lbspecs
