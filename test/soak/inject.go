package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulselb/pulselb/test/scenario"
)

// errNoTarget is a fault that found nothing to hit.
var errNoTarget = errors.New("no target")

// inject runs fault f to its end (a node fault through its hold and heal).
func (s *state) inject(ctx context.Context, f Fault) {
	start := time.Now()
	s.event("start %s", f)
	err := s.run(ctx, f)
	s.mu.Lock()
	if err != nil {
		s.skipped++
	} else {
		s.injected[f.Kind]++
	}
	s.mu.Unlock()
	if err != nil {
		s.event("%s: %v", f.Kind, err)
	} else if f.exclusive() {
		s.event("done: %s", f)
	}
	switch {
	case f.Planned():
		s.mu.Lock()
		s.planned = append(s.planned, [2]time.Time{start, time.Now()})
		s.mu.Unlock()
	case f.Kind != EditService && f.Kind != RecreateService:
		s.window(start, time.Now(), f.Kind == KillLeader || f.Kind == KillStandby || f.Kind == RestartAPIServer || f.Kind == PauseEtcd)
	}
}

func (s *state) run(ctx context.Context, f Fault) error {
	c, sys := s.e.c, scenario.SystemNamespace
	switch f.Kind {
	case Blackhole, NodeDown:
		return s.cutNode(ctx, f)
	case Partition:
		return s.partition(ctx, f)
	case Maintenance:
		return s.maintain(ctx, f)
	case Upgrade:
		return s.upgrade(ctx)
	case KillProxy:
		pods := scenario.ListPods(ctx, c.Client, "", labelServiceNS+"="+Namespace)
		var names []string
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				names = append(names, p.Namespace+"/"+p.Name)
			}
		}
		if len(names) == 0 {
			return errNoTarget
		}
		slices.Sort(names)
		pick := names[f.Pick%len(names)]
		ns, name, _ := strings.Cut(pick, "/")
		s.event("kill -9 proxy %s", pick)
		return c.KillContainer(ns, name, "proxy")
	case KillProber:
		for _, p := range scenario.ListPods(ctx, c.Client, sys, scenario.ProberSelector) {
			if p.Spec.NodeName == f.Node {
				return c.KillContainer(sys, p.Name, "prober")
			}
		}
		return errNoTarget
	case KillLeader, KillStandby:
		leader, others := s.e.leader(ctx)
		victim := leader
		if f.Kind == KillStandby {
			victim = ""
			if len(others) > 0 {
				victim = others[f.Pick%len(others)]
			}
		}
		if victim == "" {
			return errNoTarget
		}
		if f.Kind == KillLeader {
			s.mu.Lock()
			s.leaderKilled = time.Now()
			s.mu.Unlock()
		}
		s.event("kill -9 controller %s", victim)
		return c.KillContainer(sys, victim, "controller")
	case RestartAPIServer:
		defer s.stall()()
		if err := c.RestartAPIServer(ctx); err != nil {
			return err
		}
		return s.waitAPIService(ctx)
	case PauseEtcd:
		defer s.stall()()
		s.event("etcd stopped (SIGSTOP) for %s", f.Hold)
		return c.PauseEtcd(ctx, f.Hold)
	case EditService:
		return s.editChurn(ctx)
	case RecreateService:
		return s.recreateChurn(ctx)
	}
	return fmt.Errorf("unknown fault kind %q", f.Kind)
}

// waitAPIService waits, after an API server restart, until every node not
// cut off reaches the API server through the kubernetes Service, as its
// pods do: only then is the control plane back for pulselb's controllers
// and probers, seconds after the API server is ready again (see
// cluster.WaitAPIService). A node cut off meanwhile is not waited for.
func (s *state) waitAPIService(ctx context.Context) error {
	c := s.e.c
	ready := time.Now()
	for {
		var nodes []string
		s.mu.Lock()
		for _, n := range c.Nodes() {
			if _, cut := s.cut[n]; !cut {
				nodes = append(nodes, n)
			}
		}
		s.mu.Unlock()
		err := c.WaitAPIService(ctx, nodes, time.Second)
		if err == nil {
			s.event("the API server is reachable through the kubernetes Service from every node not cut off, %s after it was ready",
				time.Since(ready).Round(time.Millisecond))
			return nil
		}
		if ctx.Err() != nil || time.Since(ready) > 2*time.Minute {
			return err
		}
	}
}

// hold waits for d or the end of ctx.
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cutNode cuts f.Node off for f.Hold and heals it.
func (s *state) cutNode(ctx context.Context, f Fault) error {
	defer s.takeSlot(f)()
	c := s.e.c
	cut, heal := c.NodeBlackhole, c.NodeHeal
	if f.Kind == NodeDown {
		cut, heal = c.NodeDown, c.NodeUp
	}
	if err := cut(ctx, f.Node); err != nil {
		return err
	}
	s.mu.Lock()
	s.cut[f.Node] = time.Now()
	delete(s.healed, f.Node)
	s.mu.Unlock()
	hold(ctx, f.Hold)
	// Heal even when the run is cut short.
	err := heal(context.WithoutCancel(ctx), f.Node)
	s.mu.Lock()
	delete(s.cut, f.Node)
	s.healed[f.Node] = time.Now()
	s.mu.Unlock()
	return err
}

// partition cuts f.Node and f.Peer off from each other for f.Hold and
// heals them. Both still reach every other node and the clients: no
// address has to leave a status.
func (s *state) partition(ctx context.Context, f Fault) error {
	defer s.takeSlot(f)()
	if err := s.e.c.NodePartition(ctx, f.Node, f.Peer); err != nil {
		return err
	}
	hold(ctx, f.Hold)
	// NodeHeal removes every rule involving the node, the peer's too.
	return s.e.c.NodeHeal(context.WithoutCancel(ctx), f.Node)
}

// churnProbes are the probes an edit switches the churn Service between,
// with its port: the default TCP connect on churnPort, an HTTP check of
// the backend's health page on the other.
var churnProbes = [2]string{"tcp", "http path=/health body=ok"}

// editChurn moves the churn Service to its other port, replica count and
// probe.
func (s *state) editChurn(ctx context.Context) error {
	svcs := s.e.c.Client.CoreV1().Services(Namespace)
	svc, err := svcs.Get(ctx, churn, metav1.GetOptions{})
	if err != nil {
		return err
	}
	port, replicas, probe := int32(churnPort+1), "3", churnProbes[1]
	if svc.Spec.Ports[0].Port != churnPort {
		port, replicas, probe = churnPort, "2", churnProbes[0]
	}
	svc.Spec.Ports[0].Port = port
	svc.Annotations[annotationRepl] = replicas
	svc.Annotations[annotationProbe] = probe
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	s.event("%s/%s now port %d, %s replicas, probe %q", Namespace, churn, port, replicas, probe)
	return nil
}

// recreateChurn deletes the churn Service, waits until it is gone and
// creates it again.
func (s *state) recreateChurn(ctx context.Context) error {
	svcs := s.e.c.Client.CoreV1().Services(Namespace)
	s.mu.Lock()
	s.absent[churn], s.published[churn] = true, false
	s.mu.Unlock()
	if err := svcs.Delete(ctx, churn, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := scenario.Poll(ctx, time.Minute, churn+" deleted", func() bool {
		_, err := svcs.Get(ctx, churn, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}); err != nil {
		return err
	}
	var err error
	for _, svc := range services {
		if svc.Name == churn {
			// Retried while the API server restarts.
			err = scenario.Poll(ctx, time.Minute, churn+" created again", func() bool {
				err := s.e.createService(ctx, svc)
				return err == nil || apierrors.IsAlreadyExists(errors.Unwrap(err))
			})
		}
	}
	s.mu.Lock()
	delete(s.absent, churn)
	s.mu.Unlock()
	return err
}
