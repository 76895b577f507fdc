package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestImageBinaryStatic runs the build the Dockerfile runs (`make
// image-binary`) and checks the binary is static: no program interpreter
// and no dynamic section, so it runs on any base image. No Docker engine
// runs in CI; this is the part of the image build that can go wrong in Go.
func TestImageBinaryStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pulselb")
	}
	dockerfile, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	run := regexp.MustCompile(`(?m)^RUN make image-binary IMAGE_BINARY=(\S+)$`).FindSubmatch(dockerfile)
	if run == nil {
		t.Fatal("the Dockerfile does not build with `RUN make image-binary IMAGE_BINARY=...`")
	}
	if !strings.Contains(string(dockerfile), "COPY --from=build "+string(run[1])+" ") {
		t.Errorf("the Dockerfile does not copy %s, the binary it builds", run[1])
	}
	if !regexp.MustCompile(`(?m)^USER 65532`).Match(dockerfile) {
		t.Error("the Dockerfile does not run as user 65532")
	}

	bin := filepath.Join(t.TempDir(), "pulselb")
	cmd := exec.CommandContext(t.Context(), "make", "-C", repoRoot, "image-binary", "IMAGE_BINARY="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image-binary: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("reading the binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a program interpreter (PT_INTERP): it is dynamically linked")
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Error("the binary has a dynamic section (PT_DYNAMIC)")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary imports libraries %v (%v)", libs, err)
	}
	if s := f.Section(".symtab"); s != nil {
		t.Error("the binary has a symbol table; -ldflags -s strips it")
	}
	out, err := exec.CommandContext(t.Context(), bin, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "controller") {
		t.Errorf("%s --help = %v\n%s", bin, err, out)
	}
}
