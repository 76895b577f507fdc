package v1alpha1

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// controllerGen is the pinned generator; keep it equal to the Makefile's.
const controllerGen = "sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0"

// TestGeneratedFilesUpToDate regenerates the deepcopy code and the CRD into a
// temporary directory and fails when the committed files differ: run
// `make generate` after changing types.go.
func TestGeneratedFilesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen; skipped with -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	install := exec.CommandContext(ctx, "go", "install", controllerGen)
	install.Dir = root
	install.Env = append(os.Environ(), "GOBIN="+filepath.Join(tmp, "bin"))
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("cannot build %s (no module proxy?): %v\n%s", controllerGen, err, out)
	}
	gen := exec.CommandContext(ctx, filepath.Join(tmp, "bin", "controller-gen"),
		"object", "paths=./api/...", "output:object:dir="+filepath.Join(tmp, "obj"),
		"crd:crdVersions=v1", "output:crd:dir="+filepath.Join(tmp, "crd"))
	gen.Dir = root
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, out)
	}
	for _, f := range []struct{ fresh, committed string }{
		{filepath.Join(tmp, "obj", "zz_generated.deepcopy.go"), filepath.Join(root, "api", "v1alpha1", "zz_generated.deepcopy.go")},
		{filepath.Join(tmp, "crd", "pulselb.io_probereports.yaml"), filepath.Join(root, "deploy", "crds", "pulselb.io_probereports.yaml")},
	} {
		want, err := os.ReadFile(f.fresh)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.committed)
		if err != nil {
			t.Fatalf("%v; run make generate", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run make generate", f.committed)
		}
	}
}
