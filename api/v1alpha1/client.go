package v1alpha1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// Client reads and writes ProbeReports through a dynamic client, so pulselb
// needs neither generated clientsets nor controller-runtime.
//
// +kubebuilder:object:generate=false
type Client struct {
	dyn dynamic.Interface
	ri  dynamic.NamespaceableResourceInterface
}

// NewClient returns a Client using d.
func NewClient(d dynamic.Interface) *Client {
	return &Client{dyn: d, ri: d.Resource(Resource)}
}

// Get returns the named report.
func (c *Client) Get(ctx context.Context, namespace, name string) (*ProbeReport, error) {
	u, err := c.ri.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(u)
}

// Create creates r.
func (c *Client) Create(ctx context.Context, r *ProbeReport) (*ProbeReport, error) {
	u, err := ToUnstructured(r)
	if err != nil {
		return nil, err
	}
	out, err := c.ri.Namespace(r.Namespace).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// Update replaces r; r.ResourceVersion guards against lost updates.
func (c *Client) Update(ctx context.Context, r *ProbeReport) (*ProbeReport, error) {
	u, err := ToUnstructured(r)
	if err != nil {
		return nil, err
	}
	out, err := c.ri.Namespace(r.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured(out)
}

// List lists the reports in namespace.
func (c *Client) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*ProbeReportList, error) {
	ul, err := c.ri.Namespace(namespace).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := &ProbeReportList{ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue()}}
	out.APIVersion, out.Kind = SchemeGroupVersion.String(), "ProbeReportList"
	for i := range ul.Items {
		r, err := FromUnstructured(&ul.Items[i])
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *r)
	}
	return out, nil
}

// Watch watches the reports in namespace; events carry *ProbeReport.
func (c *Client) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.ri.Namespace(namespace).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if u, ok := e.Object.(*unstructured.Unstructured); ok {
			r, err := FromUnstructured(u)
			if err != nil {
				return watch.Event{Type: watch.Error, Object: &metav1.Status{
					Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonInvalid}}, true
			}
			e.Object = r
		}
		return e, true
	}), nil
}

// NewInformer returns an informer caching the typed reports of namespace.
func NewInformer(c *Client, namespace string) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, namespace, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, namespace, opts)
		},
	}
	// The wrapper tells the reflector when the client (a fake in tests)
	// cannot stream the initial list.
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.dyn), &ProbeReport{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// ToUnstructured converts r for the dynamic client, setting its kind.
func ToUnstructured(r *ProbeReport) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r)
	if err != nil {
		return nil, fmt.Errorf("converting probe report %s/%s: %w", r.Namespace, r.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(SchemeGroupVersion.String())
	u.SetKind("ProbeReport")
	return u, nil
}

// FromUnstructured converts a dynamic client's object to a report.
func FromUnstructured(u *unstructured.Unstructured) (*ProbeReport, error) {
	r := &ProbeReport{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, r); err != nil {
		return nil, fmt.Errorf("decoding probe report %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return r, nil
}
