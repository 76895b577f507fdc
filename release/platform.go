package release

import (
	"debug/elf"
	"fmt"
	"slices"
	"strings"

	"github.com/pulselb/pulselb/release/oci"
)

// Platform is one platform a release is built for, with its names in Go,
// OCI, Debian, ELF and qemu.
type Platform struct {
	oci.Platform
	GOARCH, GOARM string
	// Debian is the Debian architecture whose iptables the image carries.
	Debian string
	// Machine and Class are what an ELF executable for it says.
	Machine elf.Machine
	Class   elf.Class
	// Loader is the program interpreter of Debian's C library for it.
	Loader string
	// QEMU is the qemu user-mode emulator (Debian's qemu-user-static) that
	// runs its executables on another machine.
	QEMU string
}

// Name is how release files name the platform: linux-amd64, linux-armv7.
func (p Platform) Name() string {
	return p.OS + "-" + p.Architecture + p.Variant
}

// Platforms are the platforms of a release: PCs and servers, and the
// 64-bit and 32-bit ARM boards (Raspberry Pi 3 and later, and the Pi 2
// and other ARMv7 boards with 32-bit systems) that K3s supports too.
var Platforms = []Platform{
	{Platform: oci.Platform{OS: "linux", Architecture: "amd64"}, GOARCH: "amd64", Debian: "amd64",
		Machine: elf.EM_X86_64, Class: elf.ELFCLASS64, Loader: "/lib64/ld-linux-x86-64.so.2", QEMU: "qemu-x86_64-static"},
	{Platform: oci.Platform{OS: "linux", Architecture: "arm64"}, GOARCH: "arm64", Debian: "arm64",
		Machine: elf.EM_AARCH64, Class: elf.ELFCLASS64, Loader: "/lib/ld-linux-aarch64.so.1", QEMU: "qemu-aarch64-static"},
	{Platform: oci.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}, GOARCH: "arm", GOARM: "7", Debian: "armhf",
		Machine: elf.EM_ARM, Class: elf.ELFCLASS32, Loader: "/lib/ld-linux-armhf.so.3", QEMU: "qemu-arm-static"},
}

// SelectPlatforms returns the Platforms named in names, a comma-separated
// list of Platform.Name values (linux-amd64,linux-arm64), in the order of
// Platforms; all of them when names is empty. `make test` builds and
// checks a release of two (the ARMv7 cross-compile is left to `make
// release` and `make release-check`).
func SelectPlatforms(names string) ([]Platform, error) {
	if strings.TrimSpace(names) == "" {
		return Platforms, nil
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(names, ",") {
		n = strings.TrimSpace(n)
		if !slices.ContainsFunc(Platforms, func(p Platform) bool { return p.Name() == n }) {
			var known []string
			for _, p := range Platforms {
				known = append(known, p.Name())
			}
			return nil, fmt.Errorf("unknown platform %q: want some of %s", n, strings.Join(known, ","))
		}
		want[n] = true
	}
	var out []Platform
	for _, p := range Platforms {
		if want[p.Name()] {
			out = append(out, p)
		}
	}
	return out, nil
}
