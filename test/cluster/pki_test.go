package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
)

func TestPKIIssuesCertificatesTheCAVerifies(t *testing.T) {
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.issue("apiserver", "kube-apiserver", nil, []net.IP{net.ParseIP(bridgeIP)}, []string{"kubernetes.default.svc"}); err != nil {
		t.Fatal(err)
	}
	if err := p.issue("admin", "admin", []string{"system:masters"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	tests := []struct {
		name  string
		usage x509.ExtKeyUsage
		host  string
		org   string
	}{
		{"apiserver", x509.ExtKeyUsageServerAuth, bridgeIP, ""},
		{"admin", x509.ExtKeyUsageClientAuth, "", "system:masters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := tls.LoadX509KeyPair(p.path(tt.name+".crt"), p.path(tt.name+".key"))
			if err != nil {
				t.Fatalf("loading key pair: %v", err)
			}
			leaf, err := x509.ParseCertificate(kp.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: tt.host, KeyUsages: []x509.ExtKeyUsage{tt.usage}}); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tt.org != "" && (len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != tt.org) {
				t.Errorf("organization = %v, want %s", leaf.Subject.Organization, tt.org)
			}
		})
	}
}
