package oci

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
)

// TestWriteIndex checks the multi-platform layout read back: index.json
// names one index, which holds one manifest per platform whose config says
// that platform, with gzipped layers holding the files; and the same
// inputs give the same bytes.
func TestWriteIndex(t *testing.T) {
	arm := Platform{OS: "linux", Architecture: "arm", Variant: "v7"}
	images := []Image{
		{Entrypoint: []string{"/x"}, User: "65532:65532", Labels: map[string]string{"k": "v"}, Files: []File{{Path: "/x", Mode: 0o755, Data: []byte("amd64")}}},
		{Platform: arm, Entrypoint: []string{"/x"}, Files: []File{{Path: "/x", Mode: 0o755, Data: []byte("arm")}, {Path: "/lib", Link: "usr/lib"}}},
	}
	var one, two bytes.Buffer
	if err := WriteIndex(&one, "example.test/x:1", map[string]string{"a": "b"}, images); err != nil {
		t.Fatal(err)
	}
	if err := WriteIndex(&two, "example.test/x:1", map[string]string{"a": "b"}, images); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Error("the same images gave two different archives")
	}
	a, err := ReadArchive(bytes.NewReader(one.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Index.Manifests) != 1 || a.Index.Manifests[0].MediaType != MediaIndex || a.Index.Manifests[0].Annotations["io.containerd.image.name"] != "example.test/x:1" {
		t.Fatalf("index.json = %+v, want one index named example.test/x:1", a.Index)
	}
	var idx Index
	if err := a.JSON(a.Index.Manifests[0], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 2 || idx.Annotations["a"] != "b" {
		t.Fatalf("index = %+v", idx)
	}
	for i, want := range []Platform{{OS: "linux", Architecture: "amd64"}, arm} {
		d := idx.Manifests[i]
		var man Manifest
		var cfg Config
		if err := a.JSON(d, &man); err != nil {
			t.Fatal(err)
		}
		if err := a.JSON(man.Config, &cfg); err != nil {
			t.Fatal(err)
		}
		if *d.Platform != want || cfg.Platform != want {
			t.Errorf("manifest %d: index says %v, config %v; want %v", i, d.Platform, cfg.Platform, want)
		}
		files, err := a.LayerFiles(man.Layers[0])
		if err != nil || man.Layers[0].MediaType != MediaLayerGzip {
			t.Fatalf("layer %+v: %v", man.Layers[0], err)
		}
		if got := string(files["x"].Data); got != string(images[i].Files[0].Data) {
			t.Errorf("manifest %d: /x holds %q", i, got)
		}
	}
	if err := WriteIndex(&one, "x:1", nil, []Image{images[0], images[0]}); err == nil {
		t.Error("WriteIndex accepted two images for one platform")
	}
}

// TestImagesChainID checks an index read back with ImageIndex and Images:
// one image per platform in order, and each one's ChainID is the digest of
// its uncompressed layer (one layer: the chain is the layer's diff ID), the
// snapshot name containerd unpacks it to; and the chain of two layers is
// the specification's sha256 of "chain diffID".
func TestImagesChainID(t *testing.T) {
	arm := Platform{OS: "linux", Architecture: "arm64"}
	images := []Image{
		{Files: []File{{Path: "/x", Mode: 0o755, Data: []byte("amd64")}}},
		{Platform: arm, Files: []File{{Path: "/x", Mode: 0o755, Data: []byte("arm64")}}},
	}
	var buf bytes.Buffer
	if err := WriteIndex(&buf, "example.test/x:1", nil, images); err != nil {
		t.Fatal(err)
	}
	a, err := ReadArchive(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	top, idx, err := a.ImageIndex()
	if err != nil || top.Annotations["io.containerd.image.name"] != "example.test/x:1" {
		t.Fatalf("ImageIndex: %+v, %v", top, err)
	}
	got, err := a.Images(idx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Config.Platform != (Platform{OS: "linux", Architecture: "amd64"}) || got[1].Config.Platform != arm {
		t.Fatalf("Images = %+v, want amd64 then arm64", got)
	}
	chains := map[string]bool{}
	for _, im := range got {
		layer, err := a.Blob(im.Manifest.Layers[0])
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(layer))
		if err != nil {
			t.Fatal(err)
		}
		tarBytes, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(tarBytes)
		if want := "sha256:" + hex.EncodeToString(sum[:]); im.ChainID() != want {
			t.Errorf("%s: ChainID %s, want the uncompressed layer's digest %s", im.Config.Platform, im.ChainID(), want)
		}
		chains[im.ChainID()] = true
	}
	if len(chains) != 2 {
		t.Errorf("two images with different files have chain IDs %v", chains)
	}

	two := PlatformImage{}
	two.Config.RootFS.DiffIDs = []string{"sha256:aa", "sha256:bb"}
	sum := sha256.Sum256([]byte("sha256:aa sha256:bb"))
	if want := "sha256:" + hex.EncodeToString(sum[:]); two.ChainID() != want {
		t.Errorf("ChainID of two layers = %s, want %s", two.ChainID(), want)
	}
	if _, _, err := (&Archive{}).ImageIndex(); err == nil {
		t.Error("ImageIndex of an archive naming no index gave no error")
	}
}
