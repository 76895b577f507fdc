// Package oci writes OCI image archives without a registry or a container
// builder: images made of one layer of given files, with a config and a
// manifest, in an OCI image layout tar that `ctr images import`, skopeo
// (oci-archive:) and crane read. WriteArchive writes one image, as the test
// harness' kubelet nodes import it; WriteIndex writes one image per
// platform under one image index, as a release publishes it. Every byte
// is a function of the inputs: no timestamps, sorted entries.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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
	MediaManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaConfig    = "application/vnd.oci.image.config.v1+json"
	MediaLayer     = "application/vnd.oci.image.layer.v1.tar"
	MediaLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaIndex     = "application/vnd.oci.image.index.v1+json"
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

// Platform is an image's operating system and CPU, as the OCI image index
// and the image config name them: linux/arm64, linux/arm/v7.
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

// String returns os/architecture[/variant].
func (p Platform) String() string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}

// Image is what an archive holds.
type Image struct {
	// Name is the reference the image is imported as, e.g.
	// "pulselb.test/pulselb:dev" (io.containerd.image.name). WriteIndex
	// takes the name of the index instead.
	Name string
	// Platform is linux/amd64 when zero.
	Platform   Platform
	Entrypoint []string
	Cmd        []string
	User       string
	Env        []string
	// Labels go into the config (what `docker inspect` shows) and, as
	// annotations, into the manifest.
	Labels map[string]string
	Files  []File
}

// epoch is the modification time of every file and the creation time of
// every image: archives are reproducible.
var epoch = time.Unix(0, 0).UTC()

// Descriptor points at a blob, as in an OCI manifest or index.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type blob struct {
	digest string
	data   []byte
}

func newBlob(b []byte) blob {
	sum := sha256.Sum256(b)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: b}
}

func (b blob) descriptor(media string) Descriptor {
	return Descriptor{MediaType: media, Digest: b.digest, Size: int64(len(b.data))}
}

func (im Image) platform() Platform {
	if im.Platform == (Platform{}) {
		return Platform{OS: "linux", Architecture: "amd64"}
	}
	return im.Platform
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

// build returns the image's blobs (layer, config, manifest) and the
// manifest's descriptor; with compress the layer is gzipped.
func (im Image) build(compress bool) ([]blob, Descriptor, error) {
	layerTar, err := im.layer()
	if err != nil {
		return nil, Descriptor{}, err
	}
	diffID := newBlob(layerTar).digest
	layer, layerMedia := newBlob(layerTar), MediaLayer
	if compress {
		var gz bytes.Buffer
		// No name and no time in the gzip header: the same layer always
		// compresses to the same bytes with the same Go version.
		zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		if err != nil {
			return nil, Descriptor{}, err
		}
		if _, err := zw.Write(layerTar); err != nil {
			return nil, Descriptor{}, fmt.Errorf("compressing layer: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, Descriptor{}, fmt.Errorf("compressing layer: %w", err)
		}
		layer, layerMedia = newBlob(gz.Bytes()), MediaLayerGzip
	}
	type execConfig struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	pl := im.platform()
	cfg, err := json.Marshal(struct {
		Created      string     `json:"created"`
		Architecture string     `json:"architecture"`
		Variant      string     `json:"variant,omitempty"`
		OS           string     `json:"os"`
		Config       execConfig `json:"config"`
		RootFS       rootFS     `json:"rootfs"`
	}{epoch.Format(time.RFC3339), pl.Architecture, pl.Variant, pl.OS,
		execConfig{User: im.User, Env: im.Env, Entrypoint: im.Entrypoint, Cmd: im.Cmd, Labels: im.Labels},
		rootFS{Type: "layers", DiffIDs: []string{diffID}}})
	if err != nil {
		return nil, Descriptor{}, fmt.Errorf("encoding image config: %w", err)
	}
	config := newBlob(cfg)
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaManifest,
		"config":        config.descriptor(MediaConfig),
		"layers":        []Descriptor{layer.descriptor(layerMedia)},
	}
	if len(im.Labels) > 0 {
		manifest["annotations"] = im.Labels
	}
	man, err := json.Marshal(manifest)
	if err != nil {
		return nil, Descriptor{}, fmt.Errorf("encoding image manifest: %w", err)
	}
	mb := newBlob(man)
	d := mb.descriptor(MediaManifest)
	d.Platform = &pl
	return []blob{layer, config, mb}, d, nil
}

// refAnnotations names an image in index.json for containerd and for the
// OCI layout (the tag).
func refAnnotations(name string) map[string]string {
	tag := name[strings.LastIndex(name, ":")+1:]
	return map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag}
}

func checkName(name string) error {
	if name == "" || !strings.Contains(name, ":") || strings.HasSuffix(name, ":") {
		return fmt.Errorf("image name %q: want repository:tag", name)
	}
	return nil
}

// WriteArchive writes the image as an OCI image layout tar to w, its layer
// uncompressed and its manifest named in index.json.
func (im Image) WriteArchive(w io.Writer) error {
	if err := checkName(im.Name); err != nil {
		return err
	}
	blobs, man, err := im.build(false)
	if err != nil {
		return err
	}
	man.Annotations = refAnnotations(im.Name)
	return writeLayout(w, im.Name, []Descriptor{man}, blobs)
}

// WriteIndex writes an OCI image layout tar to w whose index.json names,
// as name, one image index holding the images, one per platform, their
// layers gzipped: what a registry serves for a multi-platform image, from
// which a kubelet pulls the image of its node's platform. annotations go
// on the index.
func WriteIndex(w io.Writer, name string, annotations map[string]string, images []Image) error {
	if err := checkName(name); err != nil {
		return err
	}
	if len(images) == 0 {
		return fmt.Errorf("image index %s: no images", name)
	}
	var all []blob
	var manifests []Descriptor
	seen := map[Platform]bool{}
	for _, im := range images {
		pl := im.platform()
		if seen[pl] {
			return fmt.Errorf("image index %s: two images for %s", name, pl)
		}
		seen[pl] = true
		if im.Name == "" {
			im.Name = name + " (" + pl.String() + ")"
		}
		blobs, man, err := im.build(true)
		if err != nil {
			return err
		}
		all = append(all, blobs...)
		manifests = append(manifests, man)
	}
	index := map[string]any{"schemaVersion": 2, "mediaType": MediaIndex, "manifests": manifests}
	if len(annotations) > 0 {
		index["annotations"] = annotations
	}
	ib, err := json.Marshal(index)
	if err != nil {
		return fmt.Errorf("encoding image index: %w", err)
	}
	idx := newBlob(ib)
	d := idx.descriptor(MediaIndex)
	d.Annotations = refAnnotations(name)
	return writeLayout(w, name, []Descriptor{d}, append(all, idx))
}

// writeLayout writes the OCI layout tar: oci-layout, index.json naming
// top, and the blobs, each once.
func writeLayout(w io.Writer, name string, top []Descriptor, blobs []blob) error {
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": MediaIndex, "manifests": top})
	if err != nil {
		return fmt.Errorf("encoding image index: %w", err)
	}
	tw := tar.NewWriter(w)
	put := func(file string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: file, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("writing %s of image %s: %w", file, name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return fmt.Errorf("writing %s of image %s: %w", file, name, err)
		}
		return nil
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	written := map[string]bool{}
	for _, b := range blobs {
		if written[b.digest] {
			continue
		}
		written[b.digest] = true
		if err := put("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing archive of image %s: %w", name, err)
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
