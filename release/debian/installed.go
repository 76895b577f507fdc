// Package debian puts Debian packages into pulselb's images without
// installing them in an image: Installed takes the files of packages
// installed on this machine (the test harness' images), Fetch downloads
// and unpacks a package and its dependencies for any Debian architecture
// (the release images for amd64, arm64 and armhf). Both leave out what
// Debian's slim images leave out and follow Debian 12's merged /usr.
package debian

import (
	"github.com/pulselb/pulselb/release/oci"

	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// skipped are the paths a slim Debian image leaves out (dpkg path-exclude).
var skipped = []string{"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/lintian/", "/usr/share/locale/"}

// Installed returns the files of the installed Debian packages pkgs
// and of everything they depend on (first alternative of each Depends and
// Pre-Depends), read from this machine: what `apt-get install
// --no-install-recommends pkgs` puts into a Debian image of the same
// release. Symbolic links into /etc/alternatives come with their
// alternative. Documentation is left out, as in Debian's slim images.
func Installed(pkgs ...string) ([]oci.File, error) {
	closure := map[string]bool{}
	todo := append([]string(nil), pkgs...)
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if closure[p] {
			continue
		}
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}\t${Pre-Depends}, ${Depends}", p).Output()
		if err != nil {
			return nil, fmt.Errorf("querying Debian package %s (is it installed?): %w", p, err)
		}
		status, deps, _ := strings.Cut(string(out), "\t")
		if !strings.Contains(status, "installed") || strings.Contains(status, "not-installed") {
			// A virtual package (awk) is had through one that provides it (mawk).
			real, err := installedProvider(p)
			if err != nil {
				return nil, fmt.Errorf("debian package %s is not installed (status %q): %w", p, status, err)
			}
			todo = append(todo, real)
			continue
		}
		closure[p] = true
		todo = append(todo, parseDepends(deps)...)
	}
	names := make([]string, 0, len(closure))
	for p := range closure {
		names = append(names, p)
	}
	sort.Strings(names)
	seen, dup, links := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var files []oci.File
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		for _, s := range skipped {
			if strings.HasPrefix(p, s) {
				return nil
			}
		}
		fi, err := os.Lstat(p)
		if err != nil {
			if os.IsNotExist(err) {
				return nil // a conffile the admin removed, a diverted file
			}
			return fmt.Errorf("reading %s: %w", p, err)
		}
		seen[p] = true
		// Stored under its real directory: on merged-/usr systems dpkg
		// lists /lib/... while /lib is a link to usr/lib.
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return fmt.Errorf("resolving %s: %w", p, err)
		}
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Lstat(d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				links[d] = true
			}
		}
		name := filepath.Join(dir, filepath.Base(p))
		if dup[name] {
			return nil
		}
		dup[name] = true
		switch {
		case fi.IsDir():
			files = append(files, oci.File{Path: name, Dir: true, Mode: fi.Mode()})
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("reading link %s: %w", p, err)
			}
			files = append(files, oci.File{Path: name, Link: target})
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("reading %s: %w", p, err)
			}
			files = append(files, oci.File{Path: name, Mode: fi.Mode(), Data: b})
		}
		return nil
	}
	for _, p := range names {
		out, err := exec.Command("dpkg", "-L", p).Output()
		if err != nil {
			return nil, fmt.Errorf("listing files of Debian package %s: %w", p, err)
		}
		for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f == "" || f == "/." {
				continue
			}
			if err := add(f); err != nil {
				return nil, err
			}
		}
	}
	// Alternatives (/usr/sbin/iptables -> /etc/alternatives/iptables ->
	// /usr/sbin/iptables-nft) are not listed by dpkg: take those whose
	// choice is one of the files, and the commands pointing at them.
	alts, err := os.ReadDir("/etc/alternatives")
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading /etc/alternatives: %w", err)
	}
	chosen := map[string]bool{}
	for _, a := range alts {
		p := "/etc/alternatives/" + a.Name()
		target, err := filepath.EvalSymlinks(p)
		if err != nil || !dup[target] {
			continue
		}
		if err := add(p); err != nil {
			return nil, err
		}
		chosen[p] = true
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if target, err := os.Readlink(p); err == nil && chosen[target] {
				if err := add(p); err != nil {
					return nil, err
				}
			}
		}
	}
	// The links themselves (/lib -> usr/lib), outermost first.
	var ls []string
	for d := range links {
		ls = append(ls, d)
	}
	sort.Strings(ls)
	for _, d := range ls {
		if dup[d] {
			continue
		}
		if _, err := filepath.EvalSymlinks(filepath.Dir(d)); err != nil {
			return nil, fmt.Errorf("resolving %s: %w", d, err)
		}
		target, err := os.Readlink(d)
		if err != nil {
			return nil, fmt.Errorf("reading link %s: %w", d, err)
		}
		files = append(files, oci.File{Path: d, Link: target})
	}
	return files, nil
}

// parseDepends returns the package names of a Depends field: the first of
// each set of alternatives, without versions or architecture qualifiers.
// installedProvider returns the installed package that provides the
// virtual package name.
func installedProvider(name string) (string, error) {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Provides}\n").Output()
	if err != nil {
		return "", fmt.Errorf("listing installed packages: %w", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 || !strings.HasPrefix(f[0], "ii") {
			continue
		}
		if slices.Contains(parseDepends(f[2]), name) {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no installed package provides %s", name)
}

func parseDepends(field string) []string {
	var out []string
	for _, dep := range strings.Split(field, ",") {
		first, _, _ := strings.Cut(dep, "|")
		name := strings.TrimSpace(first)
		if i := strings.IndexAny(name, " ("); i >= 0 {
			name = name[:i]
		}
		name, _, _ = strings.Cut(name, ":")
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}
