package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pulselb/pulselb/api/contract"
)

// Conflict is a host port a Service's proxy pod cannot get: its pods are
// Pending because other pods hold the port on the eligible nodes.
type Conflict struct {
	Protocol corev1.Protocol
	Port     int32
	// Nodes hold the port, sorted; empty when the holders are pods
	// pulselb does not watch (outside pulselb-system).
	Nodes []string
	// Holders name what holds it: "service ns/name" for another pulselb
	// proxy, "pod ns/name" otherwise; sorted.
	Holders []string
}

// String reads as an Event message.
func (c Conflict) String() string {
	if len(c.Nodes) == 0 {
		return fmt.Sprintf("port %s:%d is taken on every eligible node by pods outside pulselb's view", c.Protocol, c.Port)
	}
	return fmt.Sprintf("port %s:%d is held on node %s by %s", c.Protocol, c.Port,
		contract.ShortList(c.Nodes, 5), contract.ShortList(c.Holders, 5))
}

// schedulerPortsMessage is what the scheduler's NodePorts plugin writes in a
// Pending pod's PodScheduled condition when host ports are taken.
const schedulerPortsMessage = "free ports"

// PortConflicts returns the host port conflicts keeping svc's proxy pods
// Pending. own are the Service's proxy pods; others are the other pods in
// view (any may include own pods, they are skipped). A Pending pod whose
// ports are held only by the Service's own pods is a rollout in progress,
// not a conflict.
func PortConflicts(svc *corev1.Service, own, others []*corev1.Pod) []Conflict {
	var pending *corev1.Pod
	for _, p := range own {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && unschedulableForPorts(p) {
			pending = p
			break
		}
	}
	if pending == nil {
		return nil
	}
	type key struct {
		proto corev1.Protocol
		port  int32
	}
	wanted := map[key]bool{}
	var order []key
	for _, c := range pending.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.HostPort == 0 {
				continue
			}
			k := key{cp.Protocol, cp.HostPort}
			if k.proto == "" {
				k.proto = corev1.ProtocolTCP
			}
			if !wanted[k] {
				wanted[k] = true
				order = append(order, k)
			}
		}
	}
	nodes := map[key]map[string]bool{}
	holders := map[key]map[string]bool{}
	ownKey := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	for _, p := range others {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		holder := "pod " + p.Namespace + "/" + p.Name
		if k, ok := contract.ServiceOf(p.Labels); ok {
			if k == ownKey {
				continue
			}
			holder = "service " + k.String()
		}
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				k := key{cp.Protocol, cp.HostPort}
				if k.proto == "" {
					k.proto = corev1.ProtocolTCP
				}
				if cp.HostPort == 0 || !wanted[k] {
					continue
				}
				if nodes[k] == nil {
					nodes[k], holders[k] = map[string]bool{}, map[string]bool{}
				}
				nodes[k][p.Spec.NodeName] = true
				holders[k][holder] = true
			}
		}
	}
	var out []Conflict
	for _, k := range order {
		if len(nodes[k]) > 0 {
			out = append(out, Conflict{Protocol: k.proto, Port: k.port, Nodes: slices.Sorted(maps.Keys(nodes[k])), Holders: slices.Sorted(maps.Keys(holders[k]))})
		}
	}
	if len(out) == 0 && !heldByOwn(pending, own) {
		for _, k := range order {
			out = append(out, Conflict{Protocol: k.proto, Port: k.port})
		}
	}
	return out
}

// heldByOwn reports whether another of the Service's own pods is bound
// (running or terminating: a terminating pod holds its host ports until it
// is gone), so the Pending pod may simply wait for it during a rollout.
func heldByOwn(pending *corev1.Pod, own []*corev1.Pod) bool {
	for _, p := range own {
		if p != pending && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}

func unschedulableForPorts(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
			c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, schedulerPortsMessage) {
			return true
		}
	}
	return false
}
