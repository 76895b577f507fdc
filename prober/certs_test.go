package prober

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// testCA is a certificate authority made up for a test: a self-signed root,
// or an intermediate signed by another testCA.
type testCA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// chain holds the DER of this CA and the intermediates above it, up to
	// but not including the root; empty for a root.
	chain [][]byte
	root  *x509.Certificate
}

// certOpts shapes a certificate. Zero NotBefore means an hour ago, zero
// NotAfter 90 days from now.
type certOpts struct {
	CommonName  string
	DNSNames    []string
	IPAddresses []net.IP
	NotBefore   time.Time
	NotAfter    time.Time
}

func (o certOpts) validity() (time.Time, time.Time) {
	nb, na := o.NotBefore, o.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(90 * 24 * time.Hour)
	}
	return nb, na
}

// newTestCA returns a root CA valid from an hour ago for a year.
func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key := newTestKey(t)
	nb, na := time.Now().Add(-time.Hour), time.Now().Add(365*24*time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: "pulselb test root"},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert := createCert(t, tmpl, tmpl, &key.PublicKey, key)
	return &testCA{Cert: cert, Key: key, root: cert}
}

// Pool returns a pool holding the root, for systemRoots or a tls.Config.
func (ca *testCA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.root)
	return pool
}

// Intermediate returns a CA signed by ca with o's validity period.
func (ca *testCA) Intermediate(t testing.TB, o certOpts) *testCA {
	t.Helper()
	key := newTestKey(t)
	nb, na := o.validity()
	name := o.CommonName
	if name == "" {
		name = "pulselb test intermediate"
	}
	tmpl := &x509.Certificate{
		SerialNumber:          newSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert := createCert(t, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	chain := append([][]byte{cert.Raw}, ca.chain...)
	return &testCA{Cert: cert, Key: key, chain: chain, root: ca.root}
}

// Leaf returns a server certificate signed by ca, with the intermediates
// between it and the root appended so a server sends the whole chain.
func (ca *testCA) Leaf(t testing.TB, o certOpts) tls.Certificate {
	t.Helper()
	key := newTestKey(t)
	nb, na := o.validity()
	name := o.CommonName
	if name == "" && len(o.DNSNames) > 0 {
		name = o.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: newSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    nb,
		NotAfter:     na,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPAddresses,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	cert := createCert(t, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	return tls.Certificate{
		Certificate: append([][]byte{cert.Raw}, ca.chain...),
		PrivateKey:  key,
		Leaf:        cert,
	}
}

func newTestKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}

func newSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("generating serial: %v", err)
	}
	return n
}

func createCert(t testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		t.Fatalf("creating certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	return cert
}

// useRoots makes probers built during the test verify against pool.
// Tests that call it must not run in parallel.
func useRoots(t testing.TB, pool *x509.CertPool) {
	t.Helper()
	old := systemRoots
	systemRoots = pool
	t.Cleanup(func() { systemRoots = old })
}
