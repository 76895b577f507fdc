package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pulselb/pulselb/release"
	"github.com/pulselb/pulselb/release/oci"
	"github.com/pulselb/pulselb/test/cluster"
)

// releaseImage is the release's multi-platform image as `make release`
// writes it (release.ImageFile), read back.
type releaseImage struct {
	path string
	// name is the reference the index is imported as
	// (io.containerd.image.name), ghcr.io/pulselb/pulselb:dev outside a
	// release tag.
	name   string
	images []oci.PlatformImage
	// own is the image of the machine's platform: what a kubelet on it
	// must run.
	own oci.PlatformImage
}

// readReleaseImage reads the image index of the release in
// $PULSELB_RELEASE_DIR (`make e2e` sets it; the checkout's dist/ by
// default). It fails t when there is none, when the checkout's pulselb
// (anything but test/ and the docs) differs from the release's commit
// (`make release` builds HEAD's tree, so uncommitted changes are not in
// it), or when it has no image for this machine's platform.
func readReleaseImage(t *testing.T) releaseImage {
	t.Helper()
	root := filepath.Join("..", "..")
	dir := os.Getenv("PULSELB_RELEASE_DIR")
	if dir == "" {
		dir = filepath.Join(root, "dist")
	}
	r := releaseImage{path: filepath.Join(dir, release.ImageFile)}
	f, err := os.Open(r.path)
	if err != nil {
		t.Fatalf("the release image index: %v; run `make release` first (`make e2e` does)", err)
	}
	defer f.Close()
	a, err := oci.ReadArchive(f)
	if err != nil {
		t.Fatalf("reading %s: %v", r.path, err)
	}
	top, idx, err := a.ImageIndex()
	if err != nil {
		t.Fatalf("reading %s: %v", r.path, err)
	}
	r.name = top.Annotations["io.containerd.image.name"]
	if r.images, err = a.Images(idx); err != nil {
		t.Fatalf("reading %s: %v", r.path, err)
	}
	// The image is pulselb as of the release's commit: fail when the
	// checkout's pulselb differs from it (the test harness and the docs
	// aside), committed or not.
	built := idx.Annotations["org.opencontainers.image.revision"]
	diff, err := exec.Command("git", "-C", root, "diff", "--stat", built, "--", ".", ":(exclude)test", ":(exclude)docs", ":(exclude)*.md").CombinedOutput()
	if err != nil {
		t.Fatalf("%s is the release of commit %q; comparing the checkout with it: %v %s", r.path, built, err, diff)
	}
	if len(diff) > 0 {
		t.Fatalf("%s is the release of commit %s, and the checkout differs from it:\n%s\ncommit and run `make release` again (it builds HEAD)", r.path, built, diff)
	}
	var platforms []string
	for _, im := range r.images {
		platforms = append(platforms, im.Config.Platform.String())
		if im.Config.OS == runtime.GOOS && im.Config.Architecture == runtime.GOARCH {
			r.own = im
		}
	}
	if r.own.Config.OS == "" {
		t.Fatalf("%s has images for %v, none for this machine (%s/%s)", r.path, platforms, runtime.GOOS, runtime.GOARCH)
	}
	t.Logf("release image %s (%s) from %s, images for %v", r.name, idx.Annotations["org.opencontainers.image.revision"], r.path, platforms)
	return r
}

// runsOwnPlatform checks that every container of pulselb's pods (the
// controllers, probers and proxies) was made from the image of the
// machine's platform in the index: containerd's snapshot under the
// container sits on that image's layers, not on another platform's, and
// that image's config says the machine's architecture.
func (r releaseImage) runsOwnPlatform(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	byChain := map[string]oci.PlatformImage{}
	for _, im := range r.images {
		byChain[im.ChainID()] = im
	}
	checked := 0
	for _, p := range listPods(ctx, t, c.Client, systemNamespace, "") {
		for _, st := range p.Status.ContainerStatuses {
			chain, err := c.ContainerImageLayers(ctx, systemNamespace, p.Name, st.Name)
			if err != nil {
				t.Errorf("pod %s: %v", p.Name, err)
				continue
			}
			im, ok := byChain[chain]
			switch {
			case !ok:
				t.Errorf("pod %s container %s (image %s) runs on layers %s, of no image in %s", p.Name, st.Name, st.Image, chain, r.path)
			case im.Descriptor.Digest != r.own.Descriptor.Digest:
				t.Errorf("pod %s container %s on node %s runs the %s image (%s) of %s, want %s's (%s)", p.Name, st.Name, p.Spec.NodeName,
					im.Config.Platform, im.Descriptor.Digest, r.name, r.own.Config.Platform, r.own.Descriptor.Digest)
			}
			checked++
		}
	}
	if checked < 2+3+2 {
		t.Errorf("checked %d containers, want at least the 2 controllers', 3 probers' and 2 proxies'", checked)
	}
	t.Logf("%d containers run the %s image of %s (manifest %s, layers %s)", checked, r.own.Config.Platform, r.name, r.own.Descriptor.Digest, r.own.ChainID())
}
