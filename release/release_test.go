package release

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pulselb/pulselb/release/oci"
)

// releaseDir returns the release that `make release-check` built, or
// skips: building one takes minutes (see the Makefile).
func releaseDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PULSELB_RELEASE_DIR")
	if dir == "" {
		t.Skip("PULSELB_RELEASE_DIR is not set: run `make release-check`")
	}
	return dir
}

// releasePlatforms returns the platforms the release in releaseDir was
// built for: PULSELB_RELEASE_PLATFORMS (pulselb-release build's
// -platforms, which `make test` sets), else every one.
func releasePlatforms(t *testing.T) []Platform {
	t.Helper()
	ps, err := SelectPlatforms(os.Getenv("PULSELB_RELEASE_PLATFORMS"))
	if err != nil {
		t.Fatalf("PULSELB_RELEASE_PLATFORMS: %v", err)
	}
	return ps
}

// emulator returns the qemu user-mode emulator for p, failing the test
// when it is missing (`make deps` installs Debian's qemu-user-static).
func emulator(t *testing.T, p Platform) string {
	t.Helper()
	q, err := exec.LookPath(p.QEMU)
	if err != nil {
		t.Fatalf("%s not found: install Debian's qemu-user-static (make deps)", p.QEMU)
	}
	return q
}

// run runs the release binary for p under qemu, with a deadline.
func run(t *testing.T, p Platform, bin string, timeout time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, emulator(t, p), append([]string{bin}, args...)...)
	cmd.Dir = "../standalone/testdata" // the example config's relative paths (secrets, token)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBinariesUnderQEMU runs every release binary, under qemu user-mode
// emulation as a Raspberry Pi would run the ARM ones: it is a static
// executable for its platform, says its version and platform, probes a
// loopback server of every protocol that `check --serve` has, checks the
// documented standalone configuration and plays the demo through.
func TestBinariesUnderQEMU(t *testing.T) {
	dir := releaseDir(t)
	labels := imageLabels(t, dir)
	for _, p := range releasePlatforms(t) {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			bin, err := filepath.Abs(filepath.Join(dir, "pulselb-"+p.Name()))
			if err != nil {
				t.Fatal(err)
			}
			checkELF(t, bin, p, "")
			out, err := run(t, p, bin, time.Minute, "version")
			want := []string{"pulselb " + labels["org.opencontainers.image.version"] + "\n",
				"commit:   " + labels["org.opencontainers.image.revision"] + "\n", "platform: " + p.String() + "\n"}
			for _, w := range want {
				if err != nil || !strings.Contains(out, w) {
					t.Errorf("version: %v, printed %q; want %q", err, out, w)
				}
			}
			for _, spec := range []string{`tcp send=ping expect=^ping`, `udp send=ping expect=ping`, "http path=/healthz", "https", "tls", "dns name=web.example.test"} {
				out, err := run(t, p, bin, time.Minute, "check", "--serve", spec)
				if err != nil || !strings.Contains(out, "UP ") {
					t.Errorf("check --serve %q: %v\n%s", spec, err, out)
				}
			}
			out, err = run(t, p, bin, time.Minute, "standalone", "--config", "pulselb.yaml", "--check")
			if err != nil || !strings.Contains(out, "ok (") {
				t.Errorf("standalone --check of the documented configuration: %v\n%s", err, out)
			}
			out, err = run(t, p, bin, 3*time.Minute, "demo")
			if err != nil || !strings.Contains(out, "Summary") {
				t.Errorf("demo: %v\n%s", err, out)
			}
		})
	}
}

// checkELF fails unless the executable at p (or data) is for pl: its
// machine and class, and static when loader is "", else loaded by loader.
func checkELF(t *testing.T, file string, pl Platform, loader string) {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defer f.Close()
	if f.Machine != pl.Machine || f.Class != pl.Class {
		t.Errorf("%s: ELF %s %s, want %s %s", file, f.Machine, f.Class, pl.Machine, pl.Class)
	}
	interp := ""
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp != loader {
		t.Errorf("%s: program interpreter %q, want %q", file, interp, loader)
	}
}

func readImage(t *testing.T, dir string) *oci.Archive {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, ImageFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, err := oci.ReadArchive(f)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// imageIndex returns the image index that index.json names.
func imageIndex(t *testing.T, a *oci.Archive) (oci.Descriptor, oci.Index) {
	t.Helper()
	top, idx, err := a.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	return top, idx
}

func imageLabels(t *testing.T, dir string) map[string]string {
	t.Helper()
	_, idx := imageIndex(t, readImage(t, dir))
	return idx.Annotations
}

// TestImageIndex checks the release's image index: named
// Repository:version, one manifest per platform whose config has the
// platform's OS, architecture and variant, the user, entrypoint and
// version of a pulselb image, the release binary of the platform at
// /pulselb, and Debian's iptables of the platform, which runs (under qemu)
// with the image's own C library.
func TestImageIndex(t *testing.T) {
	dir := releaseDir(t)
	a := readImage(t, dir)
	top, idx := imageIndex(t, a)
	version := idx.Annotations["org.opencontainers.image.version"]
	if want := Repository + ":" + version; top.Annotations["io.containerd.image.name"] != want || top.Annotations["org.opencontainers.image.ref.name"] != version {
		t.Errorf("index.json annotations %v, want the name %s", top.Annotations, want)
	}
	platforms := releasePlatforms(t)
	if len(idx.Manifests) != len(platforms) {
		t.Fatalf("image index has %d manifests, want one per platform (%d)", len(idx.Manifests), len(platforms))
	}
	for i, p := range platforms {
		d := idx.Manifests[i]
		t.Run(p.Name(), func(t *testing.T) {
			if d.MediaType != oci.MediaManifest || d.Platform == nil || *d.Platform != p.Platform {
				t.Fatalf("manifest %d: %s for %v, want an image manifest for %s", i, d.MediaType, d.Platform, p.Platform)
			}
			var man oci.Manifest
			if err := a.JSON(d, &man); err != nil {
				t.Fatal(err)
			}
			var cfg oci.Config
			if err := a.JSON(man.Config, &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.Platform != p.Platform {
				t.Errorf("config is for %s, want %s", cfg.Platform, p.Platform)
			}
			if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/pulselb"}) || cfg.Config.Labels["org.opencontainers.image.version"] != version {
				t.Errorf("config %+v: want user 65532:65532, entrypoint /pulselb, version %s", cfg.Config, version)
			}
			if len(man.Layers) != 1 {
				t.Fatalf("%d layers, want 1", len(man.Layers))
			}
			files, err := a.LayerFiles(man.Layers[0])
			if err != nil {
				t.Fatal(err)
			}
			bin, err := os.ReadFile(filepath.Join(dir, "pulselb-"+p.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(files["pulselb"].Data, bin) {
				t.Errorf("/pulselb is not the release binary pulselb-%s", p.Name())
			}
			root := t.TempDir()
			if err := extract(root, files); err != nil {
				t.Fatal(err)
			}
			iptables := resolve(t, files, "/usr/sbin/iptables")
			checkELF(t, filepath.Join(root, iptables), p, p.Loader)
			if loader := resolve(t, files, p.Loader); files[strings.TrimPrefix(loader, "/")].Data == nil {
				t.Errorf("the image has no C library loader %s", p.Loader)
			}
			// As in debian:12-slim, iptables is the nf_tables variant:
			// the alternative at its highest priority.
			if !strings.HasSuffix(iptables, "/xtables-nft-multi") {
				t.Errorf("/usr/sbin/iptables is %s, want xtables-nft-multi (nf_tables)", iptables)
			}
			// qemu does not carry the netlink that the nf_tables variant
			// opens at start; the legacy variant of the same build, with
			// the same libraries, shows they load and run.
			legacy := resolve(t, files, "/usr/sbin/iptables-legacy")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, emulator(t, p), "-L", root, "-0", "iptables-legacy", filepath.Join(root, legacy), "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "iptables v") {
				t.Errorf("the image's iptables-legacy --version under %s: %v, %q", p.QEMU, err, out)
			}
		})
	}
}

// resolve follows symbolic links in the layer's files from p (absolute) to
// a regular file, directory by directory, as the kernel would.
func resolve(t *testing.T, files map[string]oci.File, p string) string {
	t.Helper()
	for range 40 {
		parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
		changed := false
		for i := range parts {
			prefix := strings.Join(parts[:i+1], "/")
			f, ok := files[prefix]
			if !ok {
				f, ok = files[prefix+"/"]
			}
			if !ok {
				t.Fatalf("resolving %s: %s is not in the image", p, prefix)
			}
			if f.Link == "" {
				continue
			}
			target := f.Link
			if !path.IsAbs(target) {
				target = path.Join("/", path.Dir(prefix), target)
			}
			p = path.Join(target, strings.Join(parts[i+1:], "/"))
			changed = true
			break
		}
		if !changed {
			return "/" + strings.Join(parts, "/")
		}
	}
	t.Fatalf("resolving %s: too many links", p)
	return ""
}

// extract writes the layer's files under root.
func extract(root string, files map[string]oci.File) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		f := files[n]
		p := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(n, "/")))
		var err error
		switch {
		case f.Dir:
			err = os.MkdirAll(p, 0o755)
		case f.Link != "":
			err = os.Symlink(f.Link, p)
		default:
			err = os.WriteFile(p, f.Data, 0o755)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
