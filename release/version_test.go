package release

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestVersionOfTag(t *testing.T) {
	for tag, want := range map[string]string{"v0.2.0": "0.2.0", "v1.10.3-rc.1": "1.10.3-rc.1", "0.2.0": "", "v1.2": "", "vx": "", "v1.2.3 ": ""} {
		got, ok := VersionOfTag(tag)
		if got != want || ok != (want != "") {
			t.Errorf("VersionOfTag(%q) = %q, %v; want %q", tag, got, ok, want)
		}
	}
}

// TestDescribe checks the one rule for versions on a real repository: a
// release tag at the commit gives its version, anything else "dev".
func TestDescribe(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.test"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("commit", "-q", "--allow-empty", "-m", "one")
	ctx := context.Background()
	check := func(want string) {
		t.Helper()
		b, err := Describe(ctx, dir, "HEAD")
		if err != nil {
			t.Fatal(err)
		}
		if b.Version != want || len(b.Commit) != 40 {
			t.Errorf("Describe = %+v, want version %s and a full commit", b, want)
		}
	}
	check(Dev)
	git("tag", "not-a-release")
	check(Dev)
	git("tag", "v0.2.0")
	check("0.2.0")
	git("commit", "-q", "--allow-empty", "-m", "two")
	check(Dev)
	if _, err := Describe(ctx, dir, "no-such-rev"); err == nil {
		t.Error("Describe of a missing revision succeeded")
	}
	if got := LDFlags(Build{Version: "0.2.0", Commit: "abc"}); !strings.Contains(got, "-X main.version=0.2.0 -X main.commit=abc") {
		t.Errorf("LDFlags = %q", got)
	}
}

// TestCheckManifests checks this repository's chart and deploy/base name
// one version, and that another is refused with what to run.
func TestCheckManifests(t *testing.T) {
	out, err := exec.Command("sed", "-n", `s/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p`, "../deploy/helm/pulselb/Chart.yaml").Output()
	if err != nil {
		t.Fatal(err)
	}
	current := strings.TrimSpace(string(out))
	if err := CheckManifests("..", current); err != nil {
		t.Errorf("CheckManifests(%s): %v", current, err)
	}
	err = CheckManifests("..", "99.0.0")
	if err == nil || !strings.Contains(err.Error(), "make release-prepare VERSION=99.0.0") || !strings.Contains(err.Error(), "deploy/base/controller.yaml") {
		t.Errorf("CheckManifests(99.0.0) = %v, want an error naming the chart, deploy/base and the fix", err)
	}
}

func TestSelectPlatforms(t *testing.T) {
	all, err := SelectPlatforms("")
	if err != nil || len(all) != len(Platforms) {
		t.Fatalf("SelectPlatforms(\"\") = %d platforms, %v; want every one", len(all), err)
	}
	two, err := SelectPlatforms("linux-arm64, linux-amd64")
	if err != nil || len(two) != 2 || two[0].Name() != "linux-amd64" || two[1].Name() != "linux-arm64" {
		t.Errorf("SelectPlatforms = %v, %v; want amd64 then arm64", two, err)
	}
	if _, err := SelectPlatforms("linux-amd64,linux-riscv64"); err == nil || !strings.Contains(err.Error(), `"linux-riscv64"`) || !strings.Contains(err.Error(), "linux-armv7") {
		t.Errorf("an unknown platform: %v, want an error naming it and the known ones", err)
	}
}
