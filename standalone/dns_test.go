package standalone

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestCorruptSerialFile starts an instance whose dns.serial-file holds
// no serial: like a corrupt state file, it is ignored (and logged by the
// DNS server) and the instance serves.
func TestCorruptSerialFile(t *testing.T) {
	h := startHosts(t, "127.0.0.201")
	for name, content := range map[string]string{"empty": "", "garbage": "x\x00y", "truncated": "17"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "serial"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			in := instance{name: "solo", hosts: []string{"a=127.0.0.201"}}
			cfg := in.load(t, dir, h.port)
			cfg.DNS.SerialFile = filepath.Join(dir, "serial")
			r := start(t, cfg)
			waitFor(t, 10*time.Second, "an answer", func() bool { return answer(t, r.Runner) != nil })
			soa := query(t, r.Runner, "lb.example.test.", dns.TypeSOA)
			if s := soa[0].(*dns.SOA).Serial; s < uint32(time.Now().Add(-time.Hour).Unix()) {
				t.Errorf("serial %d: want one from the clock", s)
			}
		})
	}
}
