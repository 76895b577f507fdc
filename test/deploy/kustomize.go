package deploy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build builds the kustomization in dir as `kubectl apply -k dir` does
// and returns its objects.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("building kustomization %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("building kustomization %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}
