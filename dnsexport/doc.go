// Package dnsexport owns pulselb's DNS output: the zone built from the
// healthy load-balancer IPs of Services (a pure function shared by the
// controller and standalone mode), the authoritative server that answers
// for it (UDP and TCP, NOTIFY and TSIG-authenticated zone transfers to
// secondaries, per-source response rate limiting), and the writer of
// externaldns.k8s.io/v1alpha1 DNSEndpoint objects for external-dns.
//
// dnsexport never recurses and never answers for names outside its zone.
package dnsexport
