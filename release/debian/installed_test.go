package debian

import (
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/pulselb/pulselb/release/oci"
)

// TestInstalled checks the iptables closure of this machine has what
// the proxy runs: the iptables command through its alternative, and the C
// library it links.
func TestInstalled(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian machine")
	}
	files, err := Installed("iptables")
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]oci.File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	if f := byPath["/usr/sbin/iptables"]; f.Link != "/etc/alternatives/iptables" {
		t.Errorf("/usr/sbin/iptables = %+v, want a link to its alternative", f.Link)
	}
	if f := byPath["/etc/alternatives/iptables"]; f.Link == "" {
		t.Errorf("/etc/alternatives/iptables missing")
	}
	if f := byPath["/usr/lib/x86_64-linux-gnu/libc.so.6"]; len(f.Data) == 0 && f.Link == "" {
		t.Errorf("libc.so.6 missing")
	}
	if f := byPath["/lib"]; f.Link != "usr/lib" {
		t.Errorf("/lib = %+v, want the merged-/usr link", f.Link)
	}
	for p := range byPath {
		if strings.HasPrefix(p, "/usr/share/doc/") {
			t.Errorf("documentation %s in the image", p)
		}
	}
	if err := (oci.Image{Name: "a:b", Files: files}).WriteArchive(io.Discard); err != nil {
		t.Fatal(err)
	}
}

func TestParseDepends(t *testing.T) {
	got := parseDepends("libc6 (>= 2.34), libmnl0 (>= 1.0.3-4~), a | b, python3:any, ")
	if want := []string{"libc6", "libmnl0", "a", "python3"}; !slices.Equal(got, want) {
		t.Errorf("parseDepends = %v, want %v", got, want)
	}
}
