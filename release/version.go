// Package release builds pulselb's releases: static binaries for every
// platform it supports, each with its SHA-256, and one OCI image index
// holding an image per platform, all from one commit and reproducible
// byte for byte. Describe is the one rule for a build's version, which the
// binaries, the images, the Helm chart's appVersion and, rendered from the
// chart, the kustomize base's image tag all carry.
package release

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// Dev is the version of everything built outside a release tag.
const Dev = "dev"

// Build identifies what was built: Version is the release tag at the
// commit without its "v" (tag v0.2.0 is version 0.2.0), or Dev.
type Build struct {
	Version string
	Commit  string
}

// tagPattern is a release tag: v, then SemVer.
var tagPattern = regexp.MustCompile(`^v(\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?)$`)

// VersionOfTag returns the version a release tag names (v0.2.0 -> 0.2.0),
// and false for anything else.
func VersionOfTag(tag string) (string, bool) {
	m := tagPattern.FindStringSubmatch(tag)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Describe returns the build of rev in the git repository at dir: its full
// commit, and the version of the release tag pointing at it (`git
// describe --tags --exact-match`), else Dev. A commit after a tag is Dev,
// not "0.2.0-3-gabc": only a tagged commit is a release, and the commit
// says which one it is.
func Describe(ctx context.Context, dir, rev string) (Build, error) {
	out, err := git(ctx, dir, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return Build{}, err
	}
	b := Build{Version: Dev, Commit: out}
	// Several tags may point at a commit; the highest wins in describe's
	// order (by tag date); a non-release tag (no "v" SemVer) never does.
	tag, err := git(ctx, dir, "describe", "--tags", "--exact-match", "--match", "v[0-9]*", b.Commit)
	if err == nil {
		if v, ok := VersionOfTag(tag); ok {
			b.Version = v
		}
	}
	return b, nil
}

// LDFlags returns the linker flags that stamp b into pulselb's binary (see
// cmd/pulselb/version.go), stripped of symbols and DWARF.
func LDFlags(b Build) string {
	return fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", b.Version, b.Commit)
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
