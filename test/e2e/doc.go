// Package e2e holds end-to-end scenarios run against the real control plane
// and simulated nodes of package cluster. They need root; `make e2e` runs them.
package e2e
