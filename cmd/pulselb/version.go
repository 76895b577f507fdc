package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time by `make build`, `make
// image-binary` and `make release` (-ldflags "-X main.version=... -X
// main.commit=..."); the release package's Describe decides their values:
// the tag at the commit without its "v", else "dev".
var (
	version = "dev"
	commit  = ""
)

// buildInfo is what `pulselb version` prints.
type buildInfo struct {
	Version, Commit, Go, Platform string
}

// currentBuild returns this binary's version, commit, Go version and
// platform. Without a commit from the linker (a plain `go build`), the
// commit comes from Go's VCS stamp, marked "-dirty" for a modified tree.
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Commit == "" {
			b.Commit = "unknown"
		}
		return b
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if runtime.GOARCH == "arm" && settings["GOARM"] != "" {
		// linux/arm/v7 as OCI platforms and Docker name it; GOARM may
		// carry ",softfloat" or ",hardfloat".
		v := settings["GOARM"]
		for i, c := range v {
			if c < '0' || c > '9' {
				v = v[:i]
				break
			}
		}
		b.Platform += "/v" + v
	}
	if b.Commit == "" {
		b.Commit = settings["vcs.revision"]
		if b.Commit != "" && settings["vcs.modified"] == "true" {
			b.Commit += "-dirty"
		}
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	short := fs.Bool("short", false, "print only the version")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: pulselb version [--short]\n\nPrints the version, commit, Go version and platform of this binary.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "pulselb version: no arguments expected, got %q\n", fs.Args())
		return 2
	}
	b := currentBuild()
	if *short {
		fmt.Fprintln(stdout, b.Version)
		return 0
	}
	fmt.Fprintf(stdout, "pulselb %s\ncommit:   %s\ngo:       %s\nplatform: %s\n", b.Version, b.Commit, b.Go, b.Platform)
	return 0
}
