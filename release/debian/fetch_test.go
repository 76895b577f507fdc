package debian

import (
	"slices"
	"testing"
)

func TestMergedPath(t *testing.T) {
	for in, want := range map[string]string{"/lib/ld-linux-armhf.so.3": "/usr/lib/ld-linux-armhf.so.3", "/sbin": "/usr/sbin",
		"/usr/sbin/iptables": "/usr/sbin/iptables", "/etc/ethertypes": "/etc/ethertypes", "/library/x": "/library/x", "/lib64/x": "/usr/lib64/x"} {
		if got := mergedPath(in); got != want {
			t.Errorf("mergedPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAlternatives checks the automatic choice: per master, the
// highest-priority path with its own slaves, whatever the order.
func TestAlternatives(t *testing.T) {
	script := `#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
	update-alternatives --install /usr/sbin/tool tool /usr/sbin/tool-old 10 \
	  --slave /usr/sbin/tool-save tool-save /usr/sbin/tool-old-save
        update-alternatives \
          --install /usr/sbin/tool tool /usr/sbin/tool-new 20 \
          --slave /usr/sbin/tool-save tool-save /usr/sbin/tool-new-save
	update-alternatives --install /usr/bin/other other /usr/bin/other-a 5
	update-alternatives --remove tool /usr/sbin/tool-gone
fi
`
	var got []string
	for _, a := range chooseAlternatives(parseAlternatives(script)) {
		got = append(got, a.link+" "+a.name+" "+a.path)
	}
	want := []string{"/usr/bin/other other /usr/bin/other-a", "/usr/sbin/tool tool /usr/sbin/tool-new", "/usr/sbin/tool-save tool-save /usr/sbin/tool-new-save"}
	if !slices.Equal(got, want) {
		t.Errorf("chosen alternatives\n%q\nwant\n%q", got, want)
	}
}

func TestParseControl(t *testing.T) {
	f := parseControl("Package: libc6\nVersion: 2.36-9\nDescription: GNU C Library\n more text\nDepends: libgcc-s1\n\nPackage: second\n")
	if f["Package"] != "libc6" || f["Version"] != "2.36-9" || f["Description"] != "GNU C Library more text" || f["Depends"] != "libgcc-s1" {
		t.Errorf("parseControl = %v", f)
	}
}
