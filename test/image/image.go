// Package image writes the OCI image archives that the harness' real
// kubelet nodes import: pulselb from this checkout's static binary with
// iptables as in the Dockerfile's runtime stage, the echo backend and the
// pod sandbox (pause). The writing lives in release/oci and the Debian
// packages in release/debian, where the release images are made too;
// this package keeps the harness' names for them.
package image

import (
	"github.com/pulselb/pulselb/release/debian"
	"github.com/pulselb/pulselb/release/oci"
)

// File is one entry of an image's layer (oci.File).
type File = oci.File

// Image is what an archive holds (oci.Image); its WriteFile writes one
// linux/amd64 image with an uncompressed layer, as `ctr images import`
// reads it.
type Image = oci.Image

// DebianPackages returns the files of the installed Debian packages pkgs
// and their dependencies, as debian.Installed.
func DebianPackages(pkgs ...string) ([]File, error) { return debian.Installed(pkgs...) }

// StaticBinary returns a File at dest holding the static executable at src
// (oci.StaticBinary).
func StaticBinary(src, dest string) (File, error) { return oci.StaticBinary(src, dest) }
