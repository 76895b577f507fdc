package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readArchive returns the archive's files by name.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = data
	}
}

func blobOf(t *testing.T, files map[string][]byte, digest string) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("archive has no blob %s", digest)
	}
	return b
}

// TestWriteArchive checks the layout ctr imports: index.json naming the
// image, a manifest whose config lists the layer's diff ID, and the layer
// holding the files with their parent directories.
func TestWriteArchive(t *testing.T) {
	im := Image{
		Name: "pulselb.test/echo:1", Entrypoint: []string{"/echo"}, User: "65532:65532",
		Files: []File{{Path: "/usr/bin/echo", Mode: 0o755, Data: []byte("x")}, {Path: "/bin", Link: "usr/bin"}, {Path: "/tmp", Dir: true, Mode: 0o1777}},
	}
	var buf bytes.Buffer
	if err := im.WriteArchive(&buf); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, buf.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != im.Name {
		t.Fatalf("index.json = %s, want one manifest named %s", files["index.json"], im.Name)
	}
	var man struct {
		Config Descriptor   `json:"config"`
		Layers []Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blobOf(t, files, index.Manifests[0].Digest), &man); err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Config struct {
			User       string
			Entrypoint []string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blobOf(t, files, man.Config.Digest), &cfg); err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 1 || !slices.Equal(cfg.RootFS.DiffIDs, []string{man.Layers[0].Digest}) {
		t.Fatalf("layers %v, diff IDs %v: want one uncompressed layer whose digest is its diff ID", man.Layers, cfg.RootFS.DiffIDs)
	}
	if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/echo"}) {
		t.Errorf("config = %+v", cfg.Config)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(blobOf(t, files, man.Layers[0].Digest)))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "tmp/" && h.Mode != 0o1777 {
			t.Errorf("tmp/ mode %o, want 1777", h.Mode)
		}
	}
	if want := []string{"bin", "tmp/", "usr/", "usr/bin/", "usr/bin/echo"}; !slices.Equal(names, want) {
		t.Errorf("layer entries %v, want %v", names, want)
	}
}

func TestWriteArchiveRejects(t *testing.T) {
	for name, im := range map[string]Image{
		"no tag":         {Name: "pulselb"},
		"file twice":     {Name: "a:b", Files: []File{{Path: "/x"}, {Path: "/x"}}},
		"file as parent": {Name: "a:b", Files: []File{{Path: "/x"}, {Path: "/x/y"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := im.WriteArchive(io.Discard); err == nil {
				t.Errorf("WriteArchive accepted %+v", im)
			}
		})
	}
}

func TestStaticBinary(t *testing.T) {
	if _, err := StaticBinary("/bin/sh", "/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("StaticBinary(/bin/sh) = %v, want an error naming dynamic linking", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "pause"), filepath.Join(dir, "main.go"))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building a static program: %v\n%s", err, out)
	}
	if f, err := StaticBinary(filepath.Join(dir, "pause"), "/pause"); err != nil || f.Mode != 0o755 || len(f.Data) == 0 {
		t.Errorf("StaticBinary(pause) = %v, %v", f.Path, err)
	}
}
