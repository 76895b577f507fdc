package cluster

import "crypto/tls"

// insecureTLS is for health checks of components serving self-signed
// loopback certificates the harness did not issue.
func insecureTLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback health checks only
}
