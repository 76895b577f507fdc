package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/api/probespec"
	"github.com/pulselb/pulselb/api/v1alpha1"
	"github.com/pulselb/pulselb/prober"
	"github.com/pulselb/pulselb/test/bench/loopnodes"
)

// cheapNodes stand in for the probers of the nodes far from every victim:
// each writes its report once, saying every target assigned to it is Up,
// and renews its Lease every contract.DefaultHeartbeat, without probing. The
// API server and the controller get what such probers cost them in a
// cluster where nothing fails: reports written on change only (so, at
// start), one Lease write per node per heartbeat.
type cheapNodes struct {
	cs      kubernetes.Interface
	reports *v1alpha1.Client
	l       *layout
	nodes   []int
}

func newCheapNodes(cs kubernetes.Interface, reports *v1alpha1.Client, l *layout, real []int) *cheapNodes {
	c := &cheapNodes{cs: cs, reports: reports, l: l}
	for i := range l.nodes {
		if !slices.Contains(real, i) {
			c.nodes = append(c.nodes, i)
		}
	}
	return c
}

// writeReports writes every cheap node's report: each beacon and Service
// port whose vantages include the node, Up.
func (c *cheapNodes) writeReports(ctx context.Context) error {
	mine := map[int]*v1alpha1.ProbeReportStatus{}
	now := metav1.Now()
	for _, i := range c.nodes {
		mine[i] = &v1alpha1.ProbeReportStatus{HeartbeatTime: now, HeartbeatSeconds: contract.HeartbeatSeconds(contract.DefaultHeartbeat)}
	}
	index := map[string]int{}
	for i := range c.l.nodes {
		index[nodeName(i)] = i
	}
	up := func(node int) v1alpha1.Observation {
		return v1alpha1.Observation{Node: nodeName(node), Address: fmt.Sprintf("%s:%d", loopnodes.IP(node), beaconPort), State: v1alpha1.StateUp,
			Outcome: prober.L4OK.String(), Since: now, Latency: &metav1.Duration{Duration: 100 * time.Microsecond}}
	}
	for t := range c.l.nodes {
		for _, v := range c.l.vantages(contract.BeaconKey(nodeName(t)), nodeName(t)) {
			if st := mine[index[v]]; st != nil {
				st.Beacons = append(st.Beacons, v1alpha1.BeaconResult{Observation: up(t)})
				st.BeaconCount++
			}
		}
	}
	for s, p := range c.l.proxies {
		for _, t := range p {
			for _, v := range c.l.vantages(targetKey(s, t), nodeName(t)) {
				if st := mine[index[v]]; st != nil {
					obs := up(t)
					obs.Address = fmt.Sprintf("%s:%d", loopnodes.IP(t), firstPort+s)
					st.Results = append(st.Results, v1alpha1.ProbeResult{Service: benchNS + "/" + serviceName(s), Port: int32(firstPort + s),
						PortProtocol: string(corev1.ProtocolTCP), Protocol: string(probespec.TCP), Observation: obs})
					st.Targets++
				}
			}
		}
	}
	return loopnodes.Parallel(ctx, *workers, len(c.nodes), func(k int) error {
		i := c.nodes[k]
		r := &v1alpha1.ProbeReport{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: nodeName(i)}, Status: *mine[i]}
		if _, err := c.reports.Create(ctx, r); err != nil {
			return fmt.Errorf("writing the report of %s: %w", nodeName(i), err)
		}
		return nil
	})
}

// renew keeps every cheap node's Lease renewed, each every
// contract.DefaultHeartbeat, spread evenly over the heartbeat, until ctx is
// done. The Leases are written as an agent writes its own (an update of
// the Lease last written, without managedFields).
func (c *cheapNodes) renew(ctx context.Context) {
	if len(c.nodes) == 0 {
		return
	}
	leases := c.cs.CoordinationV1().Leases(systemNS)
	last := make([]*coordinationv1.Lease, len(c.nodes))
	duration := contract.ProberLeaseSeconds(contract.DefaultHeartbeat)
	write := func(k int) error {
		i := c.nodes[k]
		now := metav1.NewMicroTime(time.Now())
		if last[k] == nil {
			name, err := contract.ProberLeaseName(nodeName(i))
			if err != nil {
				return err
			}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: name, Labels: contract.ProberLeaseLabels()},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(nodeName(i)), LeaseDurationSeconds: ptr.To(duration),
					AcquireTime: &now, RenewTime: &now}}
			created, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			last[k] = created
			return nil
		}
		l := last[k].DeepCopy()
		l.ManagedFields = nil
		l.Spec.RenewTime = &now
		updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
		if err != nil {
			last[k] = nil // re-created or re-read below
			if got, gerr := leases.Get(ctx, l.Name, metav1.GetOptions{}); gerr == nil {
				last[k] = got
			}
			return err
		}
		last[k] = updated
		return nil
	}
	// All at once first, so that every cheap node is fresh before the
	// controller starts; then one renewal every heartbeat/len.
	if err := loopnodes.Parallel(ctx, *workers, len(c.nodes), write); err != nil {
		log.Printf("creating cheap nodes' Leases: %v", err)
	}
	tick := time.NewTicker(contract.DefaultHeartbeat / time.Duration(len(c.nodes)))
	defer tick.Stop()
	// Renewals run concurrently, as the probers' do: one slow write must
	// not hold back the others.
	sem := make(chan struct{}, 32)
	var failing atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; k = (k + 1) % len(c.nodes) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			err := write(k)
			switch {
			case err != nil && ctx.Err() != nil:
			case err != nil && !failing.Swap(true):
				log.Printf("renewing a cheap node's Lease failed (logged once until one works): %v", err)
			case err == nil:
				failing.Store(false)
			}
		})
	}
}
