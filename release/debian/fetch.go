package debian

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
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pulselb/pulselb/release/oci"
)

// Package is one Debian package that Fetch downloaded.
type Package struct {
	Name, Version, Architecture string
	// SHA256 is the checksum of the .deb, as in the archive's Packages
	// index that apt verified it against.
	SHA256 string
}

// mergedUsr are the top-level directories that Debian 12 keeps under
// /usr, each a symbolic link (/lib -> usr/lib) as in debian:12-slim.
var mergedUsr = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// Fetch downloads the Debian packages pkgs for arch (a Debian architecture:
// amd64, arm64, armhf) and everything they depend on (the first
// alternative of each Depends and Pre-Depends) into dir with `apt-get
// download`, from this machine's apt sources, and returns the packages and
// the files of an image that has them installed with
// --no-install-recommends: their contents under Debian 12's merged /usr,
// without documentation, and the alternatives their maintainer scripts
// install, each at its highest priority, as update-alternatives' automatic
// mode leaves them. A foreign arch must have been added with `dpkg
// --add-architecture` and `apt-get update` run since.
func Fetch(ctx context.Context, dir, arch string, pkgs ...string) ([]Package, []oci.File, error) {
	var closure []Package
	done := map[string]bool{}
	todo := append([]string(nil), pkgs...)
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if done[name] {
			continue
		}
		done[name] = true
		fields, err := show(ctx, dir, name, arch)
		if err != nil {
			return nil, nil, err
		}
		closure = append(closure, Package{Name: name, Version: fields["Version"], Architecture: fields["Architecture"], SHA256: fields["SHA256"]})
		todo = append(todo, parseDepends(fields["Pre-Depends"]+", "+fields["Depends"])...)
	}
	sort.Slice(closure, func(i, j int) bool { return closure[i].Name < closure[j].Name })
	files := map[string]oci.File{}
	var alts []alternative
	for _, p := range closure {
		deb, err := download(ctx, dir, p)
		if err != nil {
			return nil, nil, err
		}
		if err := unpack(ctx, deb, files); err != nil {
			return nil, nil, err
		}
		script, err := exec.CommandContext(ctx, "dpkg-deb", "--info", deb, "postinst").Output()
		if err == nil {
			alts = append(alts, parseAlternatives(string(script))...)
		}
	}
	for _, a := range chooseAlternatives(alts) {
		target := mergedPath(a.path)
		if _, ok := files[target]; !ok {
			continue
		}
		link := "/etc/alternatives/" + a.name
		files[link] = oci.File{Path: link, Link: target}
		files[mergedPath(a.link)] = oci.File{Path: mergedPath(a.link), Link: link}
	}
	out := make([]oci.File, 0, len(files)+len(mergedUsr))
	for _, d := range mergedUsr {
		if _, ok := files["/usr/"+d]; ok {
			out = append(out, oci.File{Path: "/" + d, Link: "usr/" + d})
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		out = append(out, files[p])
	}
	return closure, out, nil
}

// aptCache returns the options that have apt keep its package cache in
// dir. Without a cache file (container images such as debian:12 turn it
// off: Dir::Cache::pkgcache "") every apt-cache and apt-get call rebuilds
// the cache from the package lists of every architecture, 3-5 s each on an
// idle machine and minutes on a loaded one; with one, apt builds it once
// and rebuilds it only when the lists change.
func aptCache(dir string) []string {
	return []string{
		"-o", "Dir::Cache::pkgcache=" + filepath.Join(dir, "apt-pkgcache.bin"),
		"-o", "Dir::Cache::srcpkgcache=" + filepath.Join(dir, "apt-srcpkgcache.bin"),
	}
}

// show returns the control fields of the candidate version of name for
// arch, or of its architecture-independent package; apt keeps its cache in
// dir.
func show(ctx context.Context, dir, name, arch string) (map[string]string, error) {
	var last error
	for _, q := range []string{name + ":" + arch, name + ":all"} {
		args := append(aptCache(dir), "show", "--no-all-versions", q)
		out, err := exec.CommandContext(ctx, "apt-cache", args...).Output()
		if err != nil {
			last = err
			continue
		}
		f := parseControl(string(out))
		if a := f["Architecture"]; a != arch && a != "all" {
			last = fmt.Errorf("candidate is for %s", a)
			continue
		}
		if f["Version"] == "" || f["SHA256"] == "" {
			last = errors.New("no Version or SHA256 field")
			continue
		}
		return f, nil
	}
	return nil, fmt.Errorf("looking up Debian package %s for %s (is the architecture added with dpkg --add-architecture, and apt-get update run?): %w", name, arch, last)
}

// parseControl returns the fields of the first stanza of a Debian control
// file; continuation lines are joined with spaces.
func parseControl(s string) map[string]string {
	f := map[string]string{}
	var key string
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			if len(f) > 0 {
				break
			}
			continue
		}
		if (line[0] == ' ' || line[0] == '\t') && key != "" {
			f[key] += " " + strings.TrimSpace(line)
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key = k
		f[k] = strings.TrimSpace(v)
	}
	return f
}

// download fetches p into dir (once) and checks it against the checksum of
// the Packages index.
func download(ctx context.Context, dir string, p Package) (string, error) {
	ref := p.Name + "=" + p.Version
	if p.Architecture != "all" {
		ref = p.Name + ":" + p.Architecture + "=" + p.Version
	}
	// apt-get names the file NAME_VERSION_ARCH.deb with the epoch's colon
	// escaped as %3a.
	deb := filepath.Join(dir, p.Name+"_"+strings.ReplaceAll(p.Version, ":", "%3a")+"_"+p.Architecture+".deb")
	if sum, err := fileSHA256(deb); err == nil && sum == p.SHA256 {
		return deb, nil
	}
	args := append(aptCache(dir), "download", "-q", "-o", "APT::Sandbox::User=root", ref)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("downloading Debian package %s: %w\n%s", ref, err, out)
	}
	sum, err := fileSHA256(deb)
	if err != nil {
		return "", fmt.Errorf("downloading Debian package %s: %w", ref, err)
	}
	if sum != p.SHA256 {
		return "", fmt.Errorf("debian package %s: SHA-256 %s, the Packages index says %s", deb, sum, p.SHA256)
	}
	return deb, nil
}

func fileSHA256(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// mergedPath returns where p is in a merged-/usr file system: /lib/x is
// /usr/lib/x.
func mergedPath(p string) string {
	p = path.Clean("/" + p)
	for _, d := range mergedUsr {
		if p == "/"+d || strings.HasPrefix(p, "/"+d+"/") {
			return "/usr" + p
		}
	}
	return p
}

// unpack adds the contents of the .deb to files.
func unpack(ctx context.Context, deb string, files map[string]oci.File) error {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb).Output()
	if err != nil {
		return fmt.Errorf("unpacking %s: %w", deb, err)
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpacking %s: %w", deb, err)
		}
		p := mergedPath(strings.TrimPrefix(h.Name, "."))
		if p == "/" || slim(p) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if _, ok := files[p]; !ok {
				files[p] = oci.File{Path: p, Dir: true, Mode: h.FileInfo().Mode().Perm()}
			}
		case tar.TypeSymlink:
			files[p] = oci.File{Path: p, Link: h.Linkname}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return fmt.Errorf("unpacking %s: %w", deb, err)
			}
			files[p] = oci.File{Path: p, Mode: h.FileInfo().Mode(), Data: b}
		case tar.TypeLink:
			src, ok := files[mergedPath(strings.TrimPrefix(h.Linkname, "."))]
			if !ok {
				return fmt.Errorf("unpacking %s: hard link %s to %s, which it does not hold", deb, h.Name, h.Linkname)
			}
			src.Path = p
			files[p] = src
		}
	}
}

// slim reports whether p is left out of a slim image.
func slim(p string) bool {
	for _, s := range skipped {
		if strings.HasPrefix(p+"/", s) {
			return true
		}
	}
	return false
}

// alternative is one `update-alternatives --install` link, master or
// slave: link -> /etc/alternatives/name -> path.
type alternative struct {
	link, name, path string
	priority         int
	master           string // the master's name; equal to name for a master
	choice           string // the master's path: which choice this link belongs to
}

// parseAlternatives returns the links that the `update-alternatives
// --install LINK NAME PATH PRIORITY [--slave LINK NAME PATH]...` commands
// of a maintainer script install.
func parseAlternatives(script string) []alternative {
	script = strings.ReplaceAll(script, "\\\n", " ")
	var out []alternative
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		i := slices.Index(f, "--install")
		if len(f) == 0 || f[0] != "update-alternatives" || i < 0 || i+4 >= len(f) {
			continue
		}
		prio, err := strconv.Atoi(f[i+4])
		if err != nil {
			continue
		}
		master := alternative{link: f[i+1], name: f[i+2], path: f[i+3], priority: prio, master: f[i+2], choice: f[i+3]}
		out = append(out, master)
		for j := i + 5; j+3 < len(f) && f[j] == "--slave"; j += 4 {
			out = append(out, alternative{link: f[j+1], name: f[j+2], path: f[j+3], priority: prio, master: master.name, choice: master.path})
		}
	}
	return out
}

// chooseAlternatives returns, for each master, the links of its
// highest-priority choice (master and slaves), sorted by name.
func chooseAlternatives(alts []alternative) []alternative {
	best := map[string]alternative{}
	for _, a := range alts {
		if b, ok := best[a.master]; a.name == a.master && (!ok || a.priority > b.priority) {
			best[a.master] = a
		}
	}
	var out []alternative
	for _, a := range alts {
		if best[a.master].path == a.choice {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
