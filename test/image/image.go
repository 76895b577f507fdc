// Package image writes OCI image archives without a registry or a container
// builder: one uncompressed layer made of files from this machine, a config
// and a manifest, in an OCI image layout tar that `ctr images import`
// reads. The harness' real kubelet nodes run images made this way: pulselb
// from this checkout's static binary with iptables as in the Dockerfile's
// runtime stage, the echo backend and the pod sandbox (pause).
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Media types of the OCI image specification v1.1.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
)

// File is one entry of the image's layer. Exactly one of Data, Link, Dir
// applies: Link makes a symbolic link, Dir a directory, otherwise a regular
// file holding Data.
type File struct {
	Path string // absolute path in the image
	Mode fs.FileMode
	Data []byte
	Link string
	Dir  bool
}

// Image is what an archive holds.
type Image struct {
	// Name is the reference the image is imported as, e.g.
	// "pulselb.test/pulselb:dev" (io.containerd.image.name).
	Name       string
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	Files      []File
}

// epoch is the modification time of every file: archives are reproducible.
var epoch = time.Unix(0, 0).UTC()

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type blob struct {
	digest string
	data   []byte
}

func newBlob(b []byte) blob {
	sum := sha256.Sum256(b)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: b}
}

// layer returns the layer tar: the files sorted by path, with every parent
// directory present.
func (im Image) layer() ([]byte, error) {
	entries := map[string]File{}
	for _, f := range im.Files {
		p := path.Clean("/" + f.Path)
		if p == "/" {
			return nil, fmt.Errorf("image %s: file with an empty path", im.Name)
		}
		if old, ok := entries[p]; ok && (!old.Dir || !f.Dir) {
			return nil, fmt.Errorf("image %s: %s added twice", im.Name, p)
		}
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if e, ok := entries[d]; ok && !e.Dir {
				return nil, fmt.Errorf("image %s: %s is not a directory but holds %s", im.Name, d, p)
			}
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := entries[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if h.Mode == 0 {
				h.Mode = 0o755
			}
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if f.Mode&fs.ModeSticky != 0 || f.Mode&0o1000 != 0 {
			h.Mode |= 0o1000
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing layer entry %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("writing layer entry %s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing layer: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteArchive writes the image as an OCI image layout tar to w.
func (im Image) WriteArchive(w io.Writer) error {
	if im.Name == "" || !strings.Contains(im.Name, ":") {
		return fmt.Errorf("image name %q: want repository:tag", im.Name)
	}
	layerTar, err := im.layer()
	if err != nil {
		return err
	}
	layer := newBlob(layerTar)
	type execConfig struct {
		User       string   `json:"User,omitempty"`
		Env        []string `json:"Env,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
	}
	cfg, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": "amd64",
		"os":           "linux",
		"config":       execConfig{User: im.User, Env: im.Env, Entrypoint: im.Entrypoint, Cmd: im.Cmd},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
	})
	if err != nil {
		return fmt.Errorf("encoding image config: %w", err)
	}
	config := newBlob(cfg)
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: config.digest, Size: int64(len(config.data))},
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: layer.digest, Size: int64(len(layer.data))}},
	})
	if err != nil {
		return fmt.Errorf("encoding image manifest: %w", err)
	}
	manifest := newBlob(man)
	tag := im.Name[strings.LastIndex(im.Name, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []descriptor{{MediaType: mediaManifest, Digest: manifest.digest, Size: int64(len(manifest.data)),
			Platform:    &platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{"io.containerd.image.name": im.Name, "org.opencontainers.image.ref.name": tag}}},
	})
	if err != nil {
		return fmt.Errorf("encoding image index: %w", err)
	}
	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("writing %s of image %s: %w", name, im.Name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("writing %s of image %s: %w", name, im.Name, err)
		}
		return nil
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	for _, b := range []blob{layer, config, manifest} {
		if err := put("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing archive of image %s: %w", im.Name, err)
	}
	return nil
}

// WriteFile writes the archive to path.
func (im Image) WriteFile(p string) error {
	f, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("creating archive of image %s: %w", im.Name, err)
	}
	if err := im.WriteArchive(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing archive of image %s: %w", im.Name, err)
	}
	return nil
}

// StaticBinary returns a File at dest holding the executable at src, which
// must be statically linked (no program interpreter): an image without a C
// library cannot run anything else.
func StaticBinary(src, dest string) (File, error) {
	ef, err := elf.Open(src)
	if err != nil {
		return File{}, fmt.Errorf("reading executable %s: %w", src, err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return File{}, fmt.Errorf("executable %s is dynamically linked (build it with CGO_ENABLED=0)", src)
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return File{}, fmt.Errorf("reading executable %s: %w", src, err)
	}
	return File{Path: dest, Mode: 0o755, Data: b}, nil
}
