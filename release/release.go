package release

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/pulselb/pulselb/release/debian"
	"github.com/pulselb/pulselb/release/oci"
)

// Repository is where release images are published.
const Repository = "ghcr.io/pulselb/pulselb"

// ImageFile is the OCI image layout archive of a release, holding the
// image index.
const ImageFile = "pulselb-image.tar"

// Options says what Make builds.
type Options struct {
	Repo string // the git repository
	Rev  string // the commit to build, HEAD by default
	Out  string // the directory to write
	// Work holds the source tree and the downloaded Debian packages; a
	// temporary directory by default.
	Work      string
	Platforms []Platform
	// NoImage builds only the binaries.
	NoImage bool
	// Log receives one line per step.
	Log io.Writer
}

// Make builds the release of opts.Rev into opts.Out: for each platform the
// static binary pulselb-OS-ARCH[VARIANT] and its .sha256, then ImageFile
// (one image per platform under one index, named Repository:version) and
// its .sha256, debian-packages.txt (what each image's iptables came from),
// and SHA256SUMS over all of them. The binaries are built from the
// commit's tree (`git archive`), never from the working tree, so that
// what a commit builds does not depend on uncommitted changes.
func Make(ctx context.Context, opts Options) (Build, error) {
	if opts.Rev == "" {
		opts.Rev = "HEAD"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if len(opts.Platforms) == 0 {
		opts.Platforms = Platforms
	}
	b, err := Describe(ctx, opts.Repo, opts.Rev)
	if err != nil {
		return Build{}, err
	}
	if opts.Work == "" {
		dir, err := os.MkdirTemp("", "pulselb-release-")
		if err != nil {
			return b, err
		}
		defer os.RemoveAll(dir)
		opts.Work = dir
	}
	src := filepath.Join(opts.Work, "src")
	if err := os.RemoveAll(src); err != nil {
		return b, err
	}
	if err := exportTree(ctx, opts.Repo, b.Commit, src); err != nil {
		return b, err
	}
	if b.Version != Dev {
		if err := CheckManifests(src, b.Version); err != nil {
			return b, err
		}
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return b, err
	}
	fmt.Fprintf(opts.Log, "release %s (commit %s) into %s\n", b.Version, b.Commit, opts.Out)
	var files []string
	binaries := map[Platform]string{}
	for _, p := range opts.Platforms {
		name := "pulselb-" + p.Name()
		fmt.Fprintf(opts.Log, "building %s\n", name)
		if err := BuildBinary(ctx, src, p, b, filepath.Join(opts.Out, name)); err != nil {
			return b, err
		}
		binaries[p] = filepath.Join(opts.Out, name)
		files = append(files, name)
	}
	if !opts.NoImage {
		if err := checkDebian12(); err != nil {
			return b, err
		}
		debs := filepath.Join(opts.Work, "debs")
		if err := os.MkdirAll(debs, 0o755); err != nil {
			return b, err
		}
		var images []oci.Image
		var pkgList strings.Builder
		for _, p := range opts.Platforms {
			fmt.Fprintf(opts.Log, "collecting iptables for %s (Debian %s)\n", p.Platform, p.Debian)
			pkgs, iptables, err := debian.Fetch(ctx, debs, p.Debian, "iptables")
			if err != nil {
				return b, err
			}
			for _, pkg := range pkgs {
				fmt.Fprintf(&pkgList, "%s\t%s\t%s\t%s\t%s\n", p.Platform, pkg.Name, pkg.Version, pkg.Architecture, pkg.SHA256)
			}
			bin, err := oci.StaticBinary(binaries[p], "/pulselb")
			if err != nil {
				return b, err
			}
			images = append(images, Image(p, b, bin, iptables))
		}
		var buf bytes.Buffer
		if err := oci.WriteIndex(&buf, ImageName(b), ImageLabels(b), images); err != nil {
			return b, err
		}
		if err := os.WriteFile(filepath.Join(opts.Out, ImageFile), buf.Bytes(), 0o644); err != nil {
			return b, err
		}
		if err := os.WriteFile(filepath.Join(opts.Out, "debian-packages.txt"), []byte(pkgList.String()), 0o644); err != nil {
			return b, err
		}
		files = append(files, ImageFile, "debian-packages.txt")
		fmt.Fprintf(opts.Log, "wrote %s: %s, %d bytes\n", ImageFile, ImageName(b), buf.Len())
	}
	var sums strings.Builder
	for _, f := range files {
		sum, err := fileSum(filepath.Join(opts.Out, f))
		if err != nil {
			return b, err
		}
		line := sum + "  " + f + "\n"
		sums.WriteString(line)
		if f == "debian-packages.txt" {
			continue
		}
		if err := os.WriteFile(filepath.Join(opts.Out, f+".sha256"), []byte(line), 0o644); err != nil {
			return b, err
		}
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		return b, err
	}
	return b, nil
}

// ImageName is the reference of b's image index.
func ImageName(b Build) string { return Repository + ":" + b.Version }

// ImageLabels are the OCI annotations of b's images and index.
func ImageLabels(b Build) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    "pulselb",
		"org.opencontainers.image.source":   "https://github.com/pulselb/pulselb",
		"org.opencontainers.image.version":  b.Version,
		"org.opencontainers.image.revision": b.Commit,
	}
}

// Image is the release image for p: what the Dockerfile's runtime stage
// holds (Debian 12's iptables for p, the static binary at /pulselb, user
// 65532, entrypoint /pulselb), without the rest of debian:12-slim.
func Image(p Platform, b Build, binary oci.File, iptables []oci.File) oci.Image {
	files := append([]oci.File{binary, {Path: "/tmp", Dir: true, Mode: 0o1777}, {Path: "/run", Dir: true, Mode: 0o755}}, iptables...)
	return oci.Image{
		Platform:   p.Platform,
		Entrypoint: []string{"/pulselb"},
		User:       "65532:65532",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Labels:     ImageLabels(b),
		Files:      files,
	}
}

// BuildBinary builds pulselb from the source tree src for p into out:
// static (CGO_ENABLED=0), without paths of this machine (-trimpath),
// without VCS stamping (-buildvcs=false: src is an export without .git,
// and a stamp from a working tree would record whether it was modified;
// the commit comes in through LDFlags instead), with every GOARCH level
// explicit so that the environment cannot change the result, and with
// this Go toolchain only (GOTOOLCHAIN=local).
func BuildBinary(ctx context.Context, src string, p Platform, b Build, out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", LDFlags(b), "-o", abs, "./cmd/pulselb")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.GOARCH, "GOARM="+p.GOARM,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local", "GOEXPERIMENT=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building pulselb for %s: %w\n%s", p.Platform, err, out)
	}
	return nil
}

// exportTree writes the tree of commit into dir.
func exportTree(ctx context.Context, repo, commit, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", repo, "archive", "--format=tar", commit)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git archive %s: %w", commit, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading git archive of %s: %w", commit, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			continue // the pax header, or a path outside dir
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var data []byte
				if data, err = io.ReadAll(tr); err == nil {
					err = os.WriteFile(p, data, h.FileInfo().Mode().Perm())
				}
			}
		}
		if err != nil {
			return fmt.Errorf("exporting %s: %w", h.Name, err)
		}
	}
}

// chartVersion and imageTag find the chart's versions and the image tags
// of the rendered kustomize base.
var (
	chartVersion = regexp.MustCompile(`(?m)^(version|appVersion):\s*"?([^"\s]+)"?\s*$`)
	imageTag     = regexp.MustCompile(regexp.QuoteMeta(Repository) + `:([^\s"']+)`)
)

// CheckManifests returns an error unless the Helm chart of the source tree
// src has version and appVersion equal to version and every image of the
// kustomize base deploy/base (rendered from the chart by `make
// manifests`) is Repository:version: a release's install manifests run
// its own image. `make release-prepare VERSION=...` sets them.
func CheckManifests(src, version string) error {
	chart, err := os.ReadFile(filepath.Join(src, "deploy", "helm", "pulselb", "Chart.yaml"))
	if err != nil {
		return err
	}
	found := map[string]string{}
	for _, m := range chartVersion.FindAllStringSubmatch(string(chart), -1) {
		found[m[1]] = m[2]
	}
	var bad []string
	for _, k := range []string{"version", "appVersion"} {
		if found[k] != version {
			bad = append(bad, fmt.Sprintf("Chart.yaml %s is %q", k, found[k]))
		}
	}
	base := filepath.Join(src, "deploy", "base")
	entries, err := os.ReadDir(base)
	if err != nil {
		return err
	}
	tags := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(base, e.Name()))
		if err != nil {
			return err
		}
		for _, m := range imageTag.FindAllStringSubmatch(string(b), -1) {
			tags++
			if m[1] != version {
				bad = append(bad, fmt.Sprintf("deploy/base/%s names image tag %q", e.Name(), m[1]))
			}
		}
	}
	if tags == 0 {
		bad = append(bad, "deploy/base names no "+Repository+" image")
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("release %s: %s; run `make release-prepare VERSION=%s`, commit and tag again", version, strings.Join(bad, ", "), version)
	}
	return nil
}

// checkDebian12 returns an error unless this machine's apt sources are
// Debian 12's, whose iptables the Dockerfile's debian:12-slim has.
func checkDebian12() error {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil || !regexp.MustCompile(`(?m)^VERSION_CODENAME=bookworm$`).Match(b) {
		return errors.New("the release images carry Debian 12's iptables, downloaded with apt-get: run on Debian 12 (bookworm), or use -no-image")
	}
	return nil
}

func fileSum(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
