package dnsexport

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/pulselb/pulselb/api/contract"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// DNSEndpointResource is external-dns' DNSEndpoint CRD, read by its "crd"
// source.
var DNSEndpointResource = schema.GroupVersionResource{Group: "externaldns.k8s.io", Version: "v1alpha1", Resource: "dnsendpoints"}

// Labels on every DNSEndpoint pulselb writes; an object without them is
// never changed or deleted.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "pulselb"
)

// ErrNotManaged is returned when a DNSEndpoint with the Service's name
// exists but was not written by pulselb.
var ErrNotManaged = errors.New("dnsendpoint exists and is not managed by pulselb")

// DesiredEndpoint returns the DNSEndpoint that should exist for svc: named
// like the Service, in its namespace, owned by it (so the garbage
// collector removes it with the Service), with one endpoint per hostname
// and address family whose targets are the healthy IPs and whose
// recordTTL is pulselb.io/dns-ttl, or defaultTTL (0: contract.DefaultDNSTTL) when
// unset. It returns nil when none should exist:
// no hostnames, or no IPs. Invalid annotation values are not used.
func DesiredEndpoint(svc *corev1.Service, defaultTTL uint32) *unstructured.Unstructured {
	s := FromService(svc)
	s.TTL = orDefault(s.TTL, orDefault(defaultTTL, contract.DefaultDNSTTL))
	ips := normaliseIPs(s.IPs)
	if len(s.Hostnames) == 0 || len(ips) == 0 {
		return nil
	}
	var v4, v6 []any
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip.String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	var endpoints []any
	for _, h := range s.Hostnames {
		for _, fam := range []struct {
			typ     string
			targets []any
		}{{"A", v4}, {"AAAA", v6}} {
			if len(fam.targets) == 0 {
				continue
			}
			endpoints = append(endpoints, map[string]any{
				"dnsName":    h,
				"recordType": fam.typ,
				"targets":    fam.targets,
				"recordTTL":  int64(s.TTL),
			})
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": DNSEndpointResource.GroupVersion().String(),
		"kind":       "DNSEndpoint",
		"spec":       map[string]any{"endpoints": endpoints},
	}}
	u.SetNamespace(svc.Namespace)
	u.SetName(svc.Name)
	u.SetLabels(map[string]string{LabelManagedBy: managedBy})
	u.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "v1",
		Kind:       "Service",
		Name:       svc.Name,
		UID:        svc.UID,
		Controller: ptr.To(true),
	}})
	return u
}

// EndpointAction is what a plan does to the cluster.
type EndpointAction string

// The actions of an EndpointPlan.
const (
	EndpointNone   EndpointAction = "none"
	EndpointCreate EndpointAction = "create"
	EndpointUpdate EndpointAction = "update"
	EndpointDelete EndpointAction = "delete"
)

// EndpointPlan is the one write that makes the current DNSEndpoint the
// desired one.
type EndpointPlan struct {
	Action EndpointAction
	// Object is what to create or update with, or what to delete.
	Object *unstructured.Unstructured
}

// PlanEndpoint compares desired (nil: should not exist) with current (nil:
// does not exist). It is pure. An existing object not labelled as
// pulselb's is never planned for change: that is ErrNotManaged.
func PlanEndpoint(desired, current *unstructured.Unstructured) (EndpointPlan, error) {
	if current != nil && current.GetLabels()[LabelManagedBy] != managedBy {
		if desired == nil {
			return EndpointPlan{Action: EndpointNone}, nil
		}
		return EndpointPlan{}, fmt.Errorf("%s/%s: %w", current.GetNamespace(), current.GetName(), ErrNotManaged)
	}
	switch {
	case desired == nil && current == nil:
		return EndpointPlan{Action: EndpointNone}, nil
	case desired == nil:
		return EndpointPlan{Action: EndpointDelete, Object: current}, nil
	case current == nil:
		return EndpointPlan{Action: EndpointCreate, Object: desired}, nil
	}
	if reflect.DeepEqual(desired.Object["spec"], current.Object["spec"]) &&
		reflect.DeepEqual(desired.GetOwnerReferences(), current.GetOwnerReferences()) {
		return EndpointPlan{Action: EndpointNone}, nil
	}
	// Keep what others set on the object (status, other labels and
	// annotations, resourceVersion for optimistic concurrency).
	next := current.DeepCopy()
	next.Object["spec"] = desired.Object["spec"]
	next.SetOwnerReferences(desired.GetOwnerReferences())
	labels := next.GetLabels()
	labels[LabelManagedBy] = managedBy
	next.SetLabels(labels)
	return EndpointPlan{Action: EndpointUpdate, Object: next}, nil
}

// EndpointWriter keeps one DNSEndpoint per Service equal to DesiredEndpoint,
// writing only the difference.
type EndpointWriter struct {
	client     dynamic.Interface
	defaultTTL uint32
}

// NewEndpointWriter returns a writer using client; defaultTTL (0:
// contract.DefaultDNSTTL) is the recordTTL of Services without pulselb.io/dns-ttl.
func NewEndpointWriter(client dynamic.Interface, defaultTTL uint32) *EndpointWriter {
	return &EndpointWriter{client: client, defaultTTL: defaultTTL}
}

// Sync makes svc's DNSEndpoint match DesiredEndpoint and returns the
// action it took. An error is temporary (retry with backoff), except
// ErrNotManaged, which is the user's to resolve.
func (w *EndpointWriter) Sync(ctx context.Context, svc *corev1.Service) (EndpointAction, error) {
	return w.apply(ctx, svc.Namespace, svc.Name, DesiredEndpoint(svc, w.defaultTTL))
}

// Forget deletes the DNSEndpoint of a Service that is gone or no longer
// pulselb's, if pulselb wrote it. The garbage collector also removes it
// through the owner reference; Forget makes it immediate.
func (w *EndpointWriter) Forget(ctx context.Context, namespace, name string) (EndpointAction, error) {
	return w.apply(ctx, namespace, name, nil)
}

func (w *EndpointWriter) apply(ctx context.Context, namespace, name string, desired *unstructured.Unstructured) (EndpointAction, error) {
	res := w.client.Resource(DNSEndpointResource).Namespace(namespace)
	current, err := res.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		current = nil
	case err != nil:
		return EndpointNone, fmt.Errorf("getting dnsendpoint %s/%s: %w", namespace, name, err)
	}
	plan, err := PlanEndpoint(desired, current)
	if err != nil {
		return EndpointNone, err
	}
	switch plan.Action {
	case EndpointCreate:
		_, err = res.Create(ctx, plan.Object, metav1.CreateOptions{FieldManager: managedBy})
	case EndpointUpdate:
		_, err = res.Update(ctx, plan.Object, metav1.UpdateOptions{FieldManager: managedBy})
	case EndpointDelete:
		uid := plan.Object.GetUID()
		err = res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) {
			err = nil
		}
	}
	if err != nil {
		return EndpointNone, fmt.Errorf("%s dnsendpoint %s/%s: %w", plan.Action, namespace, name, err)
	}
	return plan.Action, nil
}
