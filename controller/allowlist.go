package controller

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/placement"
)

// placementConfig returns the placement configuration for svc: the
// controller's, with the probers' addresses when svc restricts its clients,
// whose proxies must let the probers through (contract.ProbeSourceAddrs).
func (c *Controller) placementConfig(svc *corev1.Service) (placement.Config, error) {
	cfg := c.cfg.Placement
	if ranges, _ := contract.SourceRanges(svc); len(ranges) == 0 {
		return cfg, nil
	}
	probers, err := c.pods.List(labels.SelectorFromSet(labels.Set{contract.LabelAppName: contract.ProberAppName}))
	if err != nil {
		return cfg, fmt.Errorf("listing prober pods: %w", err)
	}
	cfg.ProbeSources = contract.ProbeSourceAddrs(probers)
	return cfg, nil
}

// proberAddressesChanged enqueues every served Service with source ranges
// when a prober pod's addresses (or whether it counts) changed: their
// proxies' allow-lists name the probers.
func (c *Controller) proberAddressesChanged(oldObj, newObj any) {
	var before, after []netip.Addr
	if p, ok := unwrap(oldObj).(*corev1.Pod); ok {
		before = contract.ProbeSourceAddrs([]*corev1.Pod{p})
	}
	if p, ok := unwrap(newObj).(*corev1.Pod); ok {
		after = contract.ProbeSourceAddrs([]*corev1.Pod{p})
	}
	if slices.Equal(before, after) {
		return
	}
	services, err := c.services.List(everything)
	if err != nil {
		return
	}
	for _, svc := range services {
		if ranges, _ := contract.SourceRanges(svc); len(ranges) > 0 && c.wants(svc) {
			c.queue.Add(cache.MetaObjectToName(svc))
		}
	}
}
