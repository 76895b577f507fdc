package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Namespace is the namespace pulselb installs into.
const Namespace = "pulselb-system"

// KubeVersion is the Kubernetes version the chart is rendered for, the
// harness's.
const KubeVersion = "v1.37.2"

// Doc is one rendered object.
type Doc struct {
	// Source is the chart file it came from: "crds/x.yaml" or
	// "templates/x.yaml".
	Source string
	// YAML is the document as rendered, without the "# Source" line.
	YAML []byte
	// Object is YAML decoded.
	Object *unstructured.Unstructured
}

// Render renders the chart in chartDir as `helm template pulselb chartDir
// --namespace Namespace --include-crds` does, with values merged over the
// chart's values.yaml, and returns the objects in Helm's install order, CRDs
// first.
func Render(chartDir string, values map[string]any) ([]Doc, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", chartDir, err)
	}
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("parsing kube version: %w", err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun = true
	install.ClientOnly = true
	install.Replace = true
	install.IncludeCRDs = true
	install.ReleaseName = "pulselb"
	install.Namespace = Namespace
	install.KubeVersion = kv
	if values == nil {
		values = map[string]any{}
	}
	rel, err := install.Run(chrt, values)
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w", chartDir, err)
	}
	if len(rel.Hooks) > 0 {
		return nil, fmt.Errorf("rendering chart %s: %d hooks; the chart must have none, kustomize cannot express them", chartDir, len(rel.Hooks))
	}
	return splitManifest(rel.Manifest)
}

// splitManifest splits Helm's manifest into its documents, each headed by
// "---\n# Source: <chart>/<file>".
func splitManifest(manifest string) ([]Doc, error) {
	const head = "---\n# Source: "
	if !strings.HasPrefix(manifest, head) {
		return nil, errors.New("manifest does not start with a # Source line")
	}
	var out []Doc
	for _, part := range strings.Split(manifest, "\n"+head)[0:] {
		part = strings.TrimPrefix(part, head)
		source, body, ok := strings.Cut(part, "\n")
		if !ok {
			return nil, fmt.Errorf("manifest document %q has no body", source)
		}
		// Drop the chart name: "pulselb/templates/x.yaml" -> "templates/x.yaml".
		if _, rest, ok := strings.Cut(source, "/"); ok {
			source = rest
		}
		body = strings.TrimSpace(body)
		if body == "" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(body), &obj.Object); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", source, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%s: an object without apiVersion, kind or name", source)
		}
		out = append(out, Doc{Source: source, YAML: []byte(body + "\n"), Object: obj})
	}
	return out, nil
}

// Find returns the rendered object of kind and name, or nil.
func Find(docs []Doc, kind, name string) *unstructured.Unstructured {
	for _, d := range docs {
		if d.Object.GetKind() == kind && d.Object.GetName() == name {
			return d.Object
		}
	}
	return nil
}

// Objects returns the objects of docs.
func Objects(docs []Doc) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		out[i] = d.Object
	}
	return out
}

// marshal is yaml.Marshal of an object, for messages.
func marshal(o any) string {
	b, err := yaml.Marshal(o)
	if err != nil {
		return err.Error()
	}
	return string(bytes.TrimSpace(b))
}
