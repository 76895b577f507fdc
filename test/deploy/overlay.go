package deploy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// BaseImage is the image deploy/base ships.
const BaseImage = "ghcr.io/pulselb/pulselb"

// Overlay builds the kustomization base (deploy/base) as a user overriding
// only the image would: a kustomization in the scratch directory dir with
// base as its resource, an `images:` entry for the controller and prober,
// and a patch of the controller's --proxy-image argument
// (deploy/base/kustomization.yaml says to patch it).
func Overlay(base, image, dir string) ([]*unstructured.Unstructured, error) {
	base, err := filepath.Abs(base)
	if err != nil {
		return nil, err
	}
	objs, err := Build(base)
	if err != nil {
		return nil, err
	}
	arg, err := proxyImageArg(objs)
	if err != nil {
		return nil, err
	}
	name, tag, _ := strings.Cut(image, ":")
	// kustomize takes only relative paths to other kustomizations.
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		return nil, err
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: %s
    newName: %s
    newTag: %s
patches:
  - target: {kind: Deployment, name: pulselb-controller}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/args/%d
        value: --proxy-image=%s
`, rel, BaseImage, name, tag, arg, image)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	objs, err = Build(dir)
	if err != nil {
		return nil, fmt.Errorf("building the overlay of %s: %w", base, err)
	}
	return objs, nil
}

// proxyImageArg returns the index of the controller's --proxy-image
// argument in objs.
func proxyImageArg(objs []*unstructured.Unstructured) (int, error) {
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != "pulselb-controller" {
			continue
		}
		v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
		ctrs, _ := v.([]any)
		if len(ctrs) == 0 {
			return 0, errors.New("pulselb-controller has no containers")
		}
		ctr, _ := ctrs[0].(map[string]any)
		args, _ := ctr["args"].([]any)
		for i, a := range args {
			if s, _ := a.(string); strings.HasPrefix(s, "--proxy-image=") {
				return i, nil
			}
		}
	}
	return 0, errors.New("deploy/base's controller has no --proxy-image argument")
}
