package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager owns the fields the tests apply.
const FieldManager = "pulselb-install"

// Applier applies objects with server-side apply and strict field
// validation, so an unknown or misspelt field is an error, not a warning.
type Applier struct {
	Dynamic dynamic.Interface
	Mapper  meta.ResettableRESTMapper
}

// Apply server-side applies obj; with dryRun the server validates and
// admits it (schemas, defaulting, admission) without storing it.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CRD applied just before: rediscover once.
		a.Mapper.Reset()
		m, err = a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("encoding %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: new(true), FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var ri dynamic.ResourceInterface = a.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s: namespaced object without a namespace", gvk.Kind, obj.GetName())
		}
		ri = a.Dynamic.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	out, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
	if err != nil {
		return nil, fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return out, nil
}

// IsCRD reports whether obj is a CustomResourceDefinition.
func IsCRD(obj *unstructured.Unstructured) bool {
	return obj.GetKind() == "CustomResourceDefinition" && obj.GroupVersionKind().Group == "apiextensions.k8s.io"
}

// IsNotFound reports whether err says an object or its kind is missing.
func IsNotFound(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// crdResource is where CustomResourceDefinitions live.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// WaitEstablished waits until the CRD name is Established, so that its
// kind can be served.
func WaitEstablished(ctx context.Context, dyn dynamic.Interface, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		crd, err := dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for CRD %s to be established: %w", name, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewApplier returns an Applier for cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	return &Applier{Dynamic: dyn, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Install applies objs for real: CRDs first (waiting until they are
// established), then the rest in order.
func (a *Applier) Install(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if !IsCRD(o) {
			continue
		}
		if _, err := a.Apply(ctx, o, false); err != nil {
			return err
		}
		if err := WaitEstablished(ctx, a.Dynamic, o.GetName(), 30*time.Second); err != nil {
			return err
		}
	}
	for _, o := range objs {
		if IsCRD(o) {
			continue
		}
		if _, err := a.Apply(ctx, o, false); err != nil {
			return err
		}
	}
	return nil
}
