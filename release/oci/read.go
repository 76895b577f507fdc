package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Archive is an OCI image layout tar read back: its index.json and blobs.
type Archive struct {
	Index Index
	blobs map[string][]byte
}

// Index is an OCI image index (index.json or an index blob).
type Index struct {
	MediaType   string            `json:"mediaType"`
	Manifests   []Descriptor      `json:"manifests"`
	Annotations map[string]string `json:"annotations"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	MediaType   string            `json:"mediaType"`
	Config      Descriptor        `json:"config"`
	Layers      []Descriptor      `json:"layers"`
	Annotations map[string]string `json:"annotations"`
}

// Config is the part of an image config that pulselb's images set.
type Config struct {
	Platform
	Created string `json:"created"`
	Config  struct {
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS rootFS `json:"rootfs"`
}

// ReadArchive reads an OCI image layout tar.
func ReadArchive(r io.Reader) (*Archive, error) {
	a := &Archive{blobs: map[string][]byte{}}
	var index []byte
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading image archive: %w", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("reading %s of image archive: %w", h.Name, err)
		}
		switch {
		case h.Name == "index.json":
			index = b
		case strings.HasPrefix(h.Name, "blobs/sha256/"):
			digest := "sha256:" + strings.TrimPrefix(h.Name, "blobs/sha256/")
			if got := newBlob(b).digest; got != digest {
				return nil, fmt.Errorf("image archive: blob %s has digest %s", digest, got)
			}
			a.blobs[digest] = b
		}
	}
	if index == nil {
		return nil, errors.New("image archive has no index.json")
	}
	if err := json.Unmarshal(index, &a.Index); err != nil {
		return nil, fmt.Errorf("decoding index.json: %w", err)
	}
	return a, nil
}

// Blob returns the blob d points at, checking its size.
func (a *Archive) Blob(d Descriptor) ([]byte, error) {
	b, ok := a.blobs[d.Digest]
	if !ok {
		return nil, fmt.Errorf("image archive has no blob %s", d.Digest)
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
	return b, nil
}

// JSON decodes the blob d points at into v.
func (a *Archive) JSON(d Descriptor, v any) error {
	b, err := a.Blob(d)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding blob %s: %w", d.Digest, err)
	}
	return nil
}

// LayerFiles returns the files of the layer d points at (gzipped or not),
// by path without the leading slash; directories end in "/".
func (a *Archive) LayerFiles(d Descriptor) (map[string]File, error) {
	b, err := a.Blob(d)
	if err != nil {
		return nil, err
	}
	var r io.Reader = bytes.NewReader(b)
	switch d.MediaType {
	case MediaLayerGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		r = zr
	case MediaLayer:
	default:
		return nil, fmt.Errorf("layer %s: media type %s", d.Digest, d.MediaType)
	}
	files := map[string]File{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading layer %s: %w", d.Digest, err)
		}
		f := File{Path: "/" + strings.TrimSuffix(h.Name, "/"), Mode: h.FileInfo().Mode()}
		switch h.Typeflag {
		case tar.TypeDir:
			f.Dir = true
		case tar.TypeSymlink:
			f.Link = h.Linkname
		case tar.TypeReg:
			if f.Data, err = io.ReadAll(tr); err != nil {
				return nil, fmt.Errorf("reading layer %s: %w", d.Digest, err)
			}
		}
		files[h.Name] = f
	}
}

// ImageIndex returns the one image index that index.json names, as a
// multi-platform archive (WriteIndex) holds it, and its descriptor (which
// carries the name, io.containerd.image.name).
func (a *Archive) ImageIndex() (Descriptor, Index, error) {
	if len(a.Index.Manifests) != 1 || a.Index.Manifests[0].MediaType != MediaIndex {
		return Descriptor{}, Index{}, fmt.Errorf("index.json names %+v, want one image index", a.Index.Manifests)
	}
	var idx Index
	if err := a.JSON(a.Index.Manifests[0], &idx); err != nil {
		return Descriptor{}, Index{}, err
	}
	return a.Index.Manifests[0], idx, nil
}

// PlatformImage is one image of an image index, read back.
type PlatformImage struct {
	// Descriptor is the index's entry, with the platform the index gives.
	Descriptor Descriptor
	Manifest   Manifest
	// Config says the platform the image itself declares.
	Config Config
}

// ChainID is the chain ID of the image's layers, the identity of the
// whole stack of them applied in order (OCI image specification, "Layer
// ChainID"): containerd keeps an unpacked image's layers as the snapshot
// of that name, under every container made from the image.
func (im PlatformImage) ChainID() string {
	var chain string
	for i, diffID := range im.Config.RootFS.DiffIDs {
		if i == 0 {
			chain = diffID
			continue
		}
		chain = newBlob([]byte(chain + " " + diffID)).digest
	}
	return chain
}

// Images returns the images of idx, one per platform, with their
// manifests and configs.
func (a *Archive) Images(idx Index) ([]PlatformImage, error) {
	var out []PlatformImage
	for _, d := range idx.Manifests {
		im := PlatformImage{Descriptor: d}
		if err := a.JSON(d, &im.Manifest); err != nil {
			return nil, err
		}
		if err := a.JSON(im.Manifest.Config, &im.Config); err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}
