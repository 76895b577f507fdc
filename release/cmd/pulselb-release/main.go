// Command pulselb-release builds and prepares pulselb's releases (see
// package release and docs/operations.md "Releases and versions").
//
//	go run ./release/cmd/pulselb-release build [-out dist] [-rev HEAD] [-no-image] [-platforms linux-amd64,...]
//	go run ./release/cmd/pulselb-release describe [-rev HEAD]   # prints "VERSION COMMIT"
//	go run ./release/cmd/pulselb-release prepare -version 0.2.0 # sets the chart's versions
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/pulselb/pulselb/release"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pulselb-release build|describe|prepare [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	repo := fs.String("repo", ".", "the git repository")
	rev := fs.String("rev", "HEAD", "the commit to build or describe")
	var err error
	switch os.Args[1] {
	case "build":
		out := fs.String("out", "dist", "the directory to write the release to")
		work := fs.String("work", "", "keep the source tree and Debian packages here (default: a temporary directory)")
		noImage := fs.Bool("no-image", false, "build only the binaries")
		platforms := fs.String("platforms", "", "build only these platforms, such as linux-amd64,linux-arm64 (default: every one)")
		_ = fs.Parse(os.Args[2:])
		start := time.Now()
		var b release.Build
		var ps []release.Platform
		if ps, err = release.SelectPlatforms(*platforms); err != nil {
			break
		}
		b, err = release.Make(ctx, release.Options{Repo: *repo, Rev: *rev, Out: *out, Work: *work, Platforms: ps, NoImage: *noImage, Log: os.Stdout})
		if err == nil {
			fmt.Printf("release %s of %s built in %s\n", b.Version, b.Commit, time.Since(start).Round(time.Second))
		}
	case "describe":
		_ = fs.Parse(os.Args[2:])
		var b release.Build
		if b, err = release.Describe(ctx, *repo, *rev); err == nil {
			fmt.Println(b.Version, b.Commit)
		}
	case "prepare":
		version := fs.String("version", "", "the version to release, such as 0.2.0 (tag v0.2.0)")
		_ = fs.Parse(os.Args[2:])
		err = prepare(*repo, *version)
	default:
		err = fmt.Errorf("unknown command %q: want build, describe or prepare", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulselb-release: %v\n", err)
		os.Exit(1)
	}
}

// prepare sets the chart's version and appVersion to version and turns
// CHANGELOG.md's "Unreleased" section into version's; `make
// release-prepare` then renders deploy/base from the chart.
func prepare(repo, version string) error {
	if _, ok := release.VersionOfTag("v" + version); !ok {
		return fmt.Errorf("-version %q: want SemVer without a v, such as 0.2.0", version)
	}
	chartFile := repo + "/deploy/helm/pulselb/Chart.yaml"
	chart, err := os.ReadFile(chartFile)
	if err != nil {
		return err
	}
	chart = regexp.MustCompile(`(?m)^version:.*$`).ReplaceAll(chart, []byte("version: "+version))
	chart = regexp.MustCompile(`(?m)^appVersion:.*$`).ReplaceAll(chart, []byte(`appVersion: "`+version+`"`))
	if err := os.WriteFile(chartFile, chart, 0o644); err != nil {
		return err
	}
	logFile := repo + "/CHANGELOG.md"
	log, err := os.ReadFile(logFile)
	if err != nil {
		return err
	}
	if strings.Contains(string(log), "\n## "+version+" ") {
		return nil
	}
	if !strings.Contains(string(log), "\n## Unreleased\n") {
		return fmt.Errorf("%s has neither a %q nor an \"Unreleased\" section", logFile, "## "+version)
	}
	heading := fmt.Sprintf("## Unreleased\n\n## %s (%s)\n", version, time.Now().UTC().Format("2006-01-02"))
	return os.WriteFile(logFile, []byte(strings.Replace(string(log), "## Unreleased\n", heading, 1)), 0o644)
}
