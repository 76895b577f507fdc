package controller

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"

	"github.com/pulselb/pulselb/api/contract"
	"github.com/pulselb/pulselb/status"
)

// judgeExternal judges, for each served Service whose external-vantages is
// not off, what the external vantages' reports in idx say about the nodes
// of its proxies (targets, as listTargets lists them), stores it for
// sync, and queues the Services whose view changed. Without external
// vantages it parses no Service.
func (c *Controller) judgeExternal(idx status.Reports, targets []healthTarget) {
	next := map[cache.ObjectName]status.External{}
	vantages := idx.ExternalVantages()
	down := 0
	if len(vantages) > 0 {
		type svcTargets struct {
			nodes []string
			ports []contract.PortKey
		}
		bySvc := map[cache.ObjectName]*svcTargets{}
		for _, t := range targets {
			if t.Beacon {
				continue
			}
			st := bySvc[t.service]
			if st == nil {
				st = &svcTargets{}
				bySvc[t.service] = st
			}
			if !slices.Contains(st.nodes, t.Node) {
				st.nodes = append(st.nodes, t.Node)
			}
			if !slices.Contains(st.ports, t.port) {
				st.ports = append(st.ports, t.port)
			}
		}
		for key, st := range bySvc {
			svc, err := c.services.Services(key.Namespace).Get(key.Name)
			if err != nil {
				continue
			}
			settings, _ := c.targetSettings.Parse(svc) // sync reports the problems
			if settings.ExternalVantages == contract.ExternalOff {
				continue
			}
			e := status.JudgeExternal(idx, key.String(), st.ports, st.nodes, settings.PublishWhen)
			down += len(e.Down)
			next[key] = e
		}
	}
	var usable, stale, cutOff int
	for _, v := range vantages {
		fresh, _ := idx.Vantage(v)
		switch {
		case !fresh:
			stale++
		case idx.CutOff(v):
			cutOff++
		default:
			usable++
		}
	}
	c.metrics.externalVantages.WithLabelValues("usable").Set(float64(usable))
	c.metrics.externalVantages.WithLabelValues("stale").Set(float64(stale))
	c.metrics.externalVantages.WithLabelValues("cutOff").Set(float64(cutOff))
	c.metrics.externalDown.Set(float64(down))

	c.mu.Lock()
	prev := c.external
	c.external = next
	c.mu.Unlock()
	for key := range prev {
		if _, ok := next[key]; !ok {
			c.queue.Add(key)
		}
	}
	for key, e := range next {
		if old, ok := prev[key]; !ok || !equality.Semantic.DeepEqual(old, e) {
			c.queue.Add(key)
		}
	}
}

// externalView returns what the external vantages say about the Service
// key, as evaluate last judged it: the zero External (no external
// vantage) when they say nothing.
func (c *Controller) externalView(key cache.ObjectName) status.External {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.external[key]
}
