package controller

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pulselb/pulselb/dnsexport"
)

// DNSEndpointWriter keeps one external-dns DNSEndpoint per Service;
// *dnsexport.EndpointWriter is the real one. Both methods return the
// action taken; an error is temporary except dnsexport.ErrNotManaged.
type DNSEndpointWriter interface {
	// Sync makes the Service's DNSEndpoint match its annotations and
	// status.loadBalancer.
	Sync(ctx context.Context, svc *corev1.Service) (dnsexport.EndpointAction, error)
	// Forget deletes the DNSEndpoint pulselb wrote for the Service.
	Forget(ctx context.Context, namespace, name string) (dnsexport.EndpointAction, error)
}

// syncDNSEndpoint writes svc's DNSEndpoint from the status just written.
// An object of that name that pulselb did not write is the user's to
// resolve: a Warning Event, not a retry.
func (c *Controller) syncDNSEndpoint(ctx context.Context, svc *corev1.Service) error {
	if c.cfg.DNSEndpoints == nil {
		return nil
	}
	action, err := c.cfg.DNSEndpoints.Sync(ctx, svc)
	if errors.Is(err, dnsexport.ErrNotManaged) {
		c.recorder.Eventf(svc, corev1.EventTypeWarning, ReasonDNSEndpointConflict,
			"DNSEndpoint %s/%s exists and was not written by pulselb; not touching it: delete it, or label it %s=pulselb to hand it over",
			svc.Namespace, svc.Name, dnsexport.LabelManagedBy)
		return nil
	}
	if err != nil {
		return err
	}
	c.dnsEndpointWritten(ctx, action)
	return nil
}

// forgetDNSEndpoint deletes the DNSEndpoint of a Service being released.
func (c *Controller) forgetDNSEndpoint(ctx context.Context, svc *corev1.Service) error {
	if c.cfg.DNSEndpoints == nil {
		return nil
	}
	action, err := c.cfg.DNSEndpoints.Forget(ctx, svc.Namespace, svc.Name)
	if err != nil {
		return err
	}
	c.dnsEndpointWritten(ctx, action)
	return nil
}

func (c *Controller) dnsEndpointWritten(ctx context.Context, action dnsexport.EndpointAction) {
	if action == dnsexport.EndpointNone {
		return
	}
	c.metrics.writes.WithLabelValues("dnsendpoints", string(action)).Inc()
	klog.FromContext(ctx).Info("Applied DNSEndpoint", "action", action)
}
